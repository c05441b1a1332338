// SPDX-License-Identifier: GPL-2.0
/*
 * nvemu.c - test-only emulation of NVIDIA's nvidia_p2p_* kernel API over a
 * PCI BAR (the rig's ivshmem device).  It exports the same GPL symbols with
 * the documented structure layouts and version constants, 64 KiB GPU pages
 * and fake GPU virtual addresses, so phxfs's NVIDIA provider runs unchanged
 * in the guest.  /dev/nvemu plays CUDA: ALLOC (cudaMalloc) and FREE
 * (cudaFree), which fires the free callback of legacy pins and defers the
 * free while persistent pins remain, as the real driver does.  Closing
 * /dev/nvemu frees the file's allocations (process exit).
 *
 * Like the driver, put_pages of a table whose free callback is running
 * waits for the callback and then returns 0, and so does put_pages of a
 * table a callback has already freed: the callback owns the table then.
 * Like the driver, put_pages names the mapping by its virtual address and
 * its table together: a table allocated at a freed table's address for
 * another allocation is not the one a late put_pages of the old one means.
 * And like the driver, legacy put_pages looks the mapping up among those of
 * the calling process (thread group): from any other process, a kworker
 * included, it finds none and returns 0 having freed nothing, so the free
 * callback stays armed until cudaFree or the owner's exit.
 *
 * Fault injection for phxfs's checks: the "fault" parameter makes the next
 * tables carry 1 = a wrong major version, 2 = 4 KiB page size, 3 = a page
 * outside the BAR, 4 = fail get_pages with -ENOMEM.
 *
 * Reuse, for the race of hardening.md's finding 8: "reuse" hands out freed
 * GPU virtual addresses again at once (first fit, as caching allocators
 * do; the memory behind them stays next-fit, so it is other memory) and
 * gives the next get_pages the last freed table's memory, as a slab's free
 * list would; "put_delay_us" makes legacy put_pages sleep before it looks the
 * table up, which is the caller being preempted just before the call.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitmap.h>
#include <linux/fs.h>
#include <linux/ktime.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/delay.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "nv_p2p.h"
#include "nvemu_uapi.h"

static char *bdf = "";
module_param(bdf, charp, 0444);
MODULE_PARM_DESC(bdf, "PCI device whose BAR plays GPU memory: DDDD:BB:DD.F");
static int bar = 2;
module_param(bar, int, 0444);
MODULE_PARM_DESC(bar, "BAR index (default 2, ivshmem's memory BAR)");
static ulong offset;
module_param(offset, ulong, 0444);
MODULE_PARM_DESC(offset, "First BAR byte used (64 KiB aligned); lower bytes are left to others");
static int fault;
module_param(fault, int, 0644);
MODULE_PARM_DESC(fault, "Fault injection: 0 none, 1 version, 2 page size, 3 outside BAR, 4 ENOMEM");
static bool reuse;
module_param(reuse, bool, 0644);
MODULE_PARM_DESC(reuse, "Reuse freed GPU addresses and page table memory at once");
static uint put_delay_us;
module_param(put_delay_us, uint, 0644);
MODULE_PARM_DESC(put_delay_us, "Legacy put_pages sleeps this long before its lookup");
static bool legacy_only;
module_param(legacy_only, bool, 0444);
MODULE_PARM_DESC(legacy_only, "Do not export the persistent API (an older driver)");

static bool refuse_persistent;
module_param(refuse_persistent, bool, 0644);
MODULE_PARM_DESC(refuse_persistent,
		 "Refuse persistent pins with -ENOTSUPP, as the driver does on MIG and vGPU");

struct nvemu_alloc_rec {
	struct list_head node;
	struct file *owner;
	u64 va;
	u64 length;
	u64 bar_offset;
	bool scatter;
	bool other_gpu; /* NVEMU_ALLOC_OTHER_GPU */
	bool slow_pin; /* NVEMU_ALLOC_SLOW_PIN */
	bool freed; /* cudaFree'd while persistently pinned: deferred */
	struct list_head pins;
};

