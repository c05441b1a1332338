// SPDX-License-Identifier: GPL-2.0
/*
 * phxfs_nvidia.c - provider for NVIDIA GPU memory via nvidia_p2p_*.
 *
 * The symbols are resolved with symbol_get() for each registration and
 * released with it, so phxfs loads without the NVIDIA driver, picks it up
 * whenever it is loaded later, and holds a reference on it exactly while
 * GPU memory is pinned.  nvidia_p2p_* are GPL-only exports (Debian's 6.1.192
 * refuses symbol_get() of other symbols from a GPL module anyway).
 *
 * The persistent API (nvidia_p2p_get_pages_persistent, exported by recent
 * drivers) is preferred: the pages stay valid until we put them, so there is
 * no asynchronous revocation.  The legacy API calls our free callback when
 * CUDA frees the memory (cudaFree, process exit).  Its contract: stop DMA,
 * then call only nvidia_p2p_free_page_table(), never put_pages.  The driver
 * unlinks the table before it calls back, and serialises the callback with
 * put_pages: a put_pages racing with it returns 0 once it is over, having
 * freed nothing.  So a callback that fires always frees the table, even
 * when DEREGISTER (or release) already owns the registration's teardown;
 * the teardown then skips put_pages if it has not called it yet.
 *
 * Current drivers free the table themselves as soon as our callback
 * returns (nvidia_p2p_free_page_table() is a no-op there), and the driver
 * names a mapping by its virtual address and table.  Between the
 * teardown's look at freed_by_callback and its put_pages, a callback can
 * run to the end; a get_pages of the same virtual address (the memory
 * allocated again) can then be handed a table at the freed one's address,
 * and the late put_pages would unpin that new mapping.  A lock per thread
 * group (struct phxfs_nv_tg_lock) keeps phxfs's own get_pages out of that
 * window: the driver looks a legacy mapping up among those of the calling
 * process only (below), so only a get_pages of the same process can be
 * handed that table, and a tenant whose get_pages is slow (starved of CPU,
 * or the driver busy) holds up its own process alone.
 *
 * The driver looks a legacy mapping up among those of the calling process
 * (thread group): put_pages from any other, a kworker finishing a deferred
 * teardown or a forked child's last close, finds none and returns 0 having
 * freed nothing, and the free callback stays armed with our registration
 * as its data.  So a legacy pin released outside its owner is parked
 * instead: the registration, the pin and the symbol and module references
 * stay until the callback, which cudaFree or the owner's exit brings, and
 * the callback drops them.
 *
 * The callback waits for DMA in flight at most revoke_wait_ms: a page
 * reference that outlives that was taken by user space (a vmsplice'd pipe,
 * io_uring fixed buffers), and waiting for it would let user space hang
 * cudaFree, an exiting process and every put_pages behind it.  The pages
 * then stay claimed, so phxfs maps them to nobody, until they are idle;
 * the driver may reuse the GPU memory meanwhile (docs/kernel.md).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/hashtable.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/string.h>

#include "nv_p2p.h"
#include "phxfs.h"

/*
 * Legacy API: no get_pages between a teardown's check and its put_pages,
 * within one thread group.  Found by its struct pid (a reference held, so
 * the key is not reused while listed); freed when its last user is done.
 */
struct phxfs_nv_tg_lock {
	struct hlist_node node;
	struct pid *tgid;
	unsigned int users; /* under phxfs_nv_tg_locks_lock */
	struct mutex lock;
};

static DEFINE_HASHTABLE(phxfs_nv_tg_locks, 6);
static DEFINE_SPINLOCK(phxfs_nv_tg_locks_lock);

static void phxfs_nv_tg_put(struct phxfs_nv_tg_lock *tg)
{
	bool last;

	spin_lock(&phxfs_nv_tg_locks_lock);
	last = !--tg->users;
	if (last)
		hash_del(&tg->node);
	spin_unlock(&phxfs_nv_tg_locks_lock);
	if (last) {
		put_pid(tg->tgid);
		kfree(tg);
	}
}

