/* SPDX-License-Identifier: GPL-2.0 */
/* phxfs_compat.h - the few kernel API differences between 6.1 and 6.12. */
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
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 3, 0)
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

#endif /* PHXFS_COMPAT_H */
