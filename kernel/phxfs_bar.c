// SPDX-License-Identifier: GPL-2.0
/*
 * phxfs_bar.c - struct pages for a device memory BAR (ZONE_DEVICE).
 *
 * How the BAR gets its pages depends on CONFIG_PCI_P2PDMA:
 *
 * Off (Debian's 6.1 and 6.12): phxfs creates its own pgmap of type
 * MEMORY_DEVICE_PCI_P2PDMA with memremap_pages().  That type maps the range
 * uncached in the kernel's linear map (pgprot_noncached), which is what MMIO
 * needs: a write-back alias of a GPU BAR (what MEMORY_DEVICE_GENERIC would
 * create) invites speculative reads and a PAT conflict with the GPU
 * driver's own write-combined mapping.  With CONFIG_PCI_P2PDMA off,
 * is_pci_p2pdma_page() is constant false, so the block layer treats these
 * pages like RAM and dma-direct hands the controller the BAR's CPU physical
 * address (the bus address on x86 without an IOMMU in translation mode).
 * memremap_pages() rather than devm_memremap_pages(): the PCI device
 * belongs to another driver (or none), so its devres list would only be
 * released when *that* driver unbinds, not when phxfs unloads.
 *
 * On (Ubuntu, RHEL, SUSE, Debian from 7.x): is_pci_p2pdma_page() is real
 * and takes the pgmap to be embedded in p2pdma.c's private struct, so the
 * only sound way is the official API.  phxfs registers the BAR with
 * pci_p2pdma_add_resource() and then allocates all of it from the p2pdma
 * pool with pci_alloc_p2pmem().  That allocation is what makes the pages
 * phxfs's alone: the pool hands none of them to anyone else (sysfs
 * p2pmem/allocate, nvmet, other drivers), and it holds a reference on the
 * pgmap, so the pgmap cannot go away under phxfs's registrations.  The
 * block layer's P2P gating then applies as to any p2pmem: O_DIRECT GUP
 * passes FOLL_PCI_P2PDMA only for queues that support P2PDMA, and the DMA
 * mapping checks the PCI distance between the NVMe and the BAR's device
 * (a common switch, or a whitelisted host bridge).
 * pci_p2pdma_add_resource() is devm-managed on the PCI device and cannot be
 * undone at unload: phxfs frees its allocation and marks the BAR's first
 * page, and a later load adopts a pool that carries the mark and is wholly
 * free.  A BAR with struct pages that phxfs did not leave (the GPU driver's
 * own P2PDMA mode registers BAR1 as p2pmem) is left alone: the device is
 * refused with -EBUSY rather than given a second owner.
 *
 * Either way phxfs holds one reference on every page of the BAR from load
 * to unload (see PHXFS_IDLE_PAGE_REFS), so no put_page() can bring a page
 * to 0 and hand it to the pgmap's free callback while it is mapped.
 * The range must be aligned to a memory subsection (2 MiB on x86-64).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/memremap.h>
#include <linux/mm.h>
#include <linux/page_ref.h>
#include <linux/pci.h>
#include <linux/pci-p2pdma.h>
#include <linux/sched.h>
#include <linux/sizes.h>
#include <linux/slab.h>

#include "phxfs.h"
#include "phxfs_compat.h"

#define PHXFS_SUBSECTION_SIZE SZ_2M

/*
 * Left in zone_device_data of the BAR's first page when phxfs hands a
 * p2pdma pool back at unload, so that the next load knows the pool for its
 * own.  Not a pointer anyone dereferences; a poison value no allocator
 * returns.
 */
#define PHXFS_POOL_MARK ((void *)(POISON_POINTER_DELTA + 0x7068786673UL))

static unsigned long phxfs_bar_npages(const struct phxfs_dev *dev)
{
	return dev->bar_size >> PAGE_SHIFT;
}

static struct page *phxfs_bar_nth_page(const struct phxfs_dev *dev,
				       unsigned long i)
{
	return pfn_to_page(PHYS_PFN(dev->bar_start) + i);
}


