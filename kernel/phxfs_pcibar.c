// SPDX-License-Identifier: GPL-2.0
/*
 * phxfs_pcibar.c - provider for device memory that is simply a PCI BAR
 * (the rig's ivshmem device, FPGAs, an NVMe CMB).  A registration names a
 * byte range of the BAR; nothing needs pinning because the memory cannot
 * move or be freed while the module holds the BAR.
 *
 * Who may register: a plain BAR has no allocator that could say which
 * bytes belong to whom, so any range is raw access to the device, like
 * /dev/mem: it needs CAP_SYS_RAWIO, unless the administrator grants it to
 * every read-write opener of the node with pcibar_open=1 (a single-user
 * machine, or one whose node's group is trusted with the whole BAR).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/capability.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/sched.h>

#include "phxfs.h"

static bool pcibar_open;
module_param(pcibar_open, bool, 0644);
MODULE_PARM_DESC(pcibar_open,
		 "Let every read-write opener register pcibar ranges without CAP_SYS_RAWIO (default off)");

static u32 phxfs_pcibar_page_size(const struct phxfs_dev *dev)
{
	return PAGE_SIZE;
}

static u32 phxfs_pcibar_info_flags(const struct phxfs_dev *dev)
{
	return 0;
}

static int phxfs_pcibar_may_register(const struct phxfs_dev *dev)
{
	if (!READ_ONCE(pcibar_open) && !capable(CAP_SYS_RAWIO))
		return -EPERM;
	return 0;
}

static int phxfs_pcibar_pin(struct phxfs_reg *reg)
{
	struct phxfs_dev *dev = reg->dev;
	unsigned long i;

	reg->pin_api = PHXFS_PIN_BAR;
	if (reg->device_addr >= dev->bar_size ||
	    reg->length > dev->bar_size - reg->device_addr)
		return -ERANGE;
	for (i = 0; i < reg->npages; i++) {
		reg->pages[i] = phxfs_bar_page(dev, dev->bar_start +
						       reg->device_addr +
						       ((u64)i << PAGE_SHIFT));
		if (!reg->pages[i])
			return -ERANGE;
		if (!(i & 1023))
			cond_resched();
	}
	return 0;
}

static void phxfs_pcibar_unpin(struct phxfs_reg *reg)
{
}

const struct phxfs_provider phxfs_pcibar_provider = {
	.name = "pcibar",
	.id = PHXFS_PROVIDER_PCIBAR,
	.page_size = phxfs_pcibar_page_size,
	.info_flags = phxfs_pcibar_info_flags,
	.may_register = phxfs_pcibar_may_register,
	.pin = phxfs_pcibar_pin,
	.unpin = phxfs_pcibar_unpin,
};