struct nvemu_pin {
	struct list_head node;
	struct nvemu_alloc_rec *alloc;
	struct nvidia_p2p_page_table *table;
	u64 va;
	bool persistent;
	bool revoking;
	/* Legacy: the thread group that pinned; only its put_pages counts. */
	struct pid *owner;
	void (*cb)(void *data);
	void *data;
};

/* A table freed by its free callback: a racing put_pages of it returns 0. */
struct nvemu_spent {
	struct list_head node;
	const struct nvidia_p2p_page_table *table;
	u64 va;
};

static DEFINE_MUTEX(nvemu_lock);
static LIST_HEAD(nvemu_allocs);
static LIST_HEAD(nvemu_spent_tables);
/* Free callbacks running now (under nvemu_lock). */
static unsigned int nvemu_callbacks_running;
static unsigned long *nvemu_bitmap;
/* GPU virtual addresses in use: NVEMU_VA_BASE + bit x NVEMU_GPU_PAGE. */
static unsigned long *nvemu_va_bitmap;
static unsigned long nvemu_nbits;
/*
 * Next-fit: allocations move forward through the BAR and reuse freed space
 * only after wrapping, so the bytes a finished test left in "GPU memory"
 * stay there for the host's end-of-run comparison.
 */
static unsigned long nvemu_cursor;
/* With reuse: the last freed table's memory, for the next get_pages. */
static struct nvidia_p2p_page_table *nvemu_recycled;
static phys_addr_t nvemu_bar_start;
static struct pci_dev *nvemu_pdev;
static struct nvemu_stats nvemu_stats;

static struct nvemu_alloc_rec *nvemu_find_alloc(u64 va, u64 len)
{
	struct nvemu_alloc_rec *a;

	list_for_each_entry(a, &nvemu_allocs, node)
		if (!a->freed && va >= a->va && len <= a->length &&
		    va - a->va <= a->length - len)
			return a;
	return NULL;
}

static void nvemu_free_table(struct nvidia_p2p_page_table *t)
{
	if (!t)
		return;
	/* The entries are one array (see nvemu_make_table()). */
	if (t->entries)
		kvfree(t->pages[0]);
	kvfree(t->pages);
	if (READ_ONCE(reuse) && !cmpxchg(&nvemu_recycled, NULL, t))
		return;
	kfree(t);
}

/*
 * Built outside nvemu_lock from a copy of the allocation's fields: a table
 * of the whole high BAR is 131,072 entries, and the lock would keep every
 * cudaFree (and the free callback timed in highbar-nvidia) behind it, which
 * the driver does not do.  Its entries are one array, not one allocation
 * each: with the rig's slub_debug those took a second per table, which
 * would leave phxfs's own walks a small part of a large REGISTER.
 */
static int nvemu_make_table(const struct nvemu_alloc_rec *a, u64 va, u64 len,
			    struct nvidia_p2p_page_table **out)
{
	struct nvidia_p2p_page_table *t;
	struct nvidia_p2p_page *entries;
	u32 n = len / NVEMU_GPU_PAGE, i;

	t = xchg(&nvemu_recycled, NULL);
	if (t)
		memset(t, 0, sizeof(*t));
	else
		t = kzalloc(sizeof(*t), GFP_KERNEL);
	if (!t)
		return -ENOMEM;
	t->version = fault == 1 ? 0x00020000 : NVIDIA_P2P_PAGE_TABLE_VERSION;
	t->page_size = fault == 2 ? NVIDIA_P2P_PAGE_SIZE_4KB :
				    NVIDIA_P2P_PAGE_SIZE_64KB;
	t->pages = kvcalloc(n, sizeof(*t->pages), GFP_KERNEL);
	entries = kvcalloc(n, sizeof(*entries), GFP_KERNEL);
	if (!t->pages || !entries) {
		kvfree(entries);
		kvfree(t->pages);
		kfree(t);
		return -ENOMEM;
	}
	t->entries = n;
	for (i = 0; i < n; i++) {
		u64 page = (va - a->va) / NVEMU_GPU_PAGE + i;
		u64 npages = a->length / NVEMU_GPU_PAGE;

		t->pages[i] = &entries[i];
		if (a->scatter && (page ^ 1) < npages)
			page ^= 1;
		t->pages[i]->physical_address =
			nvemu_bar_start + a->bar_offset + page * NVEMU_GPU_PAGE;
		/* The other GPU's BAR: just past this one. */
		if (a->other_gpu)
			t->pages[i]->physical_address +=
				(u64)nvemu_nbits * NVEMU_GPU_PAGE;
		if (fault == 3 && i == n - 1)
			t->pages[i]->physical_address =
				nvemu_bar_start + (u64)nvemu_nbits * NVEMU_GPU_PAGE;
		if (!(i & 1023))
			cond_resched();
	}
	*out = t;
	return 0;
}