/*
 * phxfs_nv_tg_lock() - take the calling thread group's legacy pin lock.
 *
 * Only threads of the caller's own process can hold it, inside the
 * driver's get_pages or put_pages; a fatal signal still ends the wait.
 *
 * Return: the lock, held; ERR_PTR(-ENOMEM) or ERR_PTR(-EINTR) (a fatal
 * signal: the process is exiting).
 */
static struct phxfs_nv_tg_lock *phxfs_nv_tg_lock(void)
{
	struct phxfs_nv_tg_lock *tg, *fresh = NULL;
	struct pid *tgid = task_tgid(current);

	for (;;) {
		spin_lock(&phxfs_nv_tg_locks_lock);
		hash_for_each_possible(phxfs_nv_tg_locks, tg, node,
				       (unsigned long)tgid) {
			if (tg->tgid == tgid) {
				tg->users++;
				goto found;
			}
		}
		if (fresh) {
			tg = fresh;
			fresh = NULL;
			hash_add(phxfs_nv_tg_locks, &tg->node,
				 (unsigned long)tgid);
			goto found;
		}
		spin_unlock(&phxfs_nv_tg_locks_lock);
		fresh = kzalloc(sizeof(*fresh), GFP_KERNEL);
		if (!fresh)
			return ERR_PTR(-ENOMEM);
		fresh->tgid = get_pid(tgid);
		fresh->users = 1;
		mutex_init(&fresh->lock);
	}
found:
	spin_unlock(&phxfs_nv_tg_locks_lock);
	if (fresh) {
		put_pid(fresh->tgid);
		kfree(fresh);
	}
	if (mutex_lock_killable(&tg->lock)) {
		phxfs_nv_tg_put(tg);
		return ERR_PTR(-EINTR);
	}
	return tg;
}

static void phxfs_nv_tg_unlock(struct phxfs_nv_tg_lock *tg)
{
	mutex_unlock(&tg->lock);
	phxfs_nv_tg_put(tg);
}

static char *nv_api = "auto";
module_param(nv_api, charp, 0444);
MODULE_PARM_DESC(nv_api,
		 "NVIDIA pinning API: auto or persistent (persistent pins, else REGISTER fails), "
		 "legacy (revocable pins: see docs/security.md)");

/*
 * How long the legacy free callback waits for page references to drop.
 * DMA in flight ends in milliseconds; a reference that outlives this was
 * taken by user space for as long as it likes (vmsplice, io_uring fixed
 * buffers), and the driver (cudaFree, process exit) must not hang on it.
 */
static uint revoke_wait_ms = 5000;
module_param(revoke_wait_ms, uint, 0644);
MODULE_PARM_DESC(revoke_wait_ms,
		 "Longest wait of the legacy free callback for I/O on freed GPU memory, ms (default 5000)");

/*
 * The driver calls the free callbacks of one allocation one after the
 * other (cudaFree, or a process's exit), and user space can hold pages of
 * thousands of registrations: revoke_wait_ms is the budget of the user
 * whose registrations they are (over its processes, devices and user
 * namespaces: reg->charged_uid), not of each callback nor of each
 * process.  Once a callback of a user's registration gave up waiting,
 * callbacks of that user's registrations wait no more for the next
 * revoke_wait_ms: two processes taking turns cannot make each callback
 * wait in full.  Another user's callbacks still wait: one tenant's
 * holders cannot spend the budget that protects another tenant's DMA in
 * flight.  A registration whose pages a wait already found held is not
 * waited for again.  The pages not waited for stay claimed until idle
 * either way.
 */
static unsigned long phxfs_nv_revoke_wait(struct phxfs_reg *reg)
{
	unsigned long wait = max(1UL, msecs_to_jiffies(READ_ONCE(revoke_wait_ms)));

	if (READ_ONCE(reg->held) || reg->quarantined ||
	    phxfs_user_revoke_spent(reg->charged_uid))
		return PHXFS_NO_WAIT;
	return wait;
}

