// SPDX-License-Identifier: GPL-2.0
/*
 * phxfs_reg.c - life of one registration: pin, claim, map, revoke, unpin.
 *
 * Teardown is owned by whoever moves the state away from PINNED first:
 * DEREGISTER/release (RELEASING, then the provider's unpin) or the provider
 * itself (REVOKING, e.g. the NVIDIA free callback after cudaFree).  Either
 * way the user mapping is zapped and every page's refcount must fall back to
 * its idle value before the pin goes: a GUP reference still held means an
 * O_DIRECT or io_uring transfer is still DMAing into the pages.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/module.h>
#include <linux/workqueue.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/jiffies.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/slab.h>

#include "phxfs.h"
#include "phxfs_compat.h"

/*
 * Teardowns that outlive their caller (a killed DEREGISTER, a release that
 * stopped waiting) finish here.  phxfs_exit() destroys it, which waits for
 * a work item that has just dropped its module reference to return.
 */
static struct workqueue_struct *phxfs_wq;

static void phxfs_reg_put_later_work(struct work_struct *work);

/* Longest sleep between two looks at a busy page's refcount. */
#define PHXFS_IDLE_POLL_MAX (HZ / 10)

/* Pages a fault maps beyond the faulting one (2 MiB with 4 KiB pages). */
#define PHXFS_INSERT_BATCH 512UL

static void phxfs_reg_free(struct kref *ref)
{
	struct phxfs_reg *reg = container_of(ref, struct phxfs_reg, ref);

	phxfs_listing_del(reg);
	if (reg->charged)
		phxfs_user_uncharge(reg->charged_uid, reg->dev, reg->length);
	if (reg->owner_mm)
		mmdrop(reg->owner_mm);
	if (reg->mapping)
		iput(reg->mapping->host);
	if (reg->path.dentry)
		path_put(&reg->path);
	kvfree(reg->pages);
	/*
	 * A REGISTER that finds this one's claim on a page takes a reference
	 * under RCU (phxfs_reg_try_claim()), racing with the last put.
	 */
	kfree_rcu(reg, rcu);
}

/**
 * phxfs_reg_put() - drop a reference to a registration.
 * @reg: registration.
 */
void phxfs_reg_put(struct phxfs_reg *reg)
{
	kref_put(&reg->ref, phxfs_reg_free);
}

/*
 * How long a REGISTER waits for pages that a registration being torn down
 * still claims.  The teardown holds its claim until DMA in flight on the
 * pages has finished, and with NVIDIA's legacy API the driver may already
 * have handed the memory to a new allocation by then (the free callback
 * cannot wait for a DEREGISTER that owns the teardown): without the wait,
 * registering that allocation fails for a few milliseconds.  Bounded, so
 * that pages held for good (an io_uring fixed buffer, a vmsplice'd pipe)
 * still give -EBUSY.
 */
#define PHXFS_CLAIM_WAIT (HZ)

/*
 * Pages claimed or released between two offers of the CPU (2 MiB with 4
 * KiB pages).  A claim is a cmpxchg on each page's zone_device_data and
 * takes no lock: a registration of a whole large GPU (37 million pages
 * for 141 GiB) holds nothing anyone else waits for while it walks, and
 * however many walks a tenant starts, at whatever scheduling class or
 * cgroup limit, another tenant's REGISTER, DEREGISTER, exit or free
 * callback never waits for one of them to get a CPU.  (A semaphore handed
 * from walk to walk made each such wait one batch per waiter ahead, and
 * handed it to waiters that could not run.)
 */
#define PHXFS_CLAIM_BATCH 512UL

/* Releases @reg's claim on pages [0, @end). */
static void phxfs_reg_unclaim_upto(struct phxfs_reg *reg, unsigned long end)
{
	unsigned long i;

	for (i = 0; i < end; i++) {
		cmpxchg(&reg->pages[i]->zone_device_data, reg, NULL);
		if (!((i + 1) % PHXFS_CLAIM_BATCH))
			cond_resched();
	}
}

/*
 * Device pages belong to at most one registration at a time, so "idle" is
 * exact: zone_device_data (unused by the core for these pgmap types) names
 * the owner.  Every path releases a registration's claims before it drops
 * the reference that they stand for, so a registration that still claims
 * a page is alive; one whose last reference went meanwhile is freed after
 * an RCU grace period (phxfs_reg_free()).
 *
 * Returns the owner of the first page another registration claims, with a
 * reference for the caller and @reg claiming nothing, or NULL with @reg
 * claiming every page.  Sets @dying when that owner's teardown has begun:
 * it releases the claim on its own, once its pages are idle.
 *
 * Between two pages another REGISTER of overlapping pages may see part of
 * @reg's claim and fail with -EBUSY, as it would once @reg held them all.
 */