/* Under nvemu_lock: forget spent table @t; true if it was one. */
static bool nvemu_spent_drop_locked(const struct nvidia_p2p_page_table *t,
				    u64 va)
{
	struct nvemu_spent *sp;

	list_for_each_entry(sp, &nvemu_spent_tables, node) {
		if (sp->table == t && sp->va == va) {
			list_del(&sp->node);
			kfree(sp);
			return true;
		}
	}
	return false;
}

static int nvemu_pin(u64 va, u64 len, struct nvidia_p2p_page_table **table,
		     bool persistent, void (*cb)(void *data), void *data)
{
	struct nvemu_alloc_rec *a, snap;
	struct nvemu_pin *pin;
	int ret;

	if (!table || !len || !IS_ALIGNED(va, NVEMU_GPU_PAGE) ||
	    !IS_ALIGNED(len, NVEMU_GPU_PAGE))
		return -EINVAL;
	if (fault == 4)
		return -ENOMEM;
	pin = kzalloc(sizeof(*pin), GFP_KERNEL);
	if (!pin)
		return -ENOMEM;
	mutex_lock(&nvemu_lock);
	a = nvemu_find_alloc(va, len);
	if (!a) {
		ret = -EINVAL;
		goto err;
	}
	/* The other GPU is in MIG mode. */
	if (persistent && a->other_gpu) {
		ret = -ENOTSUPP;
		goto err;
	}
	snap = *a;
	if (snap.slow_pin && !persistent)
		nvemu_stats.slow_pins_sleeping++;
	mutex_unlock(&nvemu_lock);
	if (snap.slow_pin && !persistent) {
		msleep(NVEMU_SLOW_PIN_MS);
		mutex_lock(&nvemu_lock);
		nvemu_stats.slow_pins_sleeping--;
		mutex_unlock(&nvemu_lock);
	}
	ret = nvemu_make_table(&snap, va, len, &pin->table);
	if (ret)
		goto err_unlocked;
	mutex_lock(&nvemu_lock);
	/* Freed meanwhile (and maybe allocated again elsewhere): not pinned. */
	a = nvemu_find_alloc(va, len);
	if (!a || a->va != snap.va || a->bar_offset != snap.bar_offset ||
	    a->length != snap.length || a->scatter != snap.scatter ||
	    a->other_gpu != snap.other_gpu) {
		mutex_unlock(&nvemu_lock);
		nvemu_free_table(pin->table);
		ret = -EINVAL;
		goto err_unlocked;
	}
	/* A new table at a spent one's address (and VA) is not that one. */
	nvemu_spent_drop_locked(pin->table, va);
	pin->alloc = a;
	pin->va = va;
	pin->persistent = persistent;
	if (!persistent)
		pin->owner = get_pid(task_tgid(current));
	pin->cb = cb;
	pin->data = data;
	list_add(&pin->node, &a->pins);
	nvemu_stats.pins_live++;
	if (persistent)
		nvemu_stats.persistent_pins++;
	else
		nvemu_stats.legacy_pins++;
	*table = pin->table;
	mutex_unlock(&nvemu_lock);
	return 0;
err:
	mutex_unlock(&nvemu_lock);
err_unlocked:
	kfree(pin);
	return ret;
}