/* A callback of @reg waited @waited and stopped with pages held. */
static void phxfs_nv_gave_up(struct phxfs_reg *reg, unsigned long waited)
{
	unsigned long wait = max(1UL, msecs_to_jiffies(READ_ONCE(revoke_wait_ms)));

	if (waited != PHXFS_NO_WAIT)
		phxfs_user_revoke_gave_up(reg->charged_uid, jiffies + wait);
}

enum phxfs_nv_api { PHXFS_NV_AUTO, PHXFS_NV_PERSISTENT, PHXFS_NV_LEGACY };

struct phxfs_nv_pin {
	struct nvidia_p2p_page_table *table;
	bool persistent;
	/* Legacy: the thread group whose put_pages the driver honours. */
	struct pid *owner;
	/* Legacy: the free callback has taken the table (under lock). */
	spinlock_t lock;
	bool freed_by_callback;
	/* Legacy: released outside @owner; the callback finishes it (under lock). */
	bool parked;
};

/* phxfs_nv_release(): the pin was parked, the free callback releases it. */
#define PHXFS_NV_PARKED 1

static void phxfs_nv_pin_free(struct phxfs_nv_pin *pin)
{
	put_pid(pin->owner);
	kfree(pin);
}

static enum phxfs_nv_api phxfs_nv_api(void)
{
	if (!strcmp(nv_api, "persistent"))
		return PHXFS_NV_PERSISTENT;
	if (!strcmp(nv_api, "legacy"))
		return PHXFS_NV_LEGACY;
	return PHXFS_NV_AUTO;
}

static u32 phxfs_nv_page_size(const struct phxfs_dev *dev)
{
	return NVIDIA_P2P_GPU_PAGE_SIZE;
}

static bool phxfs_nv_have_persistent(void)
{
	void *get = symbol_get(nvidia_p2p_get_pages_persistent);

	if (!get)
		return false;
	symbol_put(nvidia_p2p_get_pages_persistent);
	return true;
}

static bool phxfs_nv_have_legacy(void)
{
	void *get = symbol_get(nvidia_p2p_get_pages);

	if (!get)
		return false;
	symbol_put(nvidia_p2p_get_pages);
	return true;
}

/*
 * What REGISTER will do: under auto and persistent, persistent pins or a
 * refusal (never the legacy API, whose pins the driver revokes while a
 * holder may keep the pages: docs/security.md); under legacy, legacy pins.
 */
static u32 phxfs_nv_info_flags(const struct phxfs_dev *dev)
{
	bool have_persistent = phxfs_nv_have_persistent();
	bool have_legacy = phxfs_nv_have_legacy();

	if (!have_persistent && !have_legacy)
		return PHXFS_INFO_PROVIDER_MISSING;
	if (phxfs_nv_api() == PHXFS_NV_LEGACY)
		return have_legacy ? 0 : PHXFS_INFO_PROVIDER_MISSING;
	if (!have_persistent || READ_ONCE(dev->pins_refused))
		return PHXFS_INFO_PIN_REFUSED;
	return PHXFS_INFO_PERSISTENT;
}

/* Once per module load: why REGISTER said EOPNOTSUPP, and the way out. */
static void phxfs_nv_say_refused(const struct phxfs_dev *dev, int ret)
{
	pr_warn_once("dev%u: no persistent NVIDIA pin (%s, %d): REGISTER refused; load phxfs with nv_api=legacy to accept pins the driver may revoke (docs/security.md)\n",
		     dev->index,
		     ret == -ENODEV ? "the driver lacks the persistent API" :
				      "the driver refuses it on this GPU, as on MIG and vGPU",
		     ret);
}

static void phxfs_nv_free_table(struct nvidia_p2p_page_table *table)
{
	int (*free_table)(struct nvidia_p2p_page_table *table) =
		symbol_get(nvidia_p2p_free_page_table);

	if (free_table) {
		free_table(table);
		symbol_put(nvidia_p2p_free_page_table);
	}
}

