// SPDX-License-Identifier: GPL-2.0
/*
 * phxfs_users.c - what one user may keep registered: registrations and
 * bytes of device memory per user, over every device and every user
 * namespace the user makes (phxfs_user_of_current()).  A registration is
 * charged at REGISTER, before anything sized by the caller is allocated,
 * and released when the registration is freed: pages a holder (a pipe,
 * io_uring fixed buffers) keeps past its owner's DEREGISTER or exit still
 * count against the owner's user, so no user can keep more than the caps
 * however its registrations end.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/hashtable.h>
#include <linux/jiffies.h>
#include <linux/math64.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uidgid.h>
#include <linux/user_namespace.h>

#include "phxfs.h"

static uint max_regs_per_user = 65536;
module_param(max_regs_per_user, uint, 0644);
MODULE_PARM_DESC(max_regs_per_user,
		 "Registrations one user may hold over all devices, those still held past their end included (0: no limit; default 65536); REGISTER past it fails with EDQUOT");

static ulong max_pinned_mib_per_user;
module_param(max_pinned_mib_per_user, ulong, 0644);
MODULE_PARM_DESC(max_pinned_mib_per_user,
		 "Device memory one user may hold registered over all devices, MiB (0, the default: no limit); REGISTER past it fails with EDQUOT");

static uint max_bar_percent_per_user = 90;
module_param(max_bar_percent_per_user, uint, 0644);
MODULE_PARM_DESC(max_bar_percent_per_user,
		 "Percent of each device's BAR one user may hold registered, held ones included (0: no limit; default 90, so that one user cannot pin a whole BAR); users with CAP_IPC_LOCK are exempt, as from mlock limits; REGISTER past it fails with EDQUOT");

struct phxfs_user {
	struct hlist_node node;
	kuid_t uid;
	unsigned long regs;
	u64 bytes;
	/* Per device index: what max_bar_percent_per_user bounds. */
	u64 dev_bytes[PHXFS_MAX_DEVICES];
	/*
	 * NVIDIA legacy: until this time (jiffies) a free callback of this
	 * user's registrations does not wait for held pages (phxfs_nvidia.c).
	 * Kept while the user has a registration; a callback's has one.
	 */
	unsigned long revoke_spent_until;
	bool revoke_spent;
};

static DEFINE_SPINLOCK(phxfs_users_lock);
static DEFINE_HASHTABLE(phxfs_users, 6);

/**
 * phxfs_user_of_current() - the user whom the caller's registrations count against.
 *
 * In the initial user namespace, the caller's uid.  Inside a user namespace,
 * the uid that created the outermost one below the initial namespace: a user
 * with subordinate uids maps them into a namespace and setuid()s to each, and
 * every one of those is another kuid, so keying by the caller's kuid would
 * give that user each cap once per uid.  A namespace's creator is its owner,
 * and the creator of a nested one is a uid of its parent, so the chain ends
 * at a uid of the initial namespace that no mapping can multiply.
 *
 * Return: a kuid of the initial user namespace.
 */
kuid_t phxfs_user_of_current(void)
{
	const struct user_namespace *ns = current_user_ns();

	if (ns == &init_user_ns)
		return current_uid();
	while (ns->parent != &init_user_ns)
		ns = ns->parent;
	return ns->owner;
}

/* Caller holds phxfs_users_lock. */
static struct phxfs_user *phxfs_user_find(kuid_t uid)
{
	struct phxfs_user *u;

	hash_for_each_possible(phxfs_users, u, node, __kuid_val(uid))
		if (uid_eq(u->uid, uid))
			return u;
	return NULL;
}

/* The bytes of @dev's BAR one user may hold; 0: no limit. */
static u64 phxfs_user_bar_share(const struct phxfs_dev *dev)
{
	unsigned int pct = min(READ_ONCE(max_bar_percent_per_user), 100U);

	/* Before any lock; no audit record for each REGISTER without it. */
	if (!pct || pct == 100 ||
	    ns_capable_noaudit(&init_user_ns, CAP_IPC_LOCK))
		return 0;
	return div_u64(dev->bar_size * pct, 100);
}

