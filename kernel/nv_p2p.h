/* SPDX-License-Identifier: GPL-2.0 */
/*
 * nv_p2p.h - the subset of NVIDIA's GPUDirect RDMA kernel interface that
 * phxfs uses, declared from the documented ABI (nv-p2p.h of the NVIDIA
 * driver).  phxfs never links against these symbols: it resolves them with
 * symbol_get() at registration time, so the module loads without the NVIDIA
 * driver and picks it up once it is loaded.  The rig's emulation module
 * (tests/vm/nvemu) implements the same ABI from this header.
 */
#ifndef PHXFS_NV_P2P_H
#define PHXFS_NV_P2P_H

#include <linux/types.h>

/* Versions: major in the upper 16 bits, minor in the lower 16. */
#define NVIDIA_P2P_MAJOR(v) (((v) >> 16) & 0xffffU)
#define NVIDIA_P2P_MINOR(v) ((v) & 0xffffU)
#define NVIDIA_P2P_PAGE_TABLE_VERSION 0x00010002U

#define NVIDIA_P2P_FLAGS_DEFAULT 0U

enum nvidia_p2p_page_size_type {
	NVIDIA_P2P_PAGE_SIZE_4KB = 0,
	NVIDIA_P2P_PAGE_SIZE_64KB = 1,
	NVIDIA_P2P_PAGE_SIZE_128KB = 2,
	NVIDIA_P2P_PAGE_SIZE_COUNT
};

/* GPU pinning granularity: virtual addresses and lengths are in 64 KiB units. */
#define NVIDIA_P2P_GPU_PAGE_SIZE 0x10000ULL

struct nvidia_p2p_page {
	u64 physical_address;
	union nvidia_p2p_request_registers {
		struct {
			u32 wreqmb_h;
			u32 rreqmb_h;
			u32 rreqmb_0;
			u32 reserved[3];
		} fermi;
	} registers;
};

struct nvidia_p2p_page_table {
	u32 version;
	u32 page_size; /* enum nvidia_p2p_page_size_type */
	struct nvidia_p2p_page **pages;
	u32 entries;
	u8 *gpu_uuid;
};

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data);
int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table);
int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags);
int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags);

#endif /* PHXFS_NV_P2P_H */
