/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * nvemu_uapi.h - control interface of the rig's NVIDIA p2p emulation module
 * (/dev/nvemu).  Test-only: it plays CUDA's part (cudaMalloc/cudaFree) over
 * an ivshmem BAR so that phxfs's NVIDIA provider runs for real in the guest.
 */
#ifndef NVEMU_UAPI_H
#define NVEMU_UAPI_H

#include <linux/ioctl.h>
#include <linux/types.h>

/* Fake GPU virtual addresses: base + BAR offset (64 KiB pages). */
#define NVEMU_VA_BASE 0x7e0000000000ULL
#define NVEMU_GPU_PAGE 0x10000ULL

/* Swap every pair of 64 KiB pages: VA-contiguous, physically scattered. */
#define NVEMU_ALLOC_SCATTER (1U << 0)
/*
 * Memory of another GPU, one whose driver refuses persistent pins (MIG):
 * persistent get_pages fails with -ENOTSUPP, and legacy get_pages gives
 * physical addresses past the end of this BAR.
 */
#define NVEMU_ALLOC_OTHER_GPU (1U << 1)
/*
 * A legacy get_pages of this memory sleeps NVEMU_SLOW_PIN_MS before it
 * pins: the driver busy, or the calling thread starved of CPU inside it.
 */
#define NVEMU_ALLOC_SLOW_PIN (1U << 2)
#define NVEMU_SLOW_PIN_MS 2000

struct nvemu_alloc {
	__u64 length;     /* in: multiple of 64 KiB */
	__u32 flags;      /* in: NVEMU_ALLOC_* */
	__u32 pad;
	__u64 va;         /* out: fake GPU VA */
	__u64 bar_offset; /* out: BAR offset of the first 64 KiB page of the range */
};

struct nvemu_free {
	__u64 va;
};

struct nvemu_stats {
	__u64 allocs_live;
	__u64 pins_live;
	__u64 persistent_pins;
	__u64 legacy_pins;
	__u64 callbacks;
	__u64 deferred_frees;
	__u64 raced_puts; /* put_pages that met a callback and returned 0 */
	__u64 foreign_puts; /* legacy put_pages from another process: 0, nothing freed */
	__u64 last_callback_ns; /* how long the last free callback took to return */
	__u64 slow_pins_sleeping; /* legacy get_pages of NVEMU_ALLOC_SLOW_PIN memory, now */
};

/*
 * Reads "GPU memory" whoever owns it now, freed memory included: what a
 * test checks after a holder outlived cudaFree.  Needs the BAR's pages
 * (phxfs loaded); at most 1 MiB.
 */
struct nvemu_peek {
	__u64 bar_offset;
	__u64 length;
	__u64 buf; /* user pointer */
};

#define NVEMU_IOC_ALLOC _IOWR('N', 1, struct nvemu_alloc)
#define NVEMU_IOC_FREE _IOW('N', 2, struct nvemu_free)
#define NVEMU_IOC_STATS _IOR('N', 3, struct nvemu_stats)
#define NVEMU_IOC_PEEK _IOW('N', 4, struct nvemu_peek)

#endif
