// SPDX-License-Identifier: GPL-2.0
/*
 * phxfs_bar.c - struct pages for a device memory BAR (ZONE_DEVICE).
 *
 * Choice of pgmap type, for kernels without CONFIG_PCI_P2PDMA (Debian's 6.1
 * and 6.12 among them):
 *
 * MEMORY_DEVICE_PCI_P2PDMA.  memremap_pages() maps the range uncached in the
 * kernel's linear map (pgprot_noncached), which is what MMIO needs: a
 * write-back alias of a GPU BAR (what MEMORY_DEVICE_GENERIC would create)
 * invites speculative reads and a PAT conflict with the GPU driver's own
 * write-combined mapping.  With CONFIG_PCI_P2PDMA off, is_pci_p2pdma_page()
 * is constant false, so the block layer treats these pages like RAM and
 * dma-direct hands the controller the BAR's CPU physical address (the bus
 * address on x86 without an IOMMU in translation mode).  We never container_of
 * the pgmap into p2pdma.c's private struct: that was the original module's
 * crash on P2PDMA-enabled kernels.  Both types idle at refcount 1 on 6.1-6.14
 * and reset to 1 in free_zone_device_page(), which needs ops->page_free.
 *
 * With CONFIG_PCI_P2PDMA on, the only correct way is the official API:
 * pci_p2pdma_add_resource() owns the pgmap, and the block layer's P2P gating
 * (FOLL_PCI_P2PDMA, the queue's P2PDMA feature, distance checks) applies.
 * That pgmap is devm-managed on the PCI device and outlives this module, so
 * a reload reuses it.
 *
 * memremap_pages()/memunmap_pages() rather than devm_memremap_pages(): the
 * PCI device belongs to another driver (or none), so its devres list would
 * only be released when *that* driver unbinds, not when phxfs unloads; a
 * pgmap left behind makes the next load fail with "Conflicting mapping".
 * The range must be aligned to a memory subsection (2 MiB on x86-64).
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/memremap.h>
#include <linux/mm.h>
#include <linux/pci.h>
#include <linux/pci-p2pdma.h>
#include <linux/sizes.h>

#include "phxfs.h"

#define PHXFS_SUBSECTION_SIZE SZ_2M

static void phxfs_page_free(struct page *page)
{
	/*
	 * Only reached if a page's refcount fell to zero, which our own
	 * accounting never does (pages idle at 1).  The core resets the count
	 * to 1 afterwards; nothing to release here.
	 */
}

static const struct dev_pagemap_ops phxfs_pgmap_ops = {
	.page_free = phxfs_page_free,
};

/**
 * phxfs_bar_create_pages() - create struct pages for @dev's BAR.
 * @dev: device with bar_start/bar_size set.
 *
 * Return: 0, or -errno (-EINVAL for a BAR that is not subsection aligned).
 */
int phxfs_bar_create_pages(struct phxfs_dev *dev)
{
	void *addr;
	int ret;

	if (!IS_ALIGNED(dev->bar_start, PHXFS_SUBSECTION_SIZE) ||
	    !IS_ALIGNED(dev->bar_size, PHXFS_SUBSECTION_SIZE) || !dev->bar_size) {
		pci_err(dev->pdev, "BAR %d [%pa + %llu] is not 2 MiB aligned\n",
			dev->bar, &dev->bar_start, (u64)dev->bar_size);
		return -EINVAL;
	}

	if (IS_ENABLED(CONFIG_PCI_P2PDMA)) {
		if (!pci_has_p2pmem(dev->pdev)) {
			ret = pci_p2pdma_add_resource(dev->pdev, dev->bar,
						      dev->bar_size, 0);
			if (ret) {
				pci_err(dev->pdev,
					"pci_p2pdma_add_resource failed: %d\n",
					ret);
				return ret;
			}
		}
		dev->p2pdma = true;
		return 0;
	}

	dev->pgmap.type = MEMORY_DEVICE_PCI_P2PDMA;
	dev->pgmap.range.start = dev->bar_start;
	dev->pgmap.range.end = dev->bar_start + dev->bar_size - 1;
	dev->pgmap.nr_range = 1;
	dev->pgmap.ops = &phxfs_pgmap_ops;
	dev->pgmap.owner = dev;
	addr = memremap_pages(&dev->pgmap, dev_to_node(&dev->pdev->dev));
	if (IS_ERR(addr)) {
		ret = PTR_ERR(addr);
		pci_err(dev->pdev, "memremap_pages of BAR %d failed: %d\n",
			dev->bar, ret);
		return ret;
	}
	dev->pages_created = true;
	return 0;
}

/**
 * phxfs_bar_destroy_pages() - undo phxfs_bar_create_pages().
 * @dev: device; every registration on it must be gone.
 */
void phxfs_bar_destroy_pages(struct phxfs_dev *dev)
{
	if (dev->pages_created) {
		memunmap_pages(&dev->pgmap);
		dev->pages_created = false;
	}
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
