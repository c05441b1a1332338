/* SPDX-License-Identifier: GPL-2.0 */
/*
 * phxfs_compat.h - the kernel API and semantics differences between the
 * kernels phxfs supports (Debian's 6.1, 6.12 and 7.2, and what lies between).
 *
 * PHXFS_HAVE_* come from kernel/Kbuild, which reads the headers being built
 * against: distributions backport API changes, so those are detected rather
 * than inferred from the version number.
 */
#ifndef PHXFS_COMPAT_H
#define PHXFS_COMPAT_H

#include <linux/device.h>
#include <linux/mm.h>
#include <linux/version.h>

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void phxfs_vm_flags_set(struct vm_area_struct *vma,
				      unsigned long flags)
{
	vma->vm_flags |= flags;
}

static inline void phxfs_vm_flags_clear(struct vm_area_struct *vma,
					unsigned long flags)
{
	vma->vm_flags &= ~flags;
}
#else
#define phxfs_vm_flags_set vm_flags_set
#define phxfs_vm_flags_clear vm_flags_clear
#endif

/* Removes every PTE of @vma; mmap_lock is held for writing. */
#if defined(PHXFS_HAVE_ZAP_VMA_RANGE)
static inline void phxfs_zap_vma(struct vm_area_struct *vma)
{
	zap_vma_range(vma, vma->vm_start, vma->vm_end - vma->vm_start);
}
#elif LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
static inline void phxfs_zap_vma(struct vm_area_struct *vma)
{
	zap_page_range(vma, vma->vm_start, vma->vm_end - vma->vm_start);
}
#else
static inline void phxfs_zap_vma(struct vm_area_struct *vma)
{
	zap_page_range_single(vma, vma->vm_start, vma->vm_end - vma->vm_start,
			      NULL);
}
#endif

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 4, 0)
#define phxfs_class_create(name) class_create(THIS_MODULE, name)
#else
#define phxfs_class_create(name) class_create(name)
#endif

#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 2, 0)
#define PHXFS_DEVNODE_CONST
#else
#define PHXFS_DEVNODE_CONST const
#endif

/*
 * struct dev_pagemap_ops' free callback took a page until it became
 * folio_free (detected).
 */
#if defined(PHXFS_HAVE_FOLIO_FREE)
#define PHXFS_PGMAP_FREE_OP folio_free
typedef struct folio phxfs_pgmap_free_arg;
#else
#define PHXFS_PGMAP_FREE_OP page_free
typedef struct page phxfs_pgmap_free_arg;
#endif

/*
 * Refcount of a ZONE_DEVICE page of type MEMORY_DEVICE_PCI_P2PDMA that
 * nobody holds.  Up to 6.14 the core initialises such pages to 1 and resets
 * them to 1 when they are freed; from 6.15 ("fs/dax: fix ZONE_DEVICE page
 * reference counts") they start at 0 and their allocator (p2pdma's pool)
 * sets 1 when it hands one out.  This is semantics, not API, so nothing in
 * the headers shows it: it is guarded by version, checked on every page at
 * load (phxfs_bar_take_pages() refuses a page that disagrees), and a kernel
 * newer than the newest one phxfs was verified on is a build error rather
 * than a guess.  Set PHXFS_UNVERIFIED_KERNEL=1 (make) to build there anyway
 * and rely on the check at load.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 1, 0)
#error "phxfs needs Linux 6.1 or newer"
#elif LINUX_VERSION_CODE < KERNEL_VERSION(6, 15, 0)
#define PHXFS_PGMAP_IDLE_REFS 1
#elif LINUX_VERSION_CODE < KERNEL_VERSION(7, 3, 0) || defined(PHXFS_UNVERIFIED_KERNEL)
#define PHXFS_PGMAP_IDLE_REFS 0
#else
#error "phxfs: ZONE_DEVICE refcount rules not verified after Linux 7.2; build with PHXFS_UNVERIFIED_KERNEL=1 to rely on the check at load"
#endif

/*
 * Refcount of a device page that phxfs has taken (all of them, from load to
 * unload) while no mapping and no I/O holds it: phxfs's own reference.  On
 * kernels whose idle pages sit at 0, phxfs sets that reference itself, so
 * that no put_page() can ever bring one of its pages to 0 and into the
 * pgmap's free callback (for p2pdma's pool: back into the allocator while
 * phxfs still maps it).
 */
#define PHXFS_IDLE_PAGE_REFS 1

#endif /* PHXFS_COMPAT_H */
