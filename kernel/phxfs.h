/* SPDX-License-Identifier: GPL-2.0 */
/*
 * phxfs.h - internal interfaces of phxfs.ko.
 *
 * Objects and their lifetimes:
 *  - struct phxfs_dev: one per served device, created at module load and
 *    destroyed at unload; immutable after creation except for counters.
 *  - struct phxfs_file: one per open() of /dev/phxfs_devN; owns a table of
 *    registrations that release() tears down.
 *  - struct phxfs_reg: one registration (pinned device range).  Referenced by
 *    its file's table and by the VMA that maps it (kref); its pin is dropped
 *    exactly once, by DEREGISTER/release or by the provider's revocation.
 */
#ifndef PHXFS_H
#define PHXFS_H

#include <linux/atomic.h>
#include <linux/cdev.h>
#include <linux/completion.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/memremap.h>
#include <linux/mutex.h>
#include <linux/path.h>
#include <linux/pci.h>
#include <linux/rcupdate.h>
#include <linux/spinlock.h>
#include <linux/uidgid.h>
#include <linux/wait.h>
#include <linux/workqueue.h>
#include <linux/xarray.h>

#include "uapi/phxfs_ioctl.h"

struct phxfs_dev;
struct phxfs_reg;

/**
 * struct phxfs_provider - how one kind of device memory is pinned.
 * @name:      shown in logs and module parameters.
 * @id:        PHXFS_PROVIDER_* reported by GET_INFO.
 * @page_size: registration granularity in bytes.
 * @info_flags: PHXFS_INFO_* bits describing the provider's current state.
 * @may_register: optional; 0 if the caller may register ranges at all, else
 *             -errno.  Called before anything sized by the caller is
 *             allocated.
 * @pin:       pins [reg->device_addr, +reg->length) and fills reg->pages;
 *             returns 0 or -errno.  May sleep.  On an error after pinning
 *             (a page table that fails validation) it leaves reg->pin set
 *             and the caller calls @unpin.
 * @unpin:     drops the pin taken by @pin.  Called once, after every user
 *             mapping is gone and the pages are idle, unless the provider
 *             revoked the registration itself.  A provider that cannot drop
 *             it from the calling context may keep reg->pin, a reference to
 *             @reg and a module reference, and drop them later through
 *             phxfs_reg_put_later().
 */
struct phxfs_provider {
	const char *name;
	u32 id;
	u32 (*page_size)(const struct phxfs_dev *dev);
	u32 (*info_flags)(const struct phxfs_dev *dev);
	int (*may_register)(const struct phxfs_dev *dev);
	int (*pin)(struct phxfs_reg *reg);
	void (*unpin)(struct phxfs_reg *reg);
};

extern const struct phxfs_provider phxfs_pcibar_provider;
extern const struct phxfs_provider phxfs_nvidia_provider;

struct phxfs_counters {
	atomic64_t regs_live;
	atomic64_t regs_total;
	atomic64_t pages_mapped;
	atomic64_t revocations;
	atomic64_t errors;
};

struct phxfs_dev {
	unsigned int index;
	struct pci_dev *pdev;
	int bar;
	bool region_requested;
	phys_addr_t bar_start;
	resource_size_t bar_size;
	const struct phxfs_provider *provider;
	/* Our own pgmap (kernels without CONFIG_PCI_P2PDMA), or NULL. */
	struct dev_pagemap *pgmap;
	/* The whole BAR allocated from its p2pdma pool (CONFIG_PCI_P2PDMA). */
	void *p2p_kaddr;
	bool p2pdma;
	struct device *node;
	/*
	 * Registrations whose teardown or revocation stopped waiting for
	 * their pages (a pipe, an io_uring fixed buffer holds them), each on
	 * @held with a module reference, and the one work item that looks at
	 * all of them every PHXFS_IDLE_POLL_MAX while any is left
	 * (phxfs_reg.c).  @held_lock is a spinlock held only to add or
	 * splice: no task that holds it can be kept off the CPU, and the
	 * poller's looks happen outside it.
	 */
	spinlock_t held_lock;
	struct list_head held;
	struct delayed_work held_poll;
	/* Next free mmap page offset; offsets are never reused. */
	atomic64_t next_pgoff;
	struct phxfs_counters stats;
	/*
	 * NVIDIA: the driver refused this device a persistent pin (MIG, vGPU);
	 * GET_INFO says PHXFS_INFO_PIN_REFUSED until one succeeds.
	 */
	bool pins_refused;
};

struct phxfs_file {
	struct phxfs_dev *dev;
	struct address_space *mapping;
	/* The node it was opened through; the file holds it. */
	struct path path;
	/* Protects regs. */
	struct mutex lock;
	/* Registrations keyed by handle (= first mmap page offset). */
	struct xarray regs;
};

