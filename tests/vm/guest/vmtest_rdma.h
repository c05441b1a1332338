/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vmtest_rdma.h - an RDMA memory region over device memory, through
 * Soft-RoCE (rdma_rxe on a dummy netdev in the guest): a holder of pages
 * that user space keeps for as long as it likes, and that a peer can
 * write into with RDMA WRITE at any time (issue 37).
 */
#ifndef VMTEST_RDMA_H
#define VMTEST_RDMA_H

#include <stddef.h>
#include <stdint.h>

struct ibv_context;
struct ibv_pd;
struct ibv_cq;
struct ibv_qp;
struct ibv_mr;

struct rdma_holder {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *held; /* over the caller's memory (rdma_holder_hold) */
  struct ibv_mr *src_mr;
  unsigned char *src;
  size_t src_len;
  int gid_index;
  uint8_t gid[16];
  int made_link;
};

/*
 * Brings up Soft-RoCE (rdma_rxe on a dummy netdev of its own) and a
 * reliable-connected queue pair connected to itself.  Returns 0; 1 when
 * this kernel cannot (detail says why); -1.
 */
int rdma_holder_start(struct rdma_holder *h, size_t max_write, char *detail, size_t len);
/* Registers [addr, addr + size) as a memory region.  Returns 0 or -errno. */
int rdma_holder_hold(struct rdma_holder *h, void *addr, size_t size);
/*
 * RDMA WRITEs @size bytes of @fill into the held region through the queue
 * pair, as a peer would, and waits for it.  Returns 0 or -1.
 */
int rdma_holder_write(struct rdma_holder *h, unsigned char fill, size_t size);
/* Deregisters the held region: its pages are let go. */
void rdma_holder_release(struct rdma_holder *h);
void rdma_holder_stop(struct rdma_holder *h);

#endif
