// SPDX-License-Identifier: GPL-2.0
/*
 * phxfs_file.c - /dev/phxfs_devN: open, ioctl, mmap, release.
 *
 * Lock order: mmap_lock (held by the mmap path) -> phxfs_file.lock ->
 * phxfs_reg.map_lock.  Teardown never takes mmap_lock: it zaps through the
 * file's address_space.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/compat.h>
#include <linux/fs.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "phxfs.h"

static int phxfs_open(struct inode *inode, struct file *file)
{
	struct phxfs_dev *dev = phxfs_dev_get(iminor(inode));
	struct phxfs_file *pf;

	if (!dev)
		return -ENXIO;
	pf = kzalloc(sizeof(*pf), GFP_KERNEL);
	if (!pf)
		return -ENOMEM;
	pf->dev = dev;
	pf->mapping = file->f_mapping;
	pf->path = file->f_path;
	mutex_init(&pf->lock);
	xa_init(&pf->regs);
	file->private_data = pf;
	return 0;
}

/*
 * How long the last close waits for DMA in flight on its registrations
 * before leaving them to the teardown work.  I/O the process started ends
 * within it; references user space holds for as long as it likes do not
 * (a pipe it vmsplice'd the pages into, io_uring fixed buffers of a ring
 * whose release comes after this file's as the process exits), and the
 * last close may run where no wait can be cut short: in an exiting task,
 * which cannot be killed any more, or in a kernel thread (delayed fput).
 */
#define PHXFS_RELEASE_WAIT (HZ / 4)

static int phxfs_release(struct inode *inode, struct file *file)
{
	struct phxfs_file *pf = file->private_data;
	unsigned long deadline = jiffies + PHXFS_RELEASE_WAIT;
	struct phxfs_reg *reg;
	unsigned long index;

	/*
	 * Every VMA of this file holds a file reference, so no mapping is
	 * left; DMA started from one may still be in flight, which teardown
	 * waits for, a bounded time: PHXFS_RELEASE_WAIT for all of them
	 * together, not each (a process holding one page of each of 10,000
	 * registrations would otherwise take 40 minutes to exit).
	 */
	xa_for_each(&pf->regs, index, reg) {
		unsigned long now = jiffies;

		xa_erase(&pf->regs, index);
		phxfs_reg_teardown(reg, time_before(now, deadline) ?
						deadline - now :
						PHXFS_NO_WAIT);
	}
	xa_destroy(&pf->regs);
	kfree(pf);
	return 0;
}

/*
 * Copies a versioned argument in; every struct starts with abi_version and
 * argsz.  The ioctl number already encodes our struct size, so argsz only
 * has to be at least that.  @newest is the highest abi_version accepted:
 * PHXFS_ABI_VERSION, or U32_MAX for GET_INFO, which must answer newer user
 * space with the version the module speaks.
 */
static int phxfs_copy_args(void *karg, const void __user *uarg, size_t size,
			   u32 newest)
{
	const struct {
		__u32 abi_version;
		__u32 argsz;
	} *hdr = karg;

	if (copy_from_user(karg, uarg, size))
		return -EFAULT;
	if (hdr->abi_version < PHXFS_ABI_VERSION_MIN ||
	    hdr->abi_version > newest)
		return -EPROTO;
	if (hdr->argsz < size)
		return -EINVAL;
	return 0;
}

static bool phxfs_all_zero(const __u64 *words, size_t count)
{
	size_t i;

	for (i = 0; i < count; i++)
		if (words[i])
			return false;
	return true;
}

static long phxfs_ioctl_info(struct phxfs_file *pf, void __user *uarg)
{
	struct phxfs_dev *dev = pf->dev;
	struct phxfs_info info;
	int ret;

	ret = phxfs_copy_args(&info, uarg, sizeof(info), U32_MAX);
	if (ret)
		return ret;
	memset(&info, 0, sizeof(info));
	info.abi_version = PHXFS_ABI_VERSION;
	info.argsz = sizeof(info);
	info.device_index = dev->index;
	info.provider = dev->provider->id;
	info.pci_domain = pci_domain_nr(dev->pdev->bus);
	info.pci_bdf = PCI_DEVID(dev->pdev->bus->number, dev->pdev->devfn);
	info.page_size = dev->provider->page_size(dev);
	info.flags = dev->provider->info_flags(dev) |
		     (dev->p2pdma ? PHXFS_INFO_P2PDMA : 0);
	info.bar_size = dev->bar_size;
	info.regs_live = atomic64_read(&dev->stats.regs_live);
	info.regs_total = atomic64_read(&dev->stats.regs_total);
	info.pages_mapped = atomic64_read(&dev->stats.pages_mapped);
	info.revocations = atomic64_read(&dev->stats.revocations);
	info.errors = atomic64_read(&dev->stats.errors);
	info.features = PHXFS_FEATURE_ABI_RANGE | PHXFS_FEATURE_OWNER_PROCESS |
			PHXFS_FEATURE_REGISTER_ACCESS |
			PHXFS_FEATURE_BOUNDED_REVOKE |
			PHXFS_FEATURE_PIN_REPORTED;
	if (copy_to_user(uarg, &info, sizeof(info)))
		return -EFAULT;
	return 0;
}