static struct phxfs_reg *phxfs_reg_try_claim(struct phxfs_reg *reg,
					     struct page **busy, bool *dying)
{
	struct phxfs_reg *owner = NULL;
	unsigned long i = 0;
	int state;

	while (i < reg->npages) {
		struct page *page = reg->pages[i];

		rcu_read_lock();
		owner = cmpxchg(&page->zone_device_data, NULL, reg);
		if (owner && !kref_get_unless_zero(&owner->ref)) {
			/* Its claim went with its last reference: look again. */
			rcu_read_unlock();
			cpu_relax();
			continue;
		}
		rcu_read_unlock();
		if (owner)
			break;
		if (!(++i % PHXFS_CLAIM_BATCH))
			cond_resched();
	}
	if (!owner)
		return NULL;
	*busy = reg->pages[i];
	state = atomic_read(&owner->state);
	*dying = state == PHXFS_REG_RELEASING || state == PHXFS_REG_REVOKING;
	phxfs_reg_unclaim_upto(reg, i);
	return owner;
}

/*
 * -EBUSY at once when a live registration (or one being created) holds
 * some of the pages; when only dying ones do, waits up to PHXFS_CLAIM_WAIT
 * for them to let go.  -ERESTARTSYS on a signal.
 */
static int phxfs_reg_claim(struct phxfs_reg *reg)
{
	unsigned long deadline = jiffies + PHXFS_CLAIM_WAIT;
	struct phxfs_reg *owner;
	struct page *busy;
	bool dying;
	long left;

	while ((owner = phxfs_reg_try_claim(reg, &busy, &dying))) {
		left = (long)(deadline - jiffies);
		/* Only this owner's release wakes us, no other's. */
		if (dying && left > 0)
			left = wait_event_interruptible_timeout(
				owner->unclaimed,
				READ_ONCE(busy->zone_device_data) != owner,
				left);
		else
			left = 0;
		phxfs_reg_put(owner);
		if (left < 0)
			return left;
		if (!left)
			return -EBUSY;
	}
	return 0;
}

static void phxfs_reg_unclaim(struct phxfs_reg *reg)
{
	phxfs_reg_unclaim_upto(reg, reg->npages);
	wake_up_all(&reg->unclaimed);
}

static bool phxfs_page_idle(struct page *page)
{
	return page_ref_count(page) <= PHXFS_IDLE_PAGE_REFS;
}

/*
 * Waits until pages [*@cursor, npages) are idle, i.e. no GUP reference
 * (O_DIRECT or io_uring DMA in flight, an io_uring fixed buffer, a
 * vmsplice'd pipe) is left, advancing *@cursor past each idle page.
 *
 * The kernel tells nobody when such a reference goes: put_page() calls the
 * pgmap's page_free only when the count reaches zero, and a page phxfs
 * claims idles at PHXFS_IDLE_PAGE_REFS, above zero.  So this re-checks the
 * count after sleeping one jiffy at first, doubling up to
 * PHXFS_IDLE_POLL_MAX: DMA in flight usually ends within the first sleeps,
 * and a reference held for long costs ten wake-ups a second, not
 * thousands.
 *
 * Return: 0; -EINTR when @killable and the caller is being killed;
 * -ETIMEDOUT when @timeout jiffies (0: no limit) have passed, at once for
 * PHXFS_NO_WAIT.
 */
static int phxfs_reg_wait_pages(struct phxfs_reg *reg, unsigned long *cursor,
				bool killable, unsigned long timeout)
{
	unsigned long start = jiffies, poll = 1;
	bool told = false;

	for (; *cursor < reg->npages; (*cursor)++) {
		struct page *page = reg->pages[*cursor];

		while (!phxfs_page_idle(page)) {
			if (timeout == PHXFS_NO_WAIT ||
			    (timeout && time_after(jiffies, start + timeout)))
				return -ETIMEDOUT;
			if (!told && time_after(jiffies, start + 10 * HZ)) {
				pr_info_ratelimited("dev%u: handle %llu: still waiting for I/O in flight on page %lu\n",
					reg->dev->index, reg->handle, *cursor);
				told = true;
			}
			if (killable) {
				schedule_timeout_killable(poll);
				if (fatal_signal_pending(current))
					return -EINTR;
			} else {
				schedule_timeout_uninterruptible(poll);
			}
			poll = min_t(unsigned long, poll * 2,
				     PHXFS_IDLE_POLL_MAX);
		}
		if (!(*cursor & 1023))
			cond_resched();
	}
	return 0;
}

