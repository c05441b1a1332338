// SPDX-License-Identifier: GPL-2.0
/*
 * phxfs_main.c - module load/unload and device discovery.
 *
 * Devices served, numbered in PCI address order (domain, bus, devfn), which
 * is also CUDA's order with CUDA_DEVICE_ORDER=PCI_BUS_ID:
 *  - every NVIDIA display/3D controller (unless nvidia_scan=0), memory =
 *    its largest 64-bit prefetchable BAR (BAR1);
 *  - devices named in nvidia= ("DDDD:BB:DD.F" or "DDDD:BB:DD.F@BAR"), for
 *    NVIDIA-compatible providers the scan cannot recognise (the rig);
 *  - devices named in pcibar= ("DDDD:BB:DD.F@BAR"), served by the generic
 *    PCI BAR provider.
 * The NVIDIA driver need not be loaded first: its symbols are resolved at
 * registration time.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/cdev.h>
#include <linux/device.h>
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/slab.h>
#include <linux/sort.h>

#include "phxfs.h"
#include "phxfs_compat.h"

#define PHXFS_MAX_PARAM_DEVICES 16

static char *pcibar[PHXFS_MAX_PARAM_DEVICES];
static int pcibar_count;
module_param_array(pcibar, charp, &pcibar_count, 0444);
MODULE_PARM_DESC(pcibar, "Serve PCI BARs as device memory: DDDD:BB:DD.F@BAR,...");

static char *nvidia[PHXFS_MAX_PARAM_DEVICES];
static int nvidia_count;
module_param_array(nvidia, charp, &nvidia_count, 0444);
MODULE_PARM_DESC(nvidia, "Extra devices for the NVIDIA provider: DDDD:BB:DD.F[@BAR],...");

static bool nvidia_scan = true;
module_param(nvidia_scan, bool, 0444);
MODULE_PARM_DESC(nvidia_scan, "Serve every NVIDIA GPU found on the PCI bus (default on)");

static ushort dev_mode = 0660;
module_param(dev_mode, ushort, 0444);
MODULE_PARM_DESC(dev_mode, "Mode of /dev/phxfs_devN (default 0660)");

static uint dev_gid;
module_param(dev_gid, uint, 0444);
MODULE_PARM_DESC(dev_gid, "Group id owning /dev/phxfs_devN (default 0)");

struct phxfs_candidate {
	struct pci_dev *pdev;
	int bar;
	const struct phxfs_provider *provider;
};

static struct phxfs_dev *phxfs_devs[PHXFS_MAX_DEVICES];
static unsigned int phxfs_ndevs;
static dev_t phxfs_devt;
static struct cdev phxfs_cdev;
static struct class *phxfs_class;

/**
 * phxfs_dev_get() - device served at minor @index.
 * @index: minor number.
 *
 * The table is fixed between load and unload, and an open file pins the
 * module, so no reference counting is needed.
 *
 * Return: the device, or NULL.
 */
struct phxfs_dev *phxfs_dev_get(unsigned int index)
{
	return index < phxfs_ndevs ? phxfs_devs[index] : NULL;
}

static char *phxfs_devnode(PHXFS_DEVNODE_CONST struct device *dev,
			   umode_t *mode, kuid_t *uid, kgid_t *gid)
{
	if (mode)
		*mode = dev_mode & 0777;
	if (gid)
		*gid = KGIDT_INIT(dev_gid);
	return NULL;
}

static const struct device_type phxfs_device_type = {
	.name = "phxfs",
	.devnode = phxfs_devnode,
};

static int phxfs_largest_prefetchable_bar(struct pci_dev *pdev)
{
	resource_size_t best_size = 0;
	int bar, best = -1;

	for (bar = 0; bar < PCI_STD_NUM_BARS; bar++) {
		unsigned long flags = pci_resource_flags(pdev, bar);

		if (!(flags & IORESOURCE_MEM) || !(flags & IORESOURCE_PREFETCH) ||
		    !(flags & IORESOURCE_MEM_64))
			continue;
		if (pci_resource_len(pdev, bar) > best_size) {
			best_size = pci_resource_len(pdev, bar);
			best = bar;
		}
	}
	return best;
}

/* Parses "DDDD:BB:DD.F" with an optional "@BAR". */
static int phxfs_parse_device(const char *spec, bool need_bar,
			      struct phxfs_candidate *cand)
{
	unsigned int domain, bus, slot, func;
	int bar = -1, n;
	char tail;

	n = sscanf(spec, "%x:%x:%x.%x@%d%c", &domain, &bus, &slot, &func, &bar,
		   &tail);
	if (n < 4 || n > 5 || bus > 0xff || slot > 0x1f || func > 7 ||
	    (need_bar && n != 5) ||
	    (n == 5 && (bar < 0 || bar >= PCI_STD_NUM_BARS))) {
		pr_err("bad device \"%s\" (want DDDD:BB:DD.F%s)\n", spec,
		       need_bar ? "@BAR" : "[@BAR]");
		return -EINVAL;
	}
	cand->pdev = pci_get_domain_bus_and_slot(domain, bus,
						 PCI_DEVFN(slot, func));
	if (!cand->pdev) {
		pr_err("no PCI device %s\n", spec);
		return -ENODEV;
	}
	if (bar < 0)
		bar = phxfs_largest_prefetchable_bar(cand->pdev);
	if (bar < 0 || !(pci_resource_flags(cand->pdev, bar) & IORESOURCE_MEM)) {
		pci_err(cand->pdev, "no usable memory BAR in \"%s\"\n", spec);
		pci_dev_put(cand->pdev);
		cand->pdev = NULL;
		return -ENODEV;
	}
	cand->bar = bar;
	return 0;
}