static void nvemu_release_alloc_locked(struct nvemu_alloc_rec *a)
{
	bitmap_clear(nvemu_bitmap, a->bar_offset / NVEMU_GPU_PAGE,
		     a->length / NVEMU_GPU_PAGE);
	bitmap_clear(nvemu_va_bitmap, (a->va - NVEMU_VA_BASE) / NVEMU_GPU_PAGE,
		     a->length / NVEMU_GPU_PAGE);
	list_del(&a->node);
	kfree(a);
	nvemu_stats.allocs_live--;
}

/* The pin of table @t at @va (any VA for free_page_table: U64_MAX). */
static struct nvemu_pin *nvemu_find_pin(struct nvidia_p2p_page_table *t,
					u64 va)
{
	struct nvemu_alloc_rec *a;
	struct nvemu_pin *pin;

	list_for_each_entry(a, &nvemu_allocs, node)
		list_for_each_entry(pin, &a->pins, node)
			if (pin->table == t && (va == U64_MAX || pin->va == va))
				return pin;
	return NULL;
}

static int nvemu_unpin(struct nvidia_p2p_page_table *t, u64 va,
		       bool persistent)
{
	struct nvemu_alloc_rec *a;
	struct nvemu_pin *pin;

	mutex_lock(&nvemu_lock);
	pin = nvemu_find_pin(t, va);
	if (pin && !persistent && pin->owner != task_tgid(current)) {
		nvemu_stats.foreign_puts++;
		mutex_unlock(&nvemu_lock);
		return 0;
	}
	while (pin && pin->revoking && !persistent && nvemu_callbacks_running) {
		/* The driver serialises put_pages with a running callback. */
		mutex_unlock(&nvemu_lock);
		usleep_range(100, 500);
		mutex_lock(&nvemu_lock);
		pin = nvemu_find_pin(t, va);
	}
	if (!pin && !persistent && nvemu_spent_drop_locked(t, va)) {
		/* Its callback freed it: nothing left to put, as in the driver. */
		nvemu_stats.raced_puts++;
		mutex_unlock(&nvemu_lock);
		return 0;
	}
	if (!pin || pin->revoking || pin->persistent != persistent) {
		mutex_unlock(&nvemu_lock);
		pr_err("put_pages%s of an unknown or revoked page table\n",
		       persistent ? "_persistent" : "");
		return -EINVAL;
	}
	a = pin->alloc;
	list_del(&pin->node);
	nvemu_stats.pins_live--;
	if (a->freed && list_empty(&a->pins))
		nvemu_release_alloc_locked(a);
	mutex_unlock(&nvemu_lock);
	nvemu_free_table(pin->table);
	put_pid(pin->owner);
	kfree(pin);
	return 0;
}

int nvidia_p2p_get_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 u64 length, struct nvidia_p2p_page_table **page_table,
			 void (*free_callback)(void *data), void *data)
{
	if (!free_callback)
		return -EINVAL;
	return nvemu_pin(virtual_address, length, page_table, false,
			 free_callback, data);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages);

int nvidia_p2p_put_pages(u64 p2p_token, u32 va_space, u64 virtual_address,
			 struct nvidia_p2p_page_table *page_table)
{
	uint delay = READ_ONCE(put_delay_us);

	if (delay)
		usleep_range(delay, delay + delay / 4);
	return nvemu_unpin(page_table, virtual_address, false);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages);

int nvidia_p2p_free_page_table(struct nvidia_p2p_page_table *page_table)
{
	/* Without it a racing put_pages is reported as unknown: louder, not wrong. */
	struct nvemu_spent *spent = kmalloc(sizeof(*spent), GFP_KERNEL);
	struct nvemu_pin *pin;

	mutex_lock(&nvemu_lock);
	pin = nvemu_find_pin(page_table, U64_MAX);
	if (!pin || !pin->revoking) {
		mutex_unlock(&nvemu_lock);
		kfree(spent);
		pr_err("free_page_table outside a free callback\n");
		return -EINVAL;
	}
	list_del(&pin->node);
	nvemu_stats.pins_live--;
	if (spent) {
		spent->table = page_table;
		spent->va = pin->va;
		list_add(&spent->node, &nvemu_spent_tables);
	}
	mutex_unlock(&nvemu_lock);
	nvemu_free_table(pin->table);
	put_pid(pin->owner);
	kfree(pin);
	return 0;
}
EXPORT_SYMBOL_GPL(nvidia_p2p_free_page_table);