/*
 * Advances reg->idle_upto past the pages that are idle, without sleeping.
 *
 * Return: true when every page is.
 */
static bool phxfs_reg_drained(struct phxfs_reg *reg)
{
	while (reg->idle_upto < reg->npages) {
		if (!phxfs_page_idle(reg->pages[reg->idle_upto]))
			return false;
		if (!(++reg->idle_upto & 1023))
			cond_resched();
	}
	return true;
}

/*
 * Zap every user PTE of the registration.  Taking map_lock after the state
 * left PINNED means a fault that raced with us has either finished
 * inserting (and is zapped here: a faulting VMA is in the mapping tree) or
 * will see the new state.  ->mmap inserts nothing, so a VMA not yet linked
 * has no PTEs to miss.
 */
static void phxfs_reg_zap(struct phxfs_reg *reg)
{
	long mapped;

	mutex_lock(&reg->map_lock);
	mutex_unlock(&reg->map_lock);
	unmap_mapping_range(reg->mapping, (loff_t)reg->handle << PAGE_SHIFT,
			    (loff_t)reg->npages << PAGE_SHIFT, 1);
	mapped = atomic_long_xchg(&reg->mapped_pages, 0);
	atomic64_sub(mapped, &reg->dev->stats.pages_mapped);
}

/* Pages idle: give them back to the provider and drop the table's reference. */
static void phxfs_reg_finish(struct phxfs_reg *reg)
{
	struct phxfs_dev *dev = reg->dev;

	phxfs_reg_unclaim(reg);
	dev->provider->unpin(reg);
	atomic_set(&reg->state, PHXFS_REG_GONE);
	atomic64_dec(&dev->stats.regs_live);
	phxfs_reg_put(reg);
}

/*
 * A quarantined registration's pages are idle at last: let them go.  Its
 * revocation has already given the memory back to the provider.
 */
static void phxfs_reg_release_quarantine(struct phxfs_reg *reg)
{
	struct phxfs_dev *dev = reg->dev;

	phxfs_reg_unclaim(reg);
	pr_info_ratelimited("dev%u: handle %llu: the pages held past its revocation are free\n",
		dev->index, reg->handle);
	/* Counted live until now: regs_live 0 means nothing is held. */
	atomic64_dec(&dev->stats.regs_live);
	phxfs_reg_put(reg);
}

/*
 * The device's poller: finishes each held registration whose pages are
 * idle now, a teardown whose caller stopped waiting (RELEASING) or a
 * quarantine after a revocation, and looks again in PHXFS_IDLE_POLL_MAX
 * while any is left.  User space can hold the references for as long as
 * it likes, so nothing sleeps on them: one work item per device wakes ten
 * times a second however many registrations are held, and occupies no
 * worker in between.
 */
static void phxfs_reg_poll_held(struct work_struct *work)
{
	struct phxfs_dev *dev =
		container_of(to_delayed_work(work), struct phxfs_dev, held_poll);
	struct phxfs_reg *reg, *next;
	LIST_HEAD(looking);
	LIST_HEAD(idle);

	/*
	 * The walks happen off the list and outside the lock: a whole-BAR
	 * registration is tens of millions of pages, and a teardown or
	 * revocation handing one over (phxfs_reg_hold()) waits only for the
	 * splices.  Only this work item advances idle_upto.
	 */
	spin_lock(&dev->held_lock);
	list_splice_init(&dev->held, &looking);
	spin_unlock(&dev->held_lock);
	list_for_each_entry_safe(reg, next, &looking, held_node) {
		if (phxfs_reg_drained(reg))
			list_move_tail(&reg->held_node, &idle);
		cond_resched();
	}
	spin_lock(&dev->held_lock);
	list_splice_tail(&looking, &dev->held);
	if (!list_empty(&dev->held))
		queue_delayed_work(phxfs_wq, &dev->held_poll,
				   PHXFS_IDLE_POLL_MAX);
	spin_unlock(&dev->held_lock);

	list_for_each_entry_safe(reg, next, &idle, held_node) {
		list_del_init(&reg->held_node);
		if (reg->quarantined)
			phxfs_reg_release_quarantine(reg);
		else
			phxfs_reg_finish(reg);
		/*
		 * Taken when the registration was handed over, so that rmmod
		 * fails with EBUSY meanwhile instead of waiting on user
		 * space.  Once the last is dropped, phxfs_exit() may run: its
		 * destroy_workqueue() waits for this function to return
		 * before the module's text goes away.
		 */
		module_put(THIS_MODULE);
	}
}