static int phxfs_candidate_cmp(const void *a, const void *b)
{
	const struct pci_dev *x = ((const struct phxfs_candidate *)a)->pdev;
	const struct pci_dev *y = ((const struct phxfs_candidate *)b)->pdev;
	int dx = pci_domain_nr(x->bus), dy = pci_domain_nr(y->bus);

	if (dx != dy)
		return dx < dy ? -1 : 1;
	if (x->bus->number != y->bus->number)
		return x->bus->number < y->bus->number ? -1 : 1;
	if (x->devfn != y->devfn)
		return x->devfn < y->devfn ? -1 : 1;
	return 0;
}

static bool phxfs_candidate_known(const struct phxfs_candidate *cands,
				  unsigned int n, const struct pci_dev *pdev)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		if (cands[i].pdev == pdev)
			return true;
	return false;
}

static int phxfs_collect(struct phxfs_candidate *cands, unsigned int *count)
{
	struct pci_dev *pdev = NULL;
	unsigned int n = 0;
	int i, ret;

	for (i = 0; i < nvidia_count + pcibar_count; i++) {
		bool is_nv = i < nvidia_count;
		const char *spec = is_nv ? nvidia[i] : pcibar[i - nvidia_count];

		if (n >= PHXFS_MAX_DEVICES)
			return -E2BIG;
		ret = phxfs_parse_device(spec, !is_nv, &cands[n]);
		if (ret)
			return ret;
		if (phxfs_candidate_known(cands, n, cands[n].pdev)) {
			pr_err("device %s named twice\n", spec);
			pci_dev_put(cands[n].pdev);
			cands[n].pdev = NULL;
			return -EINVAL;
		}
		cands[n].provider = is_nv ? &phxfs_nvidia_provider :
					    &phxfs_pcibar_provider;
		n++;
	}

	while (nvidia_scan &&
	       (pdev = pci_get_device(PCI_VENDOR_ID_NVIDIA, PCI_ANY_ID, pdev))) {
		unsigned int class = pdev->class >> 8;
		int bar;

		if (class != PCI_CLASS_DISPLAY_VGA &&
		    class != PCI_CLASS_DISPLAY_3D)
			continue;
		if (phxfs_candidate_known(cands, n, pdev))
			continue;
		bar = phxfs_largest_prefetchable_bar(pdev);
		if (bar < 0) {
			pci_info(pdev, "NVIDIA GPU without a 64-bit prefetchable BAR, skipped\n");
			continue;
		}
		if (n >= PHXFS_MAX_DEVICES) {
			pci_dev_put(pdev);
			return -E2BIG;
		}
		cands[n].pdev = pci_dev_get(pdev);
		cands[n].bar = bar;
		cands[n].provider = &phxfs_nvidia_provider;
		n++;
	}
	*count = n;
	return 0;
}

static void phxfs_node_release(struct device *node)
{
	kfree(node);
}

/* The device node, with our type set before device_add() creates it. */
static int phxfs_node_create(struct phxfs_dev *dev)
{
	struct device *node;
	int ret;

	node = kzalloc(sizeof(*node), GFP_KERNEL);
	if (!node)
		return -ENOMEM;
	device_initialize(node);
	node->devt = MKDEV(MAJOR(phxfs_devt), dev->index);
	node->class = phxfs_class;
	node->type = &phxfs_device_type;
	node->parent = &dev->pdev->dev;
	node->release = phxfs_node_release;
	dev_set_drvdata(node, dev);
	ret = dev_set_name(node, "phxfs_dev%u", dev->index);
	if (!ret)
		ret = device_add(node);
	if (ret) {
		put_device(node);
		return ret;
	}
	dev->node = node;
	return 0;
}

static void phxfs_dev_destroy(struct phxfs_dev *dev)
{
	if (dev->node)
		device_unregister(dev->node);
	phxfs_bar_destroy_pages(dev);
	if (dev->region_requested)
		pci_release_region(dev->pdev, dev->bar);
	pci_disable_device(dev->pdev);
	pci_dev_put(dev->pdev);
	kfree(dev);
}