/*
 * Without CONFIG_PCI_P2PDMA, KASLR sizes the direct map for RAM plus
 * CONFIG_RANDOMIZE_MEMORY_PHYSICAL_PADDING; a BAR far above RAM (a GPU's
 * BAR1 often sits tens of TiB up) may then lie beyond it, and older kernels
 * do not check before mapping it there.  The direct map's window ends
 * where the vmalloc area begins (KASLR keeps that order), so a BAR whose
 * linear address would reach vmalloc is refused before memremap_pages().
 */
static int phxfs_bar_check_reach(const struct phxfs_dev *dev)
{
#ifdef CONFIG_X86_64
	phys_addr_t last = dev->bar_start + dev->bar_size - 1;
	u64 reach = VMALLOC_START - PAGE_OFFSET;

	pci_dbg(dev->pdev, "BAR %d [%pa-%pa]; the direct map reaches %#llx\n",
		dev->bar, &dev->bar_start, &last, reach);
	if (last >= reach) {
		pci_err(dev->pdev,
			"BAR %d [%pa-%pa] lies beyond the kernel's direct map (%#llx bytes with this boot's memory layout): boot with nokaslr, or use a kernel built with CONFIG_PCI_P2PDMA, whose direct map covers every physical address\n",
			dev->bar, &dev->bar_start, &last, reach);
		return -ERANGE;
	}
#endif
	return 0;
}

static void phxfs_pgmap_free(phxfs_pgmap_free_arg *arg)
{
	/* phxfs holds a reference on every page: a page freed is a bug. */
	WARN_ONCE(1, "phxfs: a device page was freed while phxfs owned it\n");
}

static const struct dev_pagemap_ops phxfs_pgmap_ops = {
	.PHXFS_PGMAP_FREE_OP = phxfs_pgmap_free,
};

/*
 * The pgmap is allocated apart from @dev so that, should pages still be
 * referenced at unload, it can be leaked with them rather than freed.
 */
static int phxfs_bar_memremap(struct phxfs_dev *dev)
{
	struct dev_pagemap *pgmap;
	void *addr;
	int ret;

	pgmap = kzalloc(sizeof(*pgmap), GFP_KERNEL);
	if (!pgmap)
		return -ENOMEM;
	pgmap->type = MEMORY_DEVICE_PCI_P2PDMA;
	pgmap->range.start = dev->bar_start;
	pgmap->range.end = dev->bar_start + dev->bar_size - 1;
	pgmap->nr_range = 1;
	pgmap->ops = &phxfs_pgmap_ops;
	pgmap->owner = dev;
	addr = memremap_pages(pgmap, dev_to_node(&dev->pdev->dev));
	if (IS_ERR(addr)) {
		ret = PTR_ERR(addr);
		pci_err(dev->pdev, "memremap_pages of BAR %d failed: %d\n",
			dev->bar, ret);
		kfree(pgmap);
		return ret;
	}
	dev->pgmap = pgmap;
	return 0;
}

#if IS_ENABLED(CONFIG_PCI_P2PDMA)
static struct page *phxfs_bar_first_page(const struct phxfs_dev *dev)
{
	return phxfs_bar_nth_page(dev, 0);
}

static struct dev_pagemap *phxfs_get_dev_pagemap(unsigned long pfn)
{
#ifdef PHXFS_HAVE_GET_DEV_PAGEMAP_PFN_ONLY
	return get_dev_pagemap(pfn);
#else
	return get_dev_pagemap(pfn, NULL);
#endif
}

/*
 * Does the BAR already have struct pages, and are they a pool that phxfs
 * itself handed back?  Returns 0 when it has none, 1 when it is phxfs's own
 * pool, -EBUSY (logged) when someone else's pages cover any of it.
 */
