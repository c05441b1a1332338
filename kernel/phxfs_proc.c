// SPDX-License-Identifier: GPL-2.0
/*
 * phxfs_proc.c - /proc/driver/phxfs: every registration that exists, for
 * the administrator (root only): live ones, those being torn down while
 * user space still holds their pages, and those a provider revoked whose
 * pages are still held (quarantined), with their owner, size, state and
 * pin.  A registration is listed from a successful REGISTER until it is
 * freed, which for held pages is after its file and process are gone.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/uidgid.h>
#include <linux/xarray.h>

#include "phxfs.h"

/*
 * By listing id, allocated in increasing order: a reader that stops
 * between two chunks of output resumes at the next id with one lookup,
 * so each chunk costs the same however many registrations there are (a
 * list would be walked from its head again for every chunk, O(n^2)
 * under a lock every REGISTER and free takes).
 */
static DEFINE_XARRAY_ALLOC(phxfs_listing);
static u32 phxfs_listing_next_id;

/**
 * phxfs_listing_reserve() - reserve @reg's place in the listing, at
 * REGISTER before anything can no longer fail.
 * @reg: registration being made.
 *
 * Return: 0 or -ENOMEM (or -EBUSY with 2^31 registrations listed).
 */
int phxfs_listing_reserve(struct phxfs_reg *reg)
{
	int ret;

	/* A NULL entry reserves the id: readers do not see it yet. */
	ret = xa_alloc_cyclic(&phxfs_listing, &reg->listing_id, NULL,
			      XA_LIMIT(1, INT_MAX), &phxfs_listing_next_id,
			      GFP_KERNEL_ACCOUNT);
	return ret < 0 ? ret : 0;
}

/**
 * phxfs_listing_add() - list a registration that REGISTER made.
 * @reg: registration, its place reserved.
 */
void phxfs_listing_add(struct phxfs_reg *reg)
{
	/* Into the reserved slot: allocates nothing. */
	WARN_ON_ONCE(xa_is_err(xa_store(&phxfs_listing, reg->listing_id, reg,
					GFP_KERNEL)));
}

/**
 * phxfs_listing_del() - unlist a registration being freed, or release its
 * reserved place.
 * @reg: registration.
 */
void phxfs_listing_del(struct phxfs_reg *reg)
{
	if (reg->listing_id)
		xa_erase(&phxfs_listing, reg->listing_id);
}

static const char *phxfs_listing_state(const struct phxfs_reg *reg)
{
	switch (atomic_read(&reg->state)) {
	case PHXFS_REG_PINNED:
		return "live";
	case PHXFS_REG_RELEASING:
		return READ_ONCE(reg->held) ? "held" : "releasing";
	case PHXFS_REG_REVOKING:
		return "revoking";
	default:
		return reg->quarantined ? "quarantined" : "gone";
	}
}

static const char *phxfs_listing_pin(u32 pin_api)
{
	switch (pin_api) {
	case PHXFS_PIN_BAR:
		return "bar";
	case PHXFS_PIN_PERSISTENT:
		return "persistent";
	case PHXFS_PIN_LEGACY:
		return "legacy";
	default:
		return "-";
	}
}

/*
 * The first registration listed at or after position *@pos, which is its
 * listing id (0 is the header); *@pos becomes its id.
 */
static struct phxfs_reg *phxfs_listing_find(loff_t *pos)
{
	unsigned long id = *pos;
	struct phxfs_reg *reg;

	reg = xa_find(&phxfs_listing, &id, INT_MAX, XA_PRESENT);
	if (reg)
		*pos = id;
	return reg;
}

/*
 * The array's lock is held from start to stop, one chunk of output: show
 * neither sleeps nor allocates, and a registration cannot be freed
 * meanwhile (phxfs_listing_del() takes the lock).
 */
static void *phxfs_listing_start(struct seq_file *m, loff_t *pos)
	__acquires(&phxfs_listing.xa_lock)
{
	xa_lock(&phxfs_listing);
	if (!*pos)
		return SEQ_START_TOKEN;
	return phxfs_listing_find(pos);
}

static void *phxfs_listing_next(struct seq_file *m, void *v, loff_t *pos)
{
	const struct phxfs_reg *reg = v;

	/* Always past the current position, also at the end. */
	*pos = v == SEQ_START_TOKEN ? 1 : (loff_t)reg->listing_id + 1;
	return phxfs_listing_find(pos);
}

static void phxfs_listing_stop(struct seq_file *m, void *v)
	__releases(&phxfs_listing.xa_lock)
{
	xa_unlock(&phxfs_listing);
}

static int phxfs_listing_show(struct seq_file *m, void *v)
{
	const struct phxfs_reg *reg;

	if (v == SEQ_START_TOKEN) {
		seq_puts(m, "dev handle pid uid device_addr bytes state pin\n");
		return 0;
	}
	reg = v;
	seq_printf(m, "%u %llu %d %u %#llx %llu %s %s\n", reg->dev->index,
		   reg->handle, reg->owner_pid,
		   from_kuid_munged(&init_user_ns, reg->owner_uid),
		   reg->device_addr, reg->length, phxfs_listing_state(reg),
		   phxfs_listing_pin(reg->pin_api));
	return 0;
}

static const struct seq_operations phxfs_listing_ops = {
	.start = phxfs_listing_start,
	.next = phxfs_listing_next,
	.stop = phxfs_listing_stop,
	.show = phxfs_listing_show,
};

static struct proc_dir_entry *phxfs_listing_entry;

/**
 * phxfs_listing_init() - create /proc/driver/phxfs (mode 0400).
 *
 * Return: 0 or -ENOMEM.
 */
int phxfs_listing_init(void)
{
	phxfs_listing_entry = proc_create_seq("driver/phxfs", 0400, NULL,
					      &phxfs_listing_ops);
	return phxfs_listing_entry ? 0 : -ENOMEM;
}

/**
 * phxfs_listing_exit() - remove /proc/driver/phxfs; waits for its readers.
 */
void phxfs_listing_exit(void)
{
	proc_remove(phxfs_listing_entry);
}