static int phxfs_dev_create(struct phxfs_candidate *cand, unsigned int index)
{
	struct phxfs_dev *dev;
	int ret;

	dev = kzalloc(sizeof(*dev), GFP_KERNEL);
	if (!dev)
		return -ENOMEM;
	dev->index = index;
	dev->pdev = cand->pdev;
	cand->pdev = NULL; /* dev owns the reference now */
	dev->bar = cand->bar;
	dev->provider = cand->provider;
	dev->bar_start = pci_resource_start(dev->pdev, dev->bar);
	dev->bar_size = pci_resource_len(dev->pdev, dev->bar);
	phxfs_reg_dev_init(dev);
	atomic64_set(&dev->next_pgoff, 1);

	/* Memory decoding must be on for the NVMe's DMA to reach the BAR. */
	ret = pci_enable_device_mem(dev->pdev);
	if (ret) {
		pci_err(dev->pdev, "cannot enable memory decoding: %d\n", ret);
		pci_dev_put(dev->pdev);
		kfree(dev);
		return ret;
	}
	/* A plain BAR is ours alone; a GPU's BAR belongs to its driver. */
	if (dev->provider == &phxfs_pcibar_provider) {
		ret = pci_request_region(dev->pdev, dev->bar, KBUILD_MODNAME);
		if (ret) {
			pci_err(dev->pdev, "BAR %d is in use by another driver\n",
				dev->bar);
			goto err;
		}
		dev->region_requested = true;
	}
	ret = phxfs_bar_create_pages(dev);
	if (ret)
		goto err;

	ret = phxfs_node_create(dev);
	if (ret)
		goto err;
	phxfs_devs[index] = dev;
	pci_info(dev->pdev, "phxfs_dev%u: %s provider, BAR %d, %llu MiB%s\n",
		 index, dev->provider->name, dev->bar,
		 (u64)dev->bar_size >> 20, dev->p2pdma ? ", PCI P2PDMA" : "");
	if (dev->provider->info_flags(dev) & PHXFS_INFO_PROVIDER_MISSING)
		pci_info(dev->pdev,
			 "phxfs_dev%u: NVIDIA driver not loaded yet; registrations fail with ENODEV until it is (no reload needed)\n",
			 index);
	return 0;
err:
	phxfs_dev_destroy(dev);
	return ret;
}

static void phxfs_destroy_all(void)
{
	while (phxfs_ndevs) {
		phxfs_ndevs--;
		phxfs_dev_destroy(phxfs_devs[phxfs_ndevs]);
		phxfs_devs[phxfs_ndevs] = NULL;
	}
}

static int __init phxfs_init(void)
{
	struct phxfs_candidate *cands;
	unsigned int count = 0, i;
	int ret;

	ret = phxfs_reg_module_init();
	if (ret)
		return ret;
	ret = phxfs_listing_init();
	if (ret)
		goto out_wq;
	cands = kcalloc(PHXFS_MAX_DEVICES, sizeof(*cands), GFP_KERNEL);
	if (!cands) {
		ret = -ENOMEM;
		goto out_reg;
	}
	ret = phxfs_collect(cands, &count);
	if (ret)
		goto out_cands;
	if (!count) {
		pr_err("no device to serve: no NVIDIA GPU found and no pcibar=/nvidia= parameter\n");
		ret = -ENODEV;
		goto out_cands;
	}
	sort(cands, count, sizeof(*cands), phxfs_candidate_cmp, NULL);

	ret = alloc_chrdev_region(&phxfs_devt, 0, PHXFS_MAX_DEVICES,
				  KBUILD_MODNAME);
	if (ret)
		goto out_cands;
	phxfs_class = phxfs_class_create(KBUILD_MODNAME);
	if (IS_ERR(phxfs_class)) {
		ret = PTR_ERR(phxfs_class);
		goto out_region;
	}

	for (i = 0; i < count; i++) {
		ret = phxfs_dev_create(&cands[i], i);
		if (ret)
			goto out_devs;
		phxfs_ndevs = i + 1;
	}
	/* Last: once the cdev is live, open() can find every device. */
	cdev_init(&phxfs_cdev, &phxfs_fops);
	phxfs_cdev.owner = THIS_MODULE;
	ret = cdev_add(&phxfs_cdev, phxfs_devt, PHXFS_MAX_DEVICES);
	if (ret)
		goto out_devs;
	pr_info("serving %u device(s), ABI %u\n", phxfs_ndevs,
		PHXFS_ABI_VERSION);
	kfree(cands);
	return 0;

out_devs:
	phxfs_destroy_all();
	class_destroy(phxfs_class);
out_region:
	unregister_chrdev_region(phxfs_devt, PHXFS_MAX_DEVICES);
out_cands:
	for (i = 0; i < PHXFS_MAX_DEVICES; i++)
		pci_dev_put(cands[i].pdev);
	kfree(cands);
out_reg:
	phxfs_listing_exit();
out_wq:
	phxfs_reg_module_exit();
	return ret;
}

static void __exit phxfs_exit(void)
{
	/* First: a deferred teardown may still be returning from its work. */
	phxfs_reg_module_exit();
	phxfs_listing_exit();
	cdev_del(&phxfs_cdev);
	phxfs_destroy_all();
	class_destroy(phxfs_class);
	unregister_chrdev_region(phxfs_devt, PHXFS_MAX_DEVICES);
	pr_info("unloaded\n");
}

module_init(phxfs_init);
module_exit(phxfs_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("Phoenix: GPU Direct Storage without phony buffers");
MODULE_VERSION("0.1.0");