static long phxfs_ioctl_register(struct file *file, void __user *uarg)
{
	struct phxfs_file *pf = file->private_data;
	struct phxfs_register args;
	struct phxfs_reg *reg;
	int ret;

	/*
	 * A registration claims device pages (others get EBUSY on them) and
	 * only a read-write open can map it, so a read-only open, which may
	 * have been handed out as "look but do not touch", cannot pin, nor
	 * can a write-only one, which could pin pages it can never map.
	 */
	if ((file->f_mode & (FMODE_READ | FMODE_WRITE)) !=
	    (FMODE_READ | FMODE_WRITE))
		return -EBADF;
	ret = phxfs_copy_args(&args, uarg, sizeof(args), PHXFS_ABI_VERSION);
	if (ret)
		return ret;
	/* handle, mmap_offset and pin are outputs: what they hold is ignored. */
	if (args.flags || args.pad || args.reserved)
		return -EINVAL;

	ret = phxfs_reg_create(pf, args.device_addr, args.length, &reg);
	if (ret)
		return ret;

	args.handle = reg->handle;
	args.mmap_offset = reg->handle << PAGE_SHIFT;
	args.pin = reg->pin_api;
	if (copy_to_user(uarg, &args, sizeof(args))) {
		/* The caller cannot learn the handle: undo. */
		phxfs_reg_abandon(pf, reg);
		return -EFAULT;
	}
	phxfs_reg_publish(pf, reg);
	return 0;
}

static long phxfs_ioctl_deregister(struct phxfs_file *pf, void __user *uarg)
{
	struct phxfs_deregister args;
	struct phxfs_reg *reg;
	int ret;

	ret = phxfs_copy_args(&args, uarg, sizeof(args), PHXFS_ABI_VERSION);
	if (ret)
		return ret;
	if (!phxfs_all_zero(args.reserved, ARRAY_SIZE(args.reserved)))
		return -EINVAL;
	if (args.handle > ULONG_MAX)
		return -ENOENT;

	mutex_lock(&pf->lock);
	/* A slot still reserved by a REGISTER in progress loads as NULL. */
	reg = xa_load(&pf->regs, (unsigned long)args.handle);
	if (!reg) {
		ret = -ENOENT;
	} else if (reg->owner_mm != current->mm) {
		/* Another process sharing the file (a forked child). */
		ret = -EACCES;
	} else {
		xa_erase(&pf->regs, (unsigned long)args.handle);
	}
	mutex_unlock(&pf->lock);
	if (ret)
		return ret;
	/* Until DMA in flight has finished (or the caller is killed). */
	phxfs_reg_teardown(reg, 0);
	return 0;
}

static long phxfs_ioctl(struct file *file, unsigned int cmd, unsigned long arg)
{
	struct phxfs_file *pf = file->private_data;
	void __user *uarg = (void __user *)arg;
	long ret;

	switch (cmd) {
	case PHXFS_IOC_GET_INFO:
		return phxfs_ioctl_info(pf, uarg);
	case PHXFS_IOC_REGISTER:
		ret = phxfs_ioctl_register(file, uarg);
		break;
	case PHXFS_IOC_DEREGISTER:
		ret = phxfs_ioctl_deregister(pf, uarg);
		break;
	default:
		return -ENOTTY;
	}
	if (ret)
		atomic64_inc(&pf->dev->stats.errors);
	return ret;
}

static int phxfs_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct phxfs_file *pf = file->private_data;
	struct phxfs_reg *reg;
	int ret;

	mutex_lock(&pf->lock);
	reg = xa_load(&pf->regs, vma->vm_pgoff);
	ret = reg ? phxfs_reg_mmap(reg, vma) : -EINVAL;
	mutex_unlock(&pf->lock);
	return ret;
}

const struct file_operations phxfs_fops = {
	.owner = THIS_MODULE,
	.open = phxfs_open,
	.release = phxfs_release,
	.unlocked_ioctl = phxfs_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = phxfs_mmap,
	.llseek = noop_llseek,
};