/*
 * The free callback found the teardown already under way, or over with the
 * pin parked, or the REGISTER still under way (which then fails): stop DMA, then free the table, which the teardown's
 * put_pages (if it gets that far) will not.  Once the flag is set the
 * teardown may free @pin and @reg, so nothing here touches them after the
 * unlock, unless the pin was parked: then the teardown is over and left
 * them, with a reference to each, to this callback.
 */
static void phxfs_nv_free_lost(struct phxfs_reg *reg,
			       struct phxfs_nv_pin *pin)
{
	unsigned long wait = phxfs_nv_revoke_wait(reg);
	struct nvidia_p2p_page_table *table;
	bool parked;

	if (phxfs_reg_revoke_lost(reg, wait))
		phxfs_nv_gave_up(reg, wait);
	spin_lock(&pin->lock);
	table = pin->table;
	pin->freed_by_callback = true;
	parked = pin->parked;
	spin_unlock(&pin->lock);
	phxfs_nv_free_table(table);
	if (!parked)
		return;
	reg->pin = NULL;
	phxfs_nv_pin_free(pin);
	symbol_put(nvidia_p2p_put_pages);
	symbol_put(nvidia_p2p_get_pages);
	phxfs_reg_put_later(reg);
}

static void phxfs_nv_free_callback(void *data)
{
	struct phxfs_reg *reg = data;
	struct phxfs_nv_pin *pin = reg->pin;
	unsigned long wait = phxfs_nv_revoke_wait(reg);

	if (!phxfs_reg_revoke_begin(reg, wait)) {
		phxfs_nv_free_lost(reg, pin);
		return;
	}
	if (reg->quarantined)
		phxfs_nv_gave_up(reg, wait);
	phxfs_nv_free_table(pin->table);
	reg->pin = NULL;
	phxfs_nv_pin_free(pin);
	symbol_put(nvidia_p2p_put_pages);
	symbol_put(nvidia_p2p_get_pages);
	phxfs_reg_revoke_end(reg);
}

/*
 * Return: 0 or -errno once the pin is released; PHXFS_NV_PARKED when the
 * free callback will release it (legacy, outside the owner's process).
 */
static int phxfs_nv_release(struct phxfs_reg *reg, struct phxfs_nv_pin *pin)
{
	int ret;

	if (pin->persistent) {
		int (*put)(u64 va, struct nvidia_p2p_page_table *table,
			   u32 flags) =
			symbol_get(nvidia_p2p_put_pages_persistent);

		ret = put ? put(reg->device_addr, pin->table,
				NVIDIA_P2P_FLAGS_DEFAULT) :
			    -ENODEV;
		if (put)
			symbol_put(nvidia_p2p_put_pages_persistent);
		symbol_put(nvidia_p2p_get_pages_persistent);
	} else {
		int (*put)(u64 token, u32 va_space, u64 va,
			   struct nvidia_p2p_page_table *table) =
			symbol_get(nvidia_p2p_put_pages);
		struct phxfs_nv_tg_lock *tg = NULL;
		bool freed, parked;

		/*
		 * A callback that fires after the check either finds us in
		 * put_pages, which waits for it and then returns 0, or ends
		 * before the call; the table it leaves behind cannot have been
		 * handed to a new get_pages of this process, which waits for
		 * the lock.  Outside the owner there is no put_pages to guard,
		 * and an owner killed while it waits for its lock exits, which
		 * brings the callback: both park.  A pin parked here is the
		 * callback's from the unlock on: the references it drops are
		 * taken before.
		 */
		if (pin->owner == task_tgid(current)) {
			tg = phxfs_nv_tg_lock();
			if (IS_ERR(tg))
				tg = NULL;
		}
		spin_lock(&pin->lock);
		freed = pin->freed_by_callback;
		parked = !freed && !tg;
		if (parked) {
			kref_get(&reg->ref);
			__module_get(THIS_MODULE);
			pin->parked = true;
		}
		spin_unlock(&pin->lock);
		if (freed || parked)
			ret = 0;
		else
			ret = put ? put(0, 0, reg->device_addr, pin->table) :
				    -ENODEV;
		if (tg)
			phxfs_nv_tg_unlock(tg);
		if (put)
			symbol_put(nvidia_p2p_put_pages);
		if (parked)
			return PHXFS_NV_PARKED;
		/* The references taken at pin time. */
		symbol_put(nvidia_p2p_put_pages);
		symbol_put(nvidia_p2p_get_pages);
	}
	return ret;
}