enum phxfs_reg_state {
	PHXFS_REG_PINNED,   /* live; pages pinned by the provider */
	PHXFS_REG_RELEASING, /* DEREGISTER/release owns the teardown */
	PHXFS_REG_REVOKING, /* the provider revoked it (e.g. cudaFree) */
	PHXFS_REG_GONE,     /* pin dropped; only the struct remains */
	PHXFS_REG_CREATING, /* REGISTER under way; a revocation makes it GONE */
};

struct phxfs_reg {
	struct kref ref;
	struct phxfs_dev *dev;
	/* Held (ihold) until the registration is freed; so is @path. */
	struct address_space *mapping;
	struct path path;
	u64 handle;
	u64 device_addr;
	u64 length;
	unsigned long npages;
	struct page **pages;
	/* Provider data, e.g. the NVIDIA page table and which API pinned it. */
	void *pin;
	/* PHXFS_PIN_*: what @pin holds, reported by REGISTER. */
	u32 pin_api;
	atomic_t state;
	/* Orders mmap's page insertion against revocation's zap. */
	struct mutex map_lock;
	/* Pages currently inserted in a VMA (0 when unmapped or revoked). */
	atomic_long_t mapped_pages;
	atomic_t map_count;
	/* Completed when a provider revocation has finished its teardown. */
	struct completion revoked;
	/* Pages before this index were seen idle by the teardown's wait. */
	unsigned long idle_upto;
	/* On dev->held while its pages are waited for by the poller. */
	struct list_head held_node;
	/* Woken when it releases its claim; REGISTERs of its pages wait here. */
	wait_queue_head_t unclaimed;
	/* Frees it (phxfs_reg_free()). */
	struct rcu_head rcu;
	/* Drops a provider's late reference (phxfs_reg_put_later()). */
	struct delayed_work put_later;
	/*
	 * Revoked with pages still referenced: claimed, listed and charged
	 * until the device's poller finds them idle and releases it.
	 */
	bool quarantined;
	/*
	 * A teardown's bounded wait found a page still referenced: a
	 * revocation does not wait for it a second time (READ_ONCE).
	 */
	bool held;
	/*
	 * The process that made the registration (mmgrab'd, compared only):
	 * only it may map or deregister it, not a child sharing the file.
	 */
	struct mm_struct *owner_mm;
	/* For /proc/driver/phxfs: its id there, 0 until reserved. */
	u32 listing_id;
	kuid_t owner_uid;
	pid_t owner_pid;
	/* The user its caps count it against (phxfs_user_of_current()). */
	kuid_t charged_uid;
	bool charged;
};

/* phxfs_bar.c */
int phxfs_bar_create_pages(struct phxfs_dev *dev);
void phxfs_bar_destroy_pages(struct phxfs_dev *dev);
struct page *phxfs_bar_page(const struct phxfs_dev *dev, phys_addr_t phys);

/* phxfs_reg.c */
int phxfs_reg_create(struct phxfs_file *pf, u64 device_addr, u64 length,
		     struct phxfs_reg **out);
void phxfs_reg_publish(struct phxfs_file *pf, struct phxfs_reg *reg);
void phxfs_reg_abandon(struct phxfs_file *pf, struct phxfs_reg *reg);
/* A teardown's or revocation's wait that does not sleep at all. */
#define PHXFS_NO_WAIT ULONG_MAX
void phxfs_reg_teardown(struct phxfs_reg *reg, unsigned long wait);
bool phxfs_reg_revoke_begin(struct phxfs_reg *reg, unsigned long timeout);
void phxfs_reg_revoke_end(struct phxfs_reg *reg);
bool phxfs_reg_revoke_lost(struct phxfs_reg *reg, unsigned long timeout);
void phxfs_reg_put(struct phxfs_reg *reg);
void phxfs_reg_put_later(struct phxfs_reg *reg);
int phxfs_reg_mmap(struct phxfs_reg *reg, struct vm_area_struct *vma);
int phxfs_reg_module_init(void);
void phxfs_reg_module_exit(void);
void phxfs_reg_dev_init(struct phxfs_dev *dev);

/* phxfs_users.c */
kuid_t phxfs_user_of_current(void);
int phxfs_user_charge(kuid_t uid, const struct phxfs_dev *dev, u64 length);
void phxfs_user_uncharge(kuid_t uid, const struct phxfs_dev *dev, u64 length);
bool phxfs_user_revoke_spent(kuid_t uid);
void phxfs_user_revoke_gave_up(kuid_t uid, unsigned long until);

/* phxfs_proc.c */
int phxfs_listing_init(void);
void phxfs_listing_exit(void);
int phxfs_listing_reserve(struct phxfs_reg *reg);
void phxfs_listing_add(struct phxfs_reg *reg);
void phxfs_listing_del(struct phxfs_reg *reg);

/* phxfs_file.c */
extern const struct file_operations phxfs_fops;

/* phxfs_main.c */
struct phxfs_dev *phxfs_dev_get(unsigned int index);

#endif /* PHXFS_H */
