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

#include <linux/list.h>
#include <linux/proc_fs.h>
#include <linux/seq_file.h>
#include <linux/spinlock.h>
#include <linux/uidgid.h>

#include "phxfs.h"

static DEFINE_SPINLOCK(phxfs_listing_lock);
static LIST_HEAD(phxfs_listing);

/**
 * phxfs_listing_add() - list a registration that REGISTER made.
 * @reg: registration.
 */
void phxfs_listing_add(struct phxfs_reg *reg)
{
	spin_lock(&phxfs_listing_lock);
	list_add_tail(&reg->listed, &phxfs_listing);
	spin_unlock(&phxfs_listing_lock);
}

/**
 * phxfs_listing_del() - unlist a registration being freed (if listed).
 * @reg: registration.
 */
void phxfs_listing_del(struct phxfs_reg *reg)
{
	spin_lock(&phxfs_listing_lock);
	list_del_init(&reg->listed);
	spin_unlock(&phxfs_listing_lock);
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

/* The list's lock is held from start to stop: show neither sleeps nor allocates. */
static void *phxfs_listing_start(struct seq_file *m, loff_t *pos)
	__acquires(&phxfs_listing_lock)
{
	spin_lock(&phxfs_listing_lock);
	return seq_list_start_head(&phxfs_listing, *pos);
}

static void *phxfs_listing_next(struct seq_file *m, void *v, loff_t *pos)
{
	return seq_list_next(v, &phxfs_listing, pos);
}

static void phxfs_listing_stop(struct seq_file *m, void *v)
	__releases(&phxfs_listing_lock)
{
	spin_unlock(&phxfs_listing_lock);
}

static int phxfs_listing_show(struct seq_file *m, void *v)
{
	const struct phxfs_reg *reg;

	if (v == &phxfs_listing) {
		seq_puts(m, "dev handle pid uid device_addr bytes state pin\n");
		return 0;
	}
	reg = list_entry(v, struct phxfs_reg, listed);
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