/*
 * Hands @reg, zapped and with a page still referenced, to its device's
 * poller, which finishes it once every page is idle.  held_lock orders
 * this addition against the poller's decision to look again, so no entry
 * is left without a look coming.
 */
static void phxfs_reg_hold(struct phxfs_reg *reg)
{
	struct phxfs_dev *dev = reg->dev;

	__module_get(THIS_MODULE);
	spin_lock(&dev->held_lock);
	list_add_tail(&reg->held_node, &dev->held);
	queue_delayed_work(phxfs_wq, &dev->held_poll, PHXFS_IDLE_POLL_MAX);
	spin_unlock(&dev->held_lock);
}

/**
 * phxfs_reg_dev_init() - set up @dev's poller of held registrations.
 * @dev: device being created.
 */
void phxfs_reg_dev_init(struct phxfs_dev *dev)
{
	spin_lock_init(&dev->held_lock);
	INIT_LIST_HEAD(&dev->held);
	INIT_DELAYED_WORK(&dev->held_poll, phxfs_reg_poll_held);
}

/**
 * phxfs_reg_module_init() - set up what registrations need at load.
 *
 * Return: 0 or -ENOMEM.
 */
int phxfs_reg_module_init(void)
{
	phxfs_wq = alloc_workqueue("phxfs", WQ_UNBOUND, 0);
	return phxfs_wq ? 0 : -ENOMEM;
}

/**
 * phxfs_reg_module_exit() - wait for deferred teardowns at unload.
 *
 * Every queued teardown holds a module reference, so by now each has at
 * most its return left to run; this waits for that.
 */
void phxfs_reg_module_exit(void)
{
	destroy_workqueue(phxfs_wq);
}

/**
 * phxfs_reg_create() - pin a device range and reserve its slot in @pf's
 * table, unpublished.
 * @pf:          open file.
 * @device_addr: provider address (GPU VA, or BAR offset).
 * @length:      bytes.
 * @out:         the new registration, owned by the caller until it calls
 *               phxfs_reg_publish() or phxfs_reg_abandon().
 *
 * The slot stays reserved but empty until the caller has copied the
 * handle out: handles are predictable, and a published registration could
 * be deregistered (and freed) by another thread sharing the file while
 * the copy-out is still running.  Until then DEREGISTER of the handle
 * gives -ENOENT and mmap of its offset -EINVAL.
 *
 * Return: 0; -EINVAL for a zero or misaligned range, -EOVERFLOW when it
 * wraps, -ERANGE when it lies outside the device, -EBUSY when another
 * registration holds some of its pages (one being torn down is waited for,
 * up to PHXFS_CLAIM_WAIT), -ERESTARTSYS when a signal ended that wait,
 * -ENOSPC when mmap offsets ran out, -ENOMEM, or the provider's -errno
 * (pcibar: -EPERM without CAP_SYS_RAWIO or a grant).
 */
int phxfs_reg_create(struct phxfs_file *pf, u64 device_addr, u64 length,
		     struct phxfs_reg **out)
{
	struct phxfs_dev *dev = pf->dev;
	u32 granule = dev->provider->page_size(dev);
	struct phxfs_reg *reg;
	u64 pgoff;
	int ret;

	if (!length || !IS_ALIGNED(device_addr, granule) ||
	    !IS_ALIGNED(length, granule))
		return -EINVAL;
	if (device_addr + length < device_addr)
		return -EOVERFLOW;
	/* Every pinned page lies in the BAR, so no registration is larger. */
	if (length > dev->bar_size)
		return -ERANGE;
	/* Only a process can own a registration (see phxfs_reg_mmap()). */
	if (!current->mm)
		return -EINVAL;
	/* Before anything sized by the caller is allocated. */
	if (dev->provider->may_register) {
		ret = dev->provider->may_register(dev);
		if (ret)
			return ret;
	}