static int phxfs_nv_check_header(const struct phxfs_reg *reg,
				 const struct nvidia_p2p_page_table *table)
{
	const struct phxfs_dev *dev = reg->dev;
	u64 entries = reg->length / NVIDIA_P2P_GPU_PAGE_SIZE;

	if (!table || !table->pages ||
	    NVIDIA_P2P_MAJOR(table->version) !=
		    NVIDIA_P2P_MAJOR(NVIDIA_P2P_PAGE_TABLE_VERSION)) {
		pr_err("dev%u: unsupported NVIDIA page table version %#x\n",
		       dev->index, table ? table->version : 0);
		return -EPROTO;
	}
	if (table->page_size != NVIDIA_P2P_PAGE_SIZE_64KB ||
	    table->entries != entries) {
		pr_err("dev%u: NVIDIA page table has page size type %u and %u entries, expected 64 KiB x %llu\n",
		       dev->index, table->page_size, table->entries, entries);
		return -EIO;
	}
	return 0;
}

/* Entry @e of @table into reg->pages, each of its pages inside the BAR. */
static int phxfs_nv_check_entry(struct phxfs_reg *reg,
				const struct nvidia_p2p_page_table *table, u32 e)
{
	unsigned int per_gpu_page = NVIDIA_P2P_GPU_PAGE_SIZE >> PAGE_SHIFT;
	struct phxfs_dev *dev = reg->dev;
	unsigned int j;
	u64 phys;

	if (!table->pages[e])
		return -EIO;
	phys = table->pages[e]->physical_address;
	if (!IS_ALIGNED(phys, NVIDIA_P2P_GPU_PAGE_SIZE))
		return -EIO;
	for (j = 0; j < per_gpu_page; j++) {
		struct page *page =
			phxfs_bar_page(dev, phys + ((u64)j << PAGE_SHIFT));

		if (!page) {
			pr_err("dev%u: GPU page %u at %#llx lies outside BAR %d\n",
			       dev->index, e, phys, dev->bar);
			return -EIO;
		}
		reg->pages[(unsigned long)e * per_gpu_page + j] = page;
	}
	return 0;
}

/* GPU pages of a table read under the pin's lock at a time. */
#define PHXFS_NV_TABLE_BATCH 64

/*
 * Reads the table into reg->pages.  A legacy free callback may fire as
 * soon as get_pages returns, and the driver frees the table once the
 * callback returns; the callback takes @pin's lock only to mark the pin
 * freed.  So the table is read a batch at a time under that spinlock: the
 * callback waits for one batch at most, never for this task to get a CPU
 * again, and a batch that finds the mark stops the REGISTER (-EFAULT: the
 * memory went while it was being registered).
 */
static int phxfs_nv_check_table(struct phxfs_reg *reg,
				struct phxfs_nv_pin *pin)
{
	u64 entries = reg->length / NVIDIA_P2P_GPU_PAGE_SIZE;
	u32 e = 0, stop;
	int ret;

	spin_lock(&pin->lock);
	ret = pin->freed_by_callback ? -EFAULT :
				       phxfs_nv_check_header(reg, pin->table);
	spin_unlock(&pin->lock);
	while (!ret && e < entries) {
		stop = min_t(u64, entries, (u64)e + PHXFS_NV_TABLE_BATCH);
		spin_lock(&pin->lock);
		if (pin->freed_by_callback)
			ret = -EFAULT;
		for (; !ret && e < stop; e++)
			ret = phxfs_nv_check_entry(reg, pin->table, e);
		spin_unlock(&pin->lock);
		cond_resched();
	}
	return ret;
}