/*
 * The persistent pair is looked up by phxfs with symbol_get(); with
 * legacy_only they fail as if absent from an older driver's API.
 */
int nvidia_p2p_get_pages_persistent(u64 virtual_address, u64 length,
				    struct nvidia_p2p_page_table **page_table,
				    u32 flags)
{
	if (legacy_only || READ_ONCE(refuse_persistent))
		return -ENOTSUPP;
	if (flags)
		return -EINVAL;
	return nvemu_pin(virtual_address, length, page_table, true, NULL, NULL);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_get_pages_persistent);

int nvidia_p2p_put_pages_persistent(u64 virtual_address,
				    struct nvidia_p2p_page_table *page_table,
				    u32 flags)
{
	return nvemu_unpin(page_table, virtual_address, true);
}
EXPORT_SYMBOL_GPL(nvidia_p2p_put_pages_persistent);

/* cudaFree: fire legacy callbacks, defer while persistent pins remain. */
static int nvemu_free_alloc(struct nvemu_alloc_rec *a)
{
	struct nvemu_pin *pin;

	for (;;) {
		void (*cb)(void *data) = NULL;
		void *data = NULL;
		ktime_t start, took;

		mutex_lock(&nvemu_lock);
		list_for_each_entry(pin, &a->pins, node) {
			if (!pin->persistent && !pin->revoking) {
				pin->revoking = true;
				cb = pin->cb;
				data = pin->data;
				nvemu_stats.callbacks++;
				nvemu_callbacks_running++;
				break;
			}
		}
		mutex_unlock(&nvemu_lock);
		if (!cb)
			break;
		/* The callback must call nvidia_p2p_free_page_table(). */
		start = ktime_get();
		cb(data);
		took = ktime_get() - start;
		mutex_lock(&nvemu_lock);
		nvemu_callbacks_running--;
		nvemu_stats.last_callback_ns = took;
		mutex_unlock(&nvemu_lock);
	}

	mutex_lock(&nvemu_lock);
	list_for_each_entry(pin, &a->pins, node) {
		if (pin->revoking) {
			pr_err("free callback returned without freeing its page table\n");
			break;
		}
	}
	a->owner = NULL;
	if (list_empty(&a->pins)) {
		nvemu_release_alloc_locked(a);
	} else {
		a->freed = true;
		nvemu_stats.deferred_frees++;
	}
	mutex_unlock(&nvemu_lock);
	return 0;
}

static long nvemu_ioctl_alloc(struct file *file, void __user *uarg)
{
	struct nvemu_alloc args;
	struct nvemu_alloc_rec *a;
	unsigned long n, start, va_start;

	if (copy_from_user(&args, uarg, sizeof(args)))
		return -EFAULT;
	if (!args.length || !IS_ALIGNED(args.length, NVEMU_GPU_PAGE) ||
	    args.flags & ~(NVEMU_ALLOC_SCATTER | NVEMU_ALLOC_OTHER_GPU |
			   NVEMU_ALLOC_SLOW_PIN) ||
	    args.pad)
		return -EINVAL;
	n = args.length / NVEMU_GPU_PAGE;
	if (n > nvemu_nbits)
		return -ENOMEM;
	a = kzalloc(sizeof(*a), GFP_KERNEL);
	if (!a)
		return -ENOMEM;
	mutex_lock(&nvemu_lock);
	start = bitmap_find_next_zero_area(nvemu_bitmap, nvemu_nbits,
					   nvemu_cursor, n, 0);
	if (start >= nvemu_nbits)
		start = bitmap_find_next_zero_area(nvemu_bitmap, nvemu_nbits, 0,
						   n, 0);
	if (start >= nvemu_nbits) {
		mutex_unlock(&nvemu_lock);
		kfree(a);
		return -ENOMEM;
	}
	bitmap_set(nvemu_bitmap, start, n);
	nvemu_cursor = start + n;
	/* The address is the memory's BAR offset unless reused or taken. */
	va_start = start;
	if (READ_ONCE(reuse) ||
	    bitmap_find_next_zero_area(nvemu_va_bitmap, nvemu_nbits, start, n,
				       0) != start)
		va_start = bitmap_find_next_zero_area(nvemu_va_bitmap,
						      nvemu_nbits, 0, n, 0);
	if (va_start >= nvemu_nbits) {
		bitmap_clear(nvemu_bitmap, start, n);
		mutex_unlock(&nvemu_lock);
		kfree(a);
		return -ENOMEM;
	}
	bitmap_set(nvemu_va_bitmap, va_start, n);
	INIT_LIST_HEAD(&a->pins);
	a->owner = file;
	a->bar_offset = (u64)start * NVEMU_GPU_PAGE;
	a->va = NVEMU_VA_BASE + (u64)va_start * NVEMU_GPU_PAGE;
	a->length = args.length;
	a->scatter = args.flags & NVEMU_ALLOC_SCATTER;
	a->other_gpu = args.flags & NVEMU_ALLOC_OTHER_GPU;
	a->slow_pin = args.flags & NVEMU_ALLOC_SLOW_PIN;
	list_add(&a->node, &nvemu_allocs);
	nvemu_stats.allocs_live++;
	mutex_unlock(&nvemu_lock);

	args.va = a->va;
	args.bar_offset = a->bar_offset;
	if (copy_to_user(uarg, &args, sizeof(args))) {
		nvemu_free_alloc(a);
		return -EFAULT;
	}
	return 0;
}