static int phxfs_bar_existing_pool(struct phxfs_dev *dev)
{
	unsigned long pfn = PHYS_PFN(dev->bar_start);
	unsigned long last = PHYS_PFN(dev->bar_start + dev->bar_size - 1);
	struct dev_pagemap *pgmap;
	bool ours;

	pgmap = phxfs_get_dev_pagemap(pfn);
	if (!pgmap) {
		/* Nothing at the start; pages further in are someone's. */
		pgmap = phxfs_get_dev_pagemap(last);
		if (!pgmap)
			return 0;
		put_dev_pagemap(pgmap);
		goto foreign;
	}
	ours = pgmap->type == MEMORY_DEVICE_PCI_P2PDMA &&
	       pgmap->nr_range == 1 &&
	       pgmap->range.start == dev->bar_start &&
	       pgmap->range.end == dev->bar_start + dev->bar_size - 1 &&
	       phxfs_bar_first_page(dev)->zone_device_data == PHXFS_POOL_MARK;
	put_dev_pagemap(pgmap);
	if (ours)
		return 1;
foreign:
	pci_err(dev->pdev,
		"BAR %d already has struct pages that phxfs did not leave (the GPU driver's own P2PDMA mode, or another module registered it as p2pmem): phxfs does not serve this device\n",
		dev->bar);
	return -EBUSY;
}

static int phxfs_bar_p2pdma(struct phxfs_dev *dev)
{
	void *kaddr;
	int ret;

	ret = phxfs_bar_existing_pool(dev);
	if (ret < 0)
		return ret;
	if (!ret) {
		ret = pci_p2pdma_add_resource(dev->pdev, dev->bar,
					      dev->bar_size, 0);
		if (ret) {
			pci_err(dev->pdev,
				"pci_p2pdma_add_resource of BAR %d failed: %d\n",
				dev->bar, ret);
			return ret;
		}
	}
	kaddr = pci_alloc_p2pmem(dev->pdev, dev->bar_size);
	if (!kaddr) {
		pci_err(dev->pdev,
			"the p2pdma pool of BAR %d is partly allocated to another user: phxfs does not serve this device\n",
			dev->bar);
		return -EBUSY;
	}
	if (virt_to_page(kaddr) != phxfs_bar_first_page(dev)) {
		pci_free_p2pmem(dev->pdev, kaddr, dev->bar_size);
		pci_err(dev->pdev,
			"the p2pdma pool of BAR %d does not start at the BAR\n",
			dev->bar);
		return -EBUSY;
	}
	phxfs_bar_first_page(dev)->zone_device_data = NULL;
	dev->p2p_kaddr = kaddr;
	dev->p2pdma = true;
	return 0;
}

static void phxfs_bar_p2pdma_release(struct phxfs_dev *dev)
{
	phxfs_bar_first_page(dev)->zone_device_data = PHXFS_POOL_MARK;
	pci_free_p2pmem(dev->pdev, dev->p2p_kaddr, dev->bar_size);
	dev->p2p_kaddr = NULL;
}
#else
static int phxfs_bar_p2pdma(struct phxfs_dev *dev)
{
	return -EOPNOTSUPP;
}

static void phxfs_bar_p2pdma_release(struct phxfs_dev *dev)
{
}
#endif

/*
 * Takes phxfs's reference on every page (PHXFS_IDLE_PAGE_REFS) after
 * checking that each is as idle as this kernel leaves an unused device
 * page; a page that is not was either handed to someone else or follows
 * refcount rules phxfs was not built for, and the device is refused.
 */
static int phxfs_bar_take_pages(struct phxfs_dev *dev)
{
	unsigned long i, n = phxfs_bar_npages(dev);
	int refs;

	for (i = 0; i < n; i++) {
		refs = page_ref_count(phxfs_bar_nth_page(dev, i));
		if (refs != PHXFS_PGMAP_IDLE_REFS) {
			pci_err(dev->pdev,
				"page %lu of BAR %d has refcount %d where this kernel leaves an unused device page at %d: another user holds it, or the kernel's ZONE_DEVICE refcount rules are not those phxfs was built for\n",
				i, dev->bar, refs, PHXFS_PGMAP_IDLE_REFS);
			while (i--)
				set_page_count(phxfs_bar_nth_page(dev, i),
					       PHXFS_PGMAP_IDLE_REFS);
			return -EBUSY;
		}
		set_page_count(phxfs_bar_nth_page(dev, i),
			       PHXFS_IDLE_PAGE_REFS);
		if (!(i & 4095))
			cond_resched();
	}
	return 0;
}