/**
 * phxfs_user_charge() - count a registration of @length bytes of @dev
 * against @uid.
 * @uid:    the registering user (phxfs_user_of_current()).
 * @dev:    the device registered.
 * @length: its size in bytes.
 *
 * Return: 0; -EDQUOT when the user already holds max_regs_per_user
 * registrations, or the bytes would pass max_pinned_mib_per_user over all
 * devices or max_bar_percent_per_user of @dev's BAR; -ENOMEM.
 */
int phxfs_user_charge(kuid_t uid, const struct phxfs_dev *dev, u64 length)
{
	unsigned int max_regs = READ_ONCE(max_regs_per_user);
	u64 max_bytes = (u64)READ_ONCE(max_pinned_mib_per_user) << 20;
	u64 share = phxfs_user_bar_share(dev);
	struct phxfs_user *fresh, *u, *unused = NULL;
	u64 *on_dev;
	int ret = 0;

	fresh = kzalloc(sizeof(*fresh), GFP_KERNEL);
	if (!fresh)
		return -ENOMEM;
	spin_lock(&phxfs_users_lock);
	u = phxfs_user_find(uid);
	if (!u) {
		u = fresh;
		fresh = NULL;
		u->uid = uid;
		hash_add(phxfs_users, &u->node, __kuid_val(uid));
	}
	on_dev = &u->dev_bytes[dev->index];
	if ((max_regs && u->regs >= max_regs) ||
	    (max_bytes && (length > max_bytes || u->bytes > max_bytes - length)) ||
	    (share && (length > share || *on_dev > share - length))) {
		ret = -EDQUOT;
		if (!u->regs) {
			hash_del(&u->node);
			unused = u;
		}
	} else {
		u->regs++;
		u->bytes += length;
		*on_dev += length;
	}
	spin_unlock(&phxfs_users_lock);
	kfree(fresh);
	kfree(unused);
	return ret;
}

/**
 * phxfs_user_uncharge() - release what phxfs_user_charge() counted.
 * @uid:    the user charged.
 * @dev:    the device registered.
 * @length: the bytes charged.
 */
void phxfs_user_uncharge(kuid_t uid, const struct phxfs_dev *dev, u64 length)
{
	struct phxfs_user *u, *gone = NULL;

	spin_lock(&phxfs_users_lock);
	u = phxfs_user_find(uid);
	if (!WARN_ON_ONCE(!u || !u->regs || u->bytes < length ||
			  u->dev_bytes[dev->index] < length)) {
		u->regs--;
		u->bytes -= length;
		u->dev_bytes[dev->index] -= length;
		if (!u->regs) {
			hash_del(&u->node);
			gone = u;
		}
	}
	spin_unlock(&phxfs_users_lock);
	kfree(gone);
}

/**
 * phxfs_user_revoke_spent() - whether @uid's give-up window is open: a free
 * callback of one of its registrations gave up waiting for held pages less
 * than the window ago (phxfs_user_revoke_gave_up()).
 * @uid: the user a registration is charged to (reg->charged_uid).
 *
 * Return: true while the window is open.
 */
bool phxfs_user_revoke_spent(kuid_t uid)
{
	struct phxfs_user *u;
	bool spent = false;

	spin_lock(&phxfs_users_lock);
	u = phxfs_user_find(uid);
	if (u && u->revoke_spent)
		spent = time_before(jiffies, u->revoke_spent_until);
	spin_unlock(&phxfs_users_lock);
	return spent;
}

/**
 * phxfs_user_revoke_gave_up() - open @uid's give-up window until @until.
 * @uid:   the user a registration is charged to.
 * @until: jiffies.
 */
void phxfs_user_revoke_gave_up(kuid_t uid, unsigned long until)
{
	struct phxfs_user *u;

	spin_lock(&phxfs_users_lock);
	u = phxfs_user_find(uid);
	if (u) {
		u->revoke_spent_until = until;
		u->revoke_spent = true;
	}
	spin_unlock(&phxfs_users_lock);
}