static long nvemu_ioctl_free(struct file *file, void __user *uarg)
{
	struct nvemu_alloc_rec *a, *found = NULL;
	struct nvemu_free args;

	if (copy_from_user(&args, uarg, sizeof(args)))
		return -EFAULT;
	mutex_lock(&nvemu_lock);
	list_for_each_entry(a, &nvemu_allocs, node)
		if (a->owner == file && a->va == args.va && !a->freed)
			found = a;
	/* Claim it so that a concurrent FREE or close cannot free it twice. */
	if (found)
		found->owner = NULL;
	mutex_unlock(&nvemu_lock);
	if (!found)
		return -EINVAL;
	return nvemu_free_alloc(found);
}

/*
 * Through the BAR's struct pages, so through the kernel's own (uncached)
 * mapping of them: a second mapping of another memory type would conflict.
 */
static long nvemu_ioctl_peek(void __user *uarg)
{
	struct nvemu_peek args;
	u64 done = 0;

	if (copy_from_user(&args, uarg, sizeof(args)))
		return -EFAULT;
	if (!args.length || args.length > SZ_1M ||
	    args.bar_offset + args.length < args.bar_offset ||
	    args.bar_offset + args.length > (u64)nvemu_nbits * NVEMU_GPU_PAGE)
		return -EINVAL;
	while (done < args.length) {
		phys_addr_t phys = nvemu_bar_start + args.bar_offset + done;
		unsigned long pfn = PHYS_PFN(phys);
		size_t in_page = offset_in_page(phys);
		size_t n = min_t(u64, PAGE_SIZE - in_page, args.length - done);

		if (!pfn_valid(pfn) || !is_zone_device_page(pfn_to_page(pfn)))
			return -ENXIO;
		if (copy_to_user(u64_to_user_ptr(args.buf + done),
				 page_address(pfn_to_page(pfn)) + in_page, n))
			return -EFAULT;
		done += n;
	}
	return 0;
}

static long nvemu_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	void __user *uarg = (void __user *)arg;
	struct nvemu_stats stats;

	switch (cmd) {
	case NVEMU_IOC_ALLOC:
		return nvemu_ioctl_alloc(file, uarg);
	case NVEMU_IOC_FREE:
		return nvemu_ioctl_free(file, uarg);
	case NVEMU_IOC_PEEK:
		return nvemu_ioctl_peek(uarg);
	case NVEMU_IOC_STATS:
		mutex_lock(&nvemu_lock);
		stats = nvemu_stats;
		mutex_unlock(&nvemu_lock);
		return copy_to_user(uarg, &stats, sizeof(stats)) ? -EFAULT : 0;
	default:
		return -ENOTTY;
	}
}