/*
 * Gives every page back at its idle refcount.  Returns false (logged) if
 * some page is still referenced: then nothing may be released, since a
 * later put_page() would reach a pgmap or pool that is gone.
 */
static bool phxfs_bar_return_pages(struct phxfs_dev *dev)
{
	unsigned long i, n = phxfs_bar_npages(dev);
	int refs;

	for (i = 0; i < n; i++) {
		refs = page_ref_count(phxfs_bar_nth_page(dev, i));
		if (refs != PHXFS_IDLE_PAGE_REFS) {
			pci_err(dev->pdev,
				"page %lu of BAR %d is still referenced (%d) at unload: leaking the BAR's pages\n",
				i, dev->bar, refs);
			return false;
		}
	}
	for (i = 0; i < n; i++) {
		set_page_count(phxfs_bar_nth_page(dev, i),
			       PHXFS_PGMAP_IDLE_REFS);
		if (!(i & 4095))
			cond_resched();
	}
	return true;
}

static void phxfs_bar_release(struct phxfs_dev *dev)
{
	if (dev->p2pdma) {
		phxfs_bar_p2pdma_release(dev);
		dev->p2pdma = false;
	}
	if (dev->pgmap) {
		memunmap_pages(dev->pgmap);
		kfree(dev->pgmap);
		dev->pgmap = NULL;
	}
}

/**
 * phxfs_bar_create_pages() - give @dev's BAR struct pages and take them.
 * @dev: device with bar_start/bar_size set.
 *
 * Return: 0; -EINVAL for a BAR that is not subsection aligned; -ERANGE for
 * one beyond the kernel's direct map; -EBUSY when another user owns pages
 * of the BAR; or the kernel's -errno from creating the pages.
 */
int phxfs_bar_create_pages(struct phxfs_dev *dev)
{
	int ret;

	if (!IS_ALIGNED(dev->bar_start, PHXFS_SUBSECTION_SIZE) ||
	    !IS_ALIGNED(dev->bar_size, PHXFS_SUBSECTION_SIZE) || !dev->bar_size) {
		pci_err(dev->pdev, "BAR %d [%pa + %llu] is not 2 MiB aligned\n",
			dev->bar, &dev->bar_start, (u64)dev->bar_size);
		return -EINVAL;
	}
	ret = phxfs_bar_check_reach(dev);
	if (ret)
		return ret;

	if (IS_ENABLED(CONFIG_PCI_P2PDMA))
		ret = phxfs_bar_p2pdma(dev);
	else
		ret = phxfs_bar_memremap(dev);
	if (ret)
		return ret;

	ret = phxfs_bar_take_pages(dev);
	if (ret)
		phxfs_bar_release(dev);
	return ret;
}

/**
 * phxfs_bar_destroy_pages() - undo phxfs_bar_create_pages().
 * @dev: device; every registration on it must be gone.
 */
void phxfs_bar_destroy_pages(struct phxfs_dev *dev)
{
	if (!dev->p2pdma && !dev->pgmap)
		return;
	if (!phxfs_bar_return_pages(dev)) {
		dev->p2pdma = false;
		dev->pgmap = NULL;
		return;
	}
	phxfs_bar_release(dev);
}

/**
 * phxfs_bar_page() - struct page of a physical address inside the BAR.
 * @dev:  device.
 * @phys: CPU physical address, page aligned.
 *
 * Return: the page, or NULL when @phys lies outside the BAR.
 */
struct page *phxfs_bar_page(const struct phxfs_dev *dev, phys_addr_t phys)
{
	if (phys < dev->bar_start || phys - dev->bar_start >= dev->bar_size ||
	    !PAGE_ALIGNED(phys))
		return NULL;
	return pfn_to_page(PHYS_PFN(phys));
}