	reg = kzalloc(sizeof(*reg), GFP_KERNEL_ACCOUNT);
	if (!reg)
		return -ENOMEM;
	kref_init(&reg->ref);
	mutex_init(&reg->map_lock);
	init_completion(&reg->revoked);
	reg->dev = dev;
	/*
	 * The teardown can outlive the file and the node it was opened
	 * through (pages a pipe holds), and a free callback that finds it
	 * under way zaps through this mapping, which the node's inode holds.
	 * The path keeps the node's filesystem mounted meanwhile: an inode
	 * held past its unmount would outlive its superblock.
	 */
	reg->mapping = pf->mapping;
	ihold(reg->mapping->host);
	reg->path = pf->path;
	path_get(&reg->path);
	reg->device_addr = device_addr;
	reg->length = length;
	reg->npages = length >> PAGE_SHIFT;
	reg->owner_mm = current->mm;
	mmgrab(reg->owner_mm);
	reg->owner_uid = current_uid();
	reg->owner_pid = task_tgid_nr(current);
	reg->charged_uid = phxfs_user_of_current();
	atomic_set(&reg->state, PHXFS_REG_CREATING);
	INIT_LIST_HEAD(&reg->held_node);
	init_waitqueue_head(&reg->unclaimed);
	INIT_DELAYED_WORK(&reg->put_later, phxfs_reg_put_later_work);
	/* Before the page table, the one thing sized by the caller. */
	ret = phxfs_user_charge(reg->charged_uid, dev, length);
	if (ret)
		goto err_free;
	reg->charged = true;
	ret = phxfs_listing_reserve(reg);
	if (ret)
		goto err_free;
	reg->pages = kvcalloc(reg->npages, sizeof(*reg->pages),
			      GFP_KERNEL_ACCOUNT | __GFP_NOWARN);
	if (!reg->pages) {
		ret = -ENOMEM;
		goto err_free;
	}

	/*
	 * A provider revocation (an NVIDIA free callback) can fire as soon as
	 * pin() takes the pin, and waits for nothing of ours: until the
	 * registration is PINNED it turns CREATING into GONE and leaves the
	 * pin to our unpin(), and the last step here, the move to PINNED,
	 * then fails.  So nothing before that step holds anything a callback
	 * waits for, however long this task waits for a CPU.
	 */
	ret = dev->provider->pin(reg);
	if (ret) {
		/* A pin that failed validation is still held. */
		if (reg->pin)
			dev->provider->unpin(reg);
		goto err_free;
	}
	ret = phxfs_reg_claim(reg);
	if (ret)
		goto err_unpin;

	/* One guard page between registrations keeps every range distinct. */
	pgoff = atomic64_fetch_add(reg->npages + 1, &dev->next_pgoff);
	if (pgoff + reg->npages + 1 > (MAX_LFS_FILESIZE >> PAGE_SHIFT)) {
		ret = -ENOSPC;
		goto err_unclaim;
	}
	reg->handle = pgoff;

	mutex_lock(&pf->lock);
	ret = xa_reserve(&pf->regs, (unsigned long)pgoff, GFP_KERNEL);
	mutex_unlock(&pf->lock);
	if (ret)
		goto err_unclaim;

	if (atomic_cmpxchg(&reg->state, PHXFS_REG_CREATING,
			   PHXFS_REG_PINNED) != PHXFS_REG_CREATING) {
		/* Revoked before it was published: the memory is gone. */
		ret = -EFAULT;
		mutex_lock(&pf->lock);
		xa_release(&pf->regs, (unsigned long)pgoff);
		mutex_unlock(&pf->lock);
		goto err_unclaim;
	}
	atomic64_inc(&dev->stats.regs_live);
	atomic64_inc(&dev->stats.regs_total);
	phxfs_listing_add(reg);
	*out = reg;
	return 0;

err_unclaim:
	phxfs_reg_unclaim(reg);
err_unpin:
	atomic_set(&reg->state, PHXFS_REG_GONE);
	dev->provider->unpin(reg);
err_free:
	phxfs_reg_put(reg);
	return ret;
}

/**
 * phxfs_reg_publish() - enter a registration made by phxfs_reg_create()
 * into its reserved table slot, once its handle reached user space.
 * @pf:  open file.
 * @reg: registration; the table takes over the caller's reference.
 */
void phxfs_reg_publish(struct phxfs_file *pf, struct phxfs_reg *reg)
{
	void *old;

	mutex_lock(&pf->lock);
	/* The slot is reserved, so this allocates nothing and cannot fail. */
	old = xa_store(&pf->regs, (unsigned long)reg->handle, reg, GFP_KERNEL);
	mutex_unlock(&pf->lock);
	WARN_ON_ONCE(xa_is_err(old) || old);
}

/**
 * phxfs_reg_abandon() - undo phxfs_reg_create() when the handle could not
 * be copied out; nobody else can have reached the registration.
 * @pf:  open file.
 * @reg: registration; the caller's reference is dropped.
 */
void phxfs_reg_abandon(struct phxfs_file *pf, struct phxfs_reg *reg)
{
	mutex_lock(&pf->lock);
	xa_release(&pf->regs, (unsigned long)reg->handle);
	mutex_unlock(&pf->lock);
	/* Never mapped: no reference to wait for. */
	phxfs_reg_teardown(reg, 0);
}