/* A legacy pin taken only to see where memory lies (phxfs_nv_range_is_ours()). */
struct phxfs_nv_probe {
	spinlock_t lock;
	bool freed;
	struct nvidia_p2p_page_table *table;
};

static void phxfs_nv_probe_callback(void *data)
{
	struct phxfs_nv_probe *probe = data;
	struct nvidia_p2p_page_table *table;

	spin_lock(&probe->lock);
	probe->freed = true;
	table = probe->table;
	spin_unlock(&probe->lock);
	/* Nothing of the probe after the unlock: its owner may free it. */
	phxfs_nv_free_table(table);
}

/*
 * Whether the first GPU page of @reg's range lies in this device's BAR,
 * asked through a legacy pin of it that is put back at once and never
 * mapped: a persistent pin refused for memory of another GPU (or for no
 * memory at all) says nothing about this one, and must not make GET_INFO
 * turn direct I/O off for every user of this device (issue 54, item 5).
 */
static bool phxfs_nv_range_is_ours(struct phxfs_reg *reg)
{
	int (*get)(u64 token, u32 va_space, u64 va, u64 len,
		   struct nvidia_p2p_page_table **table,
		   void (*cb)(void *data), void *data);
	int (*put)(u64 token, u32 va_space, u64 va,
		   struct nvidia_p2p_page_table *table);
	struct phxfs_nv_tg_lock *tg;
	struct phxfs_nv_probe *probe;
	bool ours = false, freed;

	probe = kzalloc(sizeof(*probe), GFP_KERNEL);
	if (!probe)
		return false;
	spin_lock_init(&probe->lock);
	get = symbol_get(nvidia_p2p_get_pages);
	put = symbol_get(nvidia_p2p_put_pages);
	tg = get && put ? phxfs_nv_tg_lock() : ERR_PTR(-ENODEV);
	if (!IS_ERR(tg)) {
		/* As for a legacy pin: not inside a teardown's window. */
		if (!get(0, 0, reg->device_addr, NVIDIA_P2P_GPU_PAGE_SIZE,
			 &probe->table, phxfs_nv_probe_callback, probe)) {
			spin_lock(&probe->lock);
			freed = probe->freed;
			if (!freed && probe->table && probe->table->pages &&
			    probe->table->entries >= 1 && probe->table->pages[0])
				ours = phxfs_bar_page(reg->dev,
					probe->table->pages[0]->physical_address);
			spin_unlock(&probe->lock);
			/* A callback racing with it makes put_pages wait for it. */
			if (!freed)
				put(0, 0, reg->device_addr, probe->table);
		}
		phxfs_nv_tg_unlock(tg);
	}
	if (put)
		symbol_put(nvidia_p2p_put_pages);
	if (get)
		symbol_put(nvidia_p2p_get_pages);
	kfree(probe);
	return ours;
}

/*
 * A legacy pin of @reg's range into @pin, owned by the calling process.
 * Return: 0 with a reference on get_pages and put_pages each, or -errno.
 */
static int phxfs_nv_pin_legacy(struct phxfs_reg *reg, struct phxfs_nv_pin *pin)
{
	int (*get)(u64 token, u32 va_space, u64 va, u64 len,
		   struct nvidia_p2p_page_table **table,
		   void (*cb)(void *data), void *data);
	struct phxfs_nv_tg_lock *tg;
	int ret;

	get = symbol_get(nvidia_p2p_get_pages);
	if (!get)
		return -ENODEV;
	if (!symbol_get(nvidia_p2p_put_pages)) {
		ret = -ENODEV;
		goto err_get;
	}
	/*
	 * Not inside a teardown's window (see phxfs_nv_release()).  No free
	 * callback waits for this lock.
	 */
	tg = phxfs_nv_tg_lock();
	if (IS_ERR(tg)) {
		ret = PTR_ERR(tg);
		goto err_put;
	}
	ret = get(0, 0, reg->device_addr, reg->length, &pin->table,
		  phxfs_nv_free_callback, reg);
	phxfs_nv_tg_unlock(tg);
	if (ret)
		goto err_put;
	pin->owner = get_pid(task_tgid(current));
	return 0;

err_put:
	symbol_put(nvidia_p2p_put_pages);
err_get:
	symbol_put(nvidia_p2p_get_pages);
	return ret;
}