static int nvemu_release(struct inode *inode, struct file *file)
{
	struct nvemu_alloc_rec *a;

	for (;;) {
		struct nvemu_alloc_rec *found = NULL;

		mutex_lock(&nvemu_lock);
		list_for_each_entry(a, &nvemu_allocs, node) {
			if (a->owner == file) {
				found = a;
				found->owner = NULL;
				break;
			}
		}
		mutex_unlock(&nvemu_lock);
		if (!found)
			break;
		nvemu_free_alloc(found);
	}
	return 0;
}

static const struct file_operations nvemu_fops = {
	.owner = THIS_MODULE,
	.unlocked_ioctl = nvemu_ioctl,
	.release = nvemu_release,
};

static struct miscdevice nvemu_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "nvemu",
	.fops = &nvemu_fops,
	.mode = 0666,
};

static int __init nvemu_init(void)
{
	unsigned int domain, busnr, slot, func;
	int ret;

	if (sscanf(bdf, "%x:%x:%x.%x", &domain, &busnr, &slot, &func) != 4) {
		pr_err("bdf=DDDD:BB:DD.F is required\n");
		return -EINVAL;
	}
	nvemu_pdev = pci_get_domain_bus_and_slot(domain, busnr,
						 PCI_DEVFN(slot, func));
	if (!nvemu_pdev)
		return -ENODEV;
	if (bar < 0 || bar >= PCI_STD_NUM_BARS ||
	    !(pci_resource_flags(nvemu_pdev, bar) & IORESOURCE_MEM)) {
		ret = -EINVAL;
		goto err_put;
	}
	nvemu_bar_start = pci_resource_start(nvemu_pdev, bar);
	nvemu_nbits = pci_resource_len(nvemu_pdev, bar) / NVEMU_GPU_PAGE;
	if (!IS_ALIGNED(offset, NVEMU_GPU_PAGE) ||
	    offset / NVEMU_GPU_PAGE >= nvemu_nbits) {
		ret = -EINVAL;
		goto err_put;
	}
	nvemu_bitmap = bitmap_zalloc(nvemu_nbits, GFP_KERNEL);
	nvemu_va_bitmap = bitmap_zalloc(nvemu_nbits, GFP_KERNEL);
	if (!nvemu_bitmap || !nvemu_va_bitmap) {
		ret = -ENOMEM;
		goto err_bitmap;
	}
	/* Bytes below offset are never handed out. */
	bitmap_set(nvemu_bitmap, 0, offset / NVEMU_GPU_PAGE);
	ret = misc_register(&nvemu_misc);
	if (ret)
		goto err_bitmap;
	pr_info("emulating %llu MiB of GPU memory on %s BAR %d\n",
		(nvemu_nbits * NVEMU_GPU_PAGE - offset) >> 20, bdf, bar);
	return 0;
err_bitmap:
	bitmap_free(nvemu_va_bitmap);
	bitmap_free(nvemu_bitmap);
err_put:
	pci_dev_put(nvemu_pdev);
	return ret;
}

static void __exit nvemu_exit(void)
{
	struct nvemu_alloc_rec *a, *tmp;

	misc_deregister(&nvemu_misc);
	/* phxfs holds symbol references while it pins, so no pin is left. */
	if (nvemu_stats.pins_live)
		pr_err("leak: %llu pins still live at unload\n",
		       nvemu_stats.pins_live);
	list_for_each_entry_safe(a, tmp, &nvemu_allocs, node)
		nvemu_release_alloc_locked(a);
	while (!list_empty(&nvemu_spent_tables)) {
		struct nvemu_spent *sp = list_first_entry(&nvemu_spent_tables,
							  struct nvemu_spent, node);

		nvemu_spent_drop_locked(sp->table, sp->va);
	}
	kfree(xchg(&nvemu_recycled, NULL));
	bitmap_free(nvemu_va_bitmap);
	bitmap_free(nvemu_bitmap);
	pci_dev_put(nvemu_pdev);
}

module_init(nvemu_init);
module_exit(nvemu_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Test-only emulation of the NVIDIA p2p API over a PCI BAR");