/**
 * phxfs_reg_teardown() - revoke, drain and unpin a registration removed
 * from its table, then drop the table's reference.
 * @reg:  registration.
 * @wait: jiffies to wait at most for DMA in flight on the pages; 0: until
 *        it has finished; PHXFS_NO_WAIT: not at all.
 *
 * The wait also ends when the caller is killed.  Whatever it did not see
 * finish, a work item finishes once the pages are idle, holding a module
 * reference; the mapping is gone already, and the pages stay claimed, so
 * phxfs maps them to nobody else meanwhile.
 */
void phxfs_reg_teardown(struct phxfs_reg *reg, unsigned long wait)
{
	int ret;

	if (atomic_cmpxchg(&reg->state, PHXFS_REG_PINNED,
			   PHXFS_REG_RELEASING) != PHXFS_REG_PINNED) {
		/* The provider is revoking it (or has): let it finish first. */
		wait_for_completion(&reg->revoked);
		phxfs_reg_put(reg);
		return;
	}
	phxfs_reg_zap(reg);
	ret = phxfs_reg_wait_pages(reg, &reg->idle_upto, true, wait);
	if (ret) {
		/*
		 * Timed out or killed, a page was still referenced either way:
		 * listed as held, and a free callback does not wait for it a
		 * second time (phxfs_nv_revoke_wait()).
		 */
		WRITE_ONCE(reg->held, true);
		phxfs_reg_hold(reg);
		return;
	}
	phxfs_reg_finish(reg);
}

static void phxfs_reg_put_later_work(struct work_struct *work)
{
	struct phxfs_reg *reg =
		container_of(to_delayed_work(work), struct phxfs_reg, put_later);

	phxfs_reg_put(reg);
	/* As in phxfs_reg_poll_held(). */
	module_put(THIS_MODULE);
}

/**
 * phxfs_reg_put_later() - drop a reference to @reg and a module reference
 * from phxfs's workqueue, for a provider's callback that holds both.
 * @reg: registration.
 *
 * The callback is still running phxfs's code when it calls this; dropping
 * the module reference itself would let rmmod free that code under its
 * last instructions.  The work item waits a second first, long past the
 * callback's return, and phxfs_exit() waits for the work item.
 */
void phxfs_reg_put_later(struct phxfs_reg *reg)
{
	queue_delayed_work(phxfs_wq, &reg->put_later, HZ);
}

/**
 * phxfs_reg_revoke_begin() - start a provider-initiated revocation.
 * @reg:     registration whose memory the provider is taking back.
 * @timeout: jiffies to wait for page references to drop (PHXFS_NO_WAIT:
 *           none).
 *
 * Zaps the user mapping and waits, at most @timeout, for DMA in flight
 * (not killable: the provider frees the memory as soon as we return).
 * References that outlive the wait were taken by user space for as long
 * as it likes (a vmsplice'd pipe, io_uring fixed buffers): the provider
 * must not hang on them, so the revocation goes on, the pages stay
 * claimed until they are idle, and the log says so.  The caller releases
 * its own resources and then calls phxfs_reg_revoke_end().
 *
 * Return: false if DEREGISTER/release already owns the teardown; the caller
 * must then leave the pin to it.
 */
bool phxfs_reg_revoke_begin(struct phxfs_reg *reg, unsigned long timeout)
{
	/* Still being created: its REGISTER fails and unpins (see there). */
	if (atomic_cmpxchg(&reg->state, PHXFS_REG_CREATING,
			   PHXFS_REG_GONE) == PHXFS_REG_CREATING)
		return false;
	if (atomic_cmpxchg(&reg->state, PHXFS_REG_PINNED,
			   PHXFS_REG_REVOKING) != PHXFS_REG_PINNED)
		return false;
	phxfs_reg_zap(reg);
	if (phxfs_reg_wait_pages(reg, &reg->idle_upto, false, timeout)) {
		atomic64_inc(&reg->dev->stats.errors);
		pr_warn_ratelimited("dev%u: handle %llu: page %lu still referenced after its memory was freed (vmsplice, io_uring fixed buffer?); kept from reuse until released\n",
			reg->dev->index, reg->handle, reg->idle_upto);
		reg->quarantined = true;
		/* The poller's, dropped once the pages are idle. */
		kref_get(&reg->ref);
		phxfs_reg_hold(reg);
		return true;
	}
	phxfs_reg_unclaim(reg);
	return true;
}

/**
 * phxfs_reg_revoke_lost() - a provider revocation that found DEREGISTER or
 * release already tearing @reg down (phxfs_reg_revoke_begin() returned
 * false): make sure no DMA can reach the pages once this returns, since
 * the provider frees the memory then, and leave the teardown to its owner.
 * @reg:     registration; the teardown's reference keeps it alive.
 * @timeout: jiffies to wait at most, as in phxfs_reg_revoke_begin(); the
 *           teardown keeps the pages claimed until they are idle.
 *
 * Does not use the teardown's resumable idle cursor: both may wait at once.
 *
 * Return: true if it stopped waiting with pages still referenced.
 */