static int phxfs_nv_pin(struct phxfs_reg *reg)
{
	enum phxfs_nv_api api = phxfs_nv_api();
	struct phxfs_nv_pin *pin;
	int ret = -ENODEV;

	pin = kzalloc(sizeof(*pin), GFP_KERNEL);
	if (!pin)
		return -ENOMEM;
	spin_lock_init(&pin->lock);
	reg->pin = pin;

	if (api != PHXFS_NV_LEGACY) {
		int (*get)(u64 va, u64 len, struct nvidia_p2p_page_table **table,
			   u32 flags) =
			symbol_get(nvidia_p2p_get_pages_persistent);

		if (get) {
			ret = get(reg->device_addr, reg->length, &pin->table,
				  NVIDIA_P2P_FLAGS_DEFAULT);
			if (ret)
				symbol_put(nvidia_p2p_get_pages_persistent);
			else
				pin->persistent = true;
		}
		if (pin->persistent) {
			WRITE_ONCE(reg->dev->pins_refused, false);
		} else if (ret == -ENODEV && phxfs_nv_have_legacy()) {
			/* The driver is there, its persistent API is not. */
			phxfs_nv_say_refused(reg->dev, ret);
			ret = -EOPNOTSUPP;
		} else if (ret == -ENOTSUPP || ret == -EOPNOTSUPP) {
			/*
			 * MIG and vGPU refuse persistent pins.  No silent
			 * legacy pins here: those the driver revokes while
			 * a holder (a pipe, io_uring, RDMA) may keep the
			 * pages another tenant gets next.  Only a refusal of
			 * this device's memory marks the device.
			 */
			if (phxfs_nv_range_is_ours(reg)) {
				WRITE_ONCE(reg->dev->pins_refused, true);
				phxfs_nv_say_refused(reg->dev, ret);
			}
			ret = -EOPNOTSUPP;
		}
	}
	/* nv_api=legacy alone takes the legacy API. */
	if (!pin->persistent && api == PHXFS_NV_LEGACY)
		ret = phxfs_nv_pin_legacy(reg, pin);
	if (ret == -ENOTSUPP)
		ret = -EOPNOTSUPP;
	if (ret)
		goto err_free;
	reg->pin_api = pin->persistent ? PHXFS_PIN_PERSISTENT : PHXFS_PIN_LEGACY;

	/*
	 * On a bad table, or one a free callback took meanwhile, the pin
	 * stays in reg->pin: the caller releases it with unpin().
	 */
	return phxfs_nv_check_table(reg, pin);

err_free:
	reg->pin = NULL;
	phxfs_nv_pin_free(pin);
	return ret;
}

static void phxfs_nv_unpin(struct phxfs_reg *reg)
{
	struct phxfs_nv_pin *pin = reg->pin;
	int ret;

	if (!pin)
		return;
	ret = phxfs_nv_release(reg, pin);
	if (ret == PHXFS_NV_PARKED)
		return;
	if (ret) {
		atomic64_inc(&reg->dev->stats.errors);
		pr_err_ratelimited("dev%u: releasing GPU range %#llx+%llu failed: %d\n",
		       reg->dev->index, reg->device_addr, reg->length, ret);
	}
	reg->pin = NULL;
	phxfs_nv_pin_free(pin);
}

const struct phxfs_provider phxfs_nvidia_provider = {
	.name = "nvidia",
	.id = PHXFS_PROVIDER_NVIDIA,
	.page_size = phxfs_nv_page_size,
	.info_flags = phxfs_nv_info_flags,
	.pin = phxfs_nv_pin,
	.unpin = phxfs_nv_unpin,
};
