// SPDX-License-Identifier: GPL-2.0
/*
 * vmtest_rdma.c - Soft-RoCE in the guest for the holder tests: a device of
 * its own (rxe on a dummy netdev), a memory region over the caller's
 * memory, and a queue pair connected to itself that RDMA WRITEs into that
 * region as a remote peer would.  Linked statically with the rxe provider
 * (RDMA_STATIC_PROVIDERS, build-guest).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vmtest.h"
#include "vmtest_rdma.h"

#define RXE_NAME "phxrxe"
#define RXE_NETDEV "phxh0"

static void link_down(void) {
  (void)!system("rdma link delete " RXE_NAME " >/dev/null 2>&1; ip link del " RXE_NETDEV
                " >/dev/null 2>&1");
}

static struct ibv_device *find_rxe(struct ibv_device **list, int n) {
  for (int i = 0; i < n; i++)
    if (!strcmp(ibv_get_device_name(list[i]), RXE_NAME))
      return list[i];
  return NULL;
}

/* The RoCE v2 GID of the netdev's IPv4 address (::ffff:a.b.c.d); it appears asynchronously. */
static int find_ipv4_gid(struct rdma_holder *h) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

  for (int tries = 0; tries < 40; tries++) {
    for (int i = 0; i < 16; i++) {
      union ibv_gid g;

      if (ibv_query_gid(h->ctx, 1, i, &g))
        break;
      if (!memcmp(g.raw, mapped, sizeof(mapped))) {
        h->gid_index = i;
        memcpy(h->gid, g.raw, sizeof(h->gid));
        return 0;
      }
    }
    usleep(50000);
  }
  return -1;
}

/* RESET -> INIT -> RTR -> RTS, its destination itself. */
static int connect_to_self(struct rdma_holder *h) {
  struct ibv_qp_attr a;

  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (ibv_modify_qp(h->qp, &a,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return -1;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = h->qp->qp_num;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.sgid_index = (uint8_t)h->gid_index;
  a.ah_attr.grh.hop_limit = 1;
  memcpy(a.ah_attr.grh.dgid.raw, h->gid, sizeof(h->gid));
  if (ibv_modify_qp(h->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(h->qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)
             ? -1
             : 0;
}

int rdma_holder_start(struct rdma_holder *h, size_t max_write, char *detail, size_t len) {
  struct ibv_qp_init_attr qi;
  struct ibv_device **list = NULL, *dev;
  int n = 0;

  memset(h, 0, sizeof(*h));
  if (system("modprobe rdma_rxe >/dev/null 2>&1")) {
    snprintf(detail, len, "no Soft-RoCE on this kernel: modprobe rdma_rxe failed");
    return 1;
  }
  link_down();
  if (system("ip link add " RXE_NETDEV " type dummy && ip addr add 10.98.0.1/24 dev " RXE_NETDEV
             " && ip link set " RXE_NETDEV " up && rdma link add " RXE_NAME
             " type rxe netdev " RXE_NETDEV)) {
    link_down();
    snprintf(detail, len, "rdma link add %s type rxe netdev %s failed", RXE_NAME, RXE_NETDEV);
    return -1;
  }
  h->made_link = 1;
  list = ibv_get_device_list(&n);
  dev = list ? find_rxe(list, n) : NULL;
  if (!dev || !(h->ctx = ibv_open_device(dev))) {
    snprintf(detail, len, "%s: %d verbs devices, not opened: %s", RXE_NAME, n, strerror(errno));
    goto fail;
  }
  ibv_free_device_list(list);
  list = NULL;
  h->src_len = max_write;
  h->src = malloc(max_write);
  h->pd = ibv_alloc_pd(h->ctx);
  h->cq = h->pd ? ibv_create_cq(h->ctx, 4, NULL, NULL, 0) : NULL;
  h->src_mr = h->cq && h->src ? ibv_reg_mr(h->pd, h->src, max_write, IBV_ACCESS_LOCAL_WRITE) : NULL;
  if (!h->src_mr) {
    snprintf(detail, len, "protection domain, completion queue or host region: %s",
             strerror(errno));
    goto fail;
  }
  memset(&qi, 0, sizeof(qi));
  qi.send_cq = qi.recv_cq = h->cq;
  qi.qp_type = IBV_QPT_RC;
  qi.cap.max_send_wr = 2;
  qi.cap.max_recv_wr = 1;
  qi.cap.max_send_sge = qi.cap.max_recv_sge = 1;
  h->qp = ibv_create_qp(h->pd, &qi);
  if (!h->qp || find_ipv4_gid(h) || connect_to_self(h)) {
    snprintf(detail, len, "queue pair connected to itself: %s",
             h->qp ? "no IPv4 GID or a transition failed" : strerror(errno));
    goto fail;
  }
  return 0;
fail:
  if (list)
    ibv_free_device_list(list);
  rdma_holder_stop(h);
  return -1;
}

int rdma_holder_hold(struct rdma_holder *h, void *addr, size_t size) {
  h->held = ibv_reg_mr(h->pd, addr, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  return h->held ? 0 : -errno;
}

int rdma_holder_write(struct rdma_holder *h, unsigned char fill, size_t size) {
  struct ibv_sge sge = {
      .addr = (uintptr_t)h->src, .length = (uint32_t)size, .lkey = h->src_mr->lkey};
  struct ibv_send_wr wr, *bad;
  struct ibv_wc wc;
  int polled = 0;

  if (!h->held || size > h->src_len)
    return -1;
  memset(h->src, fill, size);
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = (uintptr_t)h->held->addr;
  wr.wr.rdma.rkey = h->held->rkey;
  if (ibv_post_send(h->qp, &wr, &bad))
    return -1;
  for (int i = 0; i < 5000 && !polled; i++) {
    polled = ibv_poll_cq(h->cq, 1, &wc);
    if (!polled)
      usleep(1000);
  }
  return polled == 1 && wc.status == IBV_WC_SUCCESS ? 0 : -1;
}

void rdma_holder_release(struct rdma_holder *h) {
  if (h->held)
    ibv_dereg_mr(h->held);
  h->held = NULL;
}

void rdma_holder_stop(struct rdma_holder *h) {
  rdma_holder_release(h);
  if (h->qp)
    ibv_destroy_qp(h->qp);
  if (h->src_mr)
    ibv_dereg_mr(h->src_mr);
  if (h->cq)
    ibv_destroy_cq(h->cq);
  if (h->pd)
    ibv_dealloc_pd(h->pd);
  if (h->ctx)
    ibv_close_device(h->ctx);
  free(h->src);
  if (h->made_link)
    link_down();
  memset(h, 0, sizeof(*h));
}