bool phxfs_reg_revoke_lost(struct phxfs_reg *reg, unsigned long timeout)
{
	unsigned long i = 0;

	/* Never published (a create that failed): no mapping, no DMA. */
	if (atomic_read(&reg->state) != PHXFS_REG_RELEASING)
		return false;
	/* The teardown may not have zapped yet; a second zap is harmless. */
	phxfs_reg_zap(reg);
	if (phxfs_reg_wait_pages(reg, &i, false, timeout)) {
		atomic64_inc(&reg->dev->stats.errors);
		pr_warn_ratelimited("dev%u: handle %llu: page %lu still referenced after its memory was freed; its teardown keeps it from reuse\n",
			reg->dev->index, reg->handle, i);
		return true;
	}
	return false;
}

/**
 * phxfs_reg_revoke_end() - finish a revocation started by
 * phxfs_reg_revoke_begin(); @reg may be freed as soon as this returns.
 * @reg: registration.
 */
void phxfs_reg_revoke_end(struct phxfs_reg *reg)
{
	struct phxfs_dev *dev = reg->dev;

	atomic_set(&reg->state, PHXFS_REG_GONE);
	atomic64_inc(&dev->stats.revocations);
	if (!reg->quarantined)
		atomic64_dec(&dev->stats.regs_live);
	pr_info_ratelimited("dev%u: handle %llu revoked by the %s provider\n", dev->index,
		reg->handle, dev->provider->name);
	complete_all(&reg->revoked);
}

/*
 * Re-inserts a page whose PTE the process zapped itself (MADV_DONTNEED);
 * after a revocation the range is unbacked and faults raise SIGBUS.
 */
/*
 * Pages are inserted here, never in ->mmap: the mmap path links a new VMA
 * into the file's mapping tree only after ->mmap returns, so PTEs made in
 * ->mmap could escape a concurrent teardown's unmap_mapping_range() and
 * keep the pages busy until the process unmapped them.  A fault runs on a
 * VMA that is already linked, and checks the state under map_lock, which
 * the teardown takes before zapping.  Each fault also maps up to
 * PHXFS_INSERT_BATCH pages after the faulting one, so sequential I/O takes
 * one fault per batch instead of one per page.
 */
static vm_fault_t phxfs_vm_fault(struct vm_fault *vmf)
{
	struct phxfs_reg *reg = vmf->vma->vm_private_data;
	unsigned long index = vmf->pgoff - (unsigned long)reg->handle;
	unsigned long addr = vmf->address & PAGE_MASK;
	vm_fault_t ret = VM_FAULT_SIGBUS;
	unsigned long ahead;
	int err;

	if (vmf->pgoff < reg->handle || index >= reg->npages)
		return VM_FAULT_SIGBUS;
	mutex_lock(&reg->map_lock);
	if (atomic_read(&reg->state) == PHXFS_REG_PINNED) {
		err = vm_insert_page(vmf->vma, addr, reg->pages[index]);
		ret = (!err || err == -EBUSY) ? VM_FAULT_NOPAGE : vmf_error(err);
		ahead = min(reg->npages - index - 1, PHXFS_INSERT_BATCH);
		/* Best effort: stops at the first page already mapped. */
		if (!err && ahead)
			vm_insert_pages(vmf->vma, addr + PAGE_SIZE,
					reg->pages + index + 1, &ahead);
	}
	mutex_unlock(&reg->map_lock);
	return ret;
}

static vm_fault_t phxfs_vm_fault_forked(struct vm_fault *vmf)
{
	return VM_FAULT_SIGBUS;
}

/* A copy of a forked copy (the grandchild's): equally empty. */
static void phxfs_vm_open_forked(struct vm_area_struct *vma)
{
	struct phxfs_reg *reg = vma->vm_private_data;

	kref_get(&reg->ref);
}

static void phxfs_vm_close_forked(struct vm_area_struct *vma)
{
	struct phxfs_reg *reg = vma->vm_private_data;

	phxfs_reg_put(reg);
}

static int phxfs_vm_may_split(struct vm_area_struct *vma, unsigned long addr);

/*
 * A VMA a forked child inherited: it holds a reference so vm_private_data
 * stays valid, never pages, and does not count as a mapping (the parent
 * may unmap and map the registration again meanwhile).
 */
static const struct vm_operations_struct phxfs_vm_ops_forked = {
	.fault = phxfs_vm_fault_forked,
	.open = phxfs_vm_open_forked,
	.close = phxfs_vm_close_forked,
	.may_split = phxfs_vm_may_split,
};

static void phxfs_vm_open(struct vm_area_struct *vma)
{
	struct phxfs_reg *reg = vma->vm_private_data;

	/*
	 * mremap() copies our VMA within the same mm.  fork() copies it into
	 * the child's mm only after MADV_DOFORK cleared VM_DONTCOPY, and the
	 * child must still see no device memory: VM_WIPEONFORK stops
	 * dup_mmap() from copying the PTEs on kernels that call ->open first
	 * (6.11+), the zap removes those that older kernels (6.1) copied
	 * before calling ->open, and the forked ops refuse every later fault.
	 * dup_mmap() holds the child's mmap_lock for writing meanwhile.
	 */
	if (vma->vm_mm != current->mm) {
		phxfs_vm_flags_set(vma, VM_WIPEONFORK);
		phxfs_zap_vma(vma);
		vma->vm_ops = &phxfs_vm_ops_forked;
		kref_get(&reg->ref);
		return;
	}
	atomic_inc(&reg->map_count);
	kref_get(&reg->ref);
}

static void phxfs_vm_close(struct vm_area_struct *vma)
{
	struct phxfs_reg *reg = vma->vm_private_data;

	if (atomic_dec_and_test(&reg->map_count)) {
		long mapped = atomic_long_xchg(&reg->mapped_pages, 0);

		atomic64_sub(mapped, &reg->dev->stats.pages_mapped);
	}
	phxfs_reg_put(reg);
}

static int phxfs_vm_may_split(struct vm_area_struct *vma, unsigned long addr)
{
	/* A registration is mapped whole or not at all. */
	return -EINVAL;
}

static const struct vm_operations_struct phxfs_vm_ops = {
	.fault = phxfs_vm_fault,
	.open = phxfs_vm_open,
	.close = phxfs_vm_close,
	.may_split = phxfs_vm_may_split,
};

/**
 * phxfs_reg_mmap() - map a registration into @vma.
 * @reg: registration, kept alive by the caller.
 * @vma: the new VMA; mmap_lock is held for writing by the mmap path.
 *
 * The pages themselves are inserted by the fault handler (see
 * phxfs_vm_fault() for why not here).
 *
 * Return: 0; -EACCES when @vma's process is not the one that registered
 * (a forked child mapping through the inherited file); -EINVAL when the
 * VMA is not shared or its size differs from the registration; -EPERM for
 * executable mappings; -EBUSY when the registration is already mapped;
 * -ENXIO when it was revoked.
 */
int phxfs_reg_mmap(struct phxfs_reg *reg, struct vm_area_struct *vma)
{
	unsigned long size = vma->vm_end - vma->vm_start;
	int ret = 0;

	/*
	 * The registration's device memory and its one mapping slot belong
	 * to the process that made it.  A child sharing the file must not
	 * read it nor take the slot once the parent has unmapped it.
	 */
	if (vma->vm_mm != reg->owner_mm)
		return -EACCES;
	if (size != reg->npages << PAGE_SHIFT || !(vma->vm_flags & VM_SHARED))
		return -EINVAL;
	if (vma->vm_flags & VM_EXEC)
		return -EPERM;

	mutex_lock(&reg->map_lock);
	if (atomic_read(&reg->state) != PHXFS_REG_PINNED) {
		ret = -ENXIO;
		goto out;
	}
	if (atomic_cmpxchg(&reg->map_count, 0, 1) != 0) {
		ret = -EBUSY;
		goto out;
	}

	/*
	 * VM_MIXEDMAP: struct-page backed PTEs that GUP (hence O_DIRECT) can
	 * pin, unlike VM_PFNMAP/VM_IO.  DONTCOPY: a forked child must not
	 * inherit device memory.  DONTEXPAND/may_split: the VMA always covers
	 * exactly one registration.  DONTDUMP: core dumps must not read BARs.
	 */
	phxfs_vm_flags_set(vma, VM_MIXEDMAP | VM_DONTCOPY | VM_DONTEXPAND |
					VM_DONTDUMP);
	phxfs_vm_flags_clear(vma, VM_MAYEXEC);
	vma->vm_page_prot = pgprot_writecombine(vma->vm_page_prot);
	vma->vm_ops = &phxfs_vm_ops;
	vma->vm_private_data = reg;
	kref_get(&reg->ref);
	atomic_long_set(&reg->mapped_pages, reg->npages);
	atomic64_add(reg->npages, &reg->dev->stats.pages_mapped);
out:
	mutex_unlock(&reg->map_lock);
	return ret;
}
