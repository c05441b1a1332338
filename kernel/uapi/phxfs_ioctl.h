/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * phxfs_ioctl.h - registration ABI between phxfs.ko and user space.
 *
 * A process opens /dev/phxfs_devN, asks the module to pin a range of device
 * memory (PHXFS_IOC_REGISTER) and gets back a handle plus an mmap offset that
 * is unique to that registration.  mmap(fd, length, offset = mmap_offset)
 * then maps the device pages (struct pages over the device BAR) into one
 * contiguous virtual range on which ordinary O_DIRECT I/O runs.  munmap and
 * PHXFS_IOC_DEREGISTER tear it down; close() and process exit tear down all
 * registrations of that open file.
 *
 * Rules of this header (it is shared by the kernel and user space):
 *  - fixed-width __u32/__u64 fields only, naturally aligned, explicit
 *    padding, no pointers, no bool, no enums in structs;
 *  - every argument struct starts with abi_version and argsz so the module
 *    can reject callers built against another ABI and grow structs later;
 *  - reserved and pad fields must be zero on input (checked by the module),
 *    so they can gain a meaning without a new ioctl number.
 */
#ifndef PHXFS_UAPI_IOCTL_H
#define PHXFS_UAPI_IOCTL_H

#include <linux/ioctl.h>
#include <linux/types.h>

/*
 * ABI versions.  Bumped on any change that older callers could not follow.
 * The module answers PHXFS_IOC_GET_INFO for any abi_version from
 * PHXFS_ABI_VERSION_MIN up (so that newer user space can learn which
 * version the module speaks, and its PHXFS_FEATURE_* bits, instead of just
 * failing), and reports its own PHXFS_ABI_VERSION there.  Every other ioctl
 * takes abi_version from PHXFS_ABI_VERSION_MIN to the module's version:
 * a newer module keeps serving older callers.  Anything else is -EPROTO;
 * argsz smaller than the struct the module knows is -EINVAL.
 *
 * Modules before the features field (PHXFS_FEATURE_ABI_RANGE clear)
 * accepted abi_version == 1 only, for GET_INFO too.
 */
#define PHXFS_ABI_VERSION 1U
#define PHXFS_ABI_VERSION_MIN 1U

/* Device nodes are /dev/phxfs_dev0 ... /dev/phxfs_dev<PHXFS_MAX_DEVICES - 1>. */
#define PHXFS_DEVICE_PREFIX "/dev/phxfs_dev"
#define PHXFS_MAX_DEVICES 64U

/*
 * The ioctl type byte is only decoded by our own file_operations, so a
 * collision with another driver's number cannot misroute a call; 0xD7 is
 * simply unused by the mainline drivers we know of.
 */
#define PHXFS_IOC_MAGIC 0xD7

/* Values of phxfs_info.provider. */
#define PHXFS_PROVIDER_NONE 0U
#define PHXFS_PROVIDER_NVIDIA 1U /* nvidia_p2p_get_pages(_persistent) */
#define PHXFS_PROVIDER_PCIBAR 2U /* byte ranges of a PCI BAR (rig, FPGA, CMB) */
#define PHXFS_PROVIDER_DMABUF 3U /* reserved for a later provider */

/* Bits of phxfs_info.flags. */
#define PHXFS_INFO_P2PDMA (1U << 0)      /* pages come from pci_p2pdma_add_resource */
/*
 * NVIDIA: REGISTER pins with the persistent API (or, under nv_api=auto and
 * nv_api=persistent, refuses: it never falls back to revocable pins).
 */
#define PHXFS_INFO_PERSISTENT (1U << 1)
/*
 * The provider's driver is not loaded (NVIDIA: nvidia_p2p_* unresolved), so
 * PHXFS_IOC_REGISTER fails with ENODEV until it is; no reload of phxfs is
 * needed once it appears.
 */
#define PHXFS_INFO_PROVIDER_MISSING (1U << 2)
/*
 * The provider's driver is loaded but gives no pin the module may take:
 * NVIDIA without the persistent API, or one that refused a persistent pin
 * on this device (MIG and vGPU do), under nv_api=auto or persistent.
 * REGISTER fails with EOPNOTSUPP; nv_api=legacy accepts revocable pins
 * (docs/security.md says what that costs).
 */
#define PHXFS_INFO_PIN_REFUSED (1U << 3)

/* Values of phxfs_register.pin: what a registration holds. */
#define PHXFS_PIN_BAR 0U        /* a PCI BAR range: nothing to revoke */
#define PHXFS_PIN_PERSISTENT 1U /* NVIDIA persistent pin: the GPU memory stays */
#define PHXFS_PIN_LEGACY 2U     /* NVIDIA legacy pin: the driver may revoke it */

/* Bits of phxfs_info.features: behaviour a caller may rely on. */
/* GET_INFO answers any abi_version >= PHXFS_ABI_VERSION_MIN (see above). */
#define PHXFS_FEATURE_ABI_RANGE (1ULL << 0)
/* mmap and DEREGISTER only from the process that registered (EACCES). */
#define PHXFS_FEATURE_OWNER_PROCESS (1ULL << 1)
/* REGISTER needs a read-write open (EBADF); pcibar ranges CAP_SYS_RAWIO. */
#define PHXFS_FEATURE_REGISTER_ACCESS (1ULL << 2)
/* A provider revocation (legacy free callback) waits a bounded time. */
#define PHXFS_FEATURE_BOUNDED_REVOKE (1ULL << 3)
/* nv_api=auto never takes legacy pins; REGISTER reports its pin (.pin). */
#define PHXFS_FEATURE_PIN_REPORTED (1ULL << 4)

/**
 * struct phxfs_info - PHXFS_IOC_GET_INFO argument.
 * @abi_version:  in: the caller's PHXFS_ABI_VERSION (any version from
 *                PHXFS_ABI_VERSION_MIN up); out: the module's.
 * @argsz:        in: sizeof(struct phxfs_info) as the caller knows it;
 *                out: as the module knows it.
 * @device_index: out: N of /dev/phxfs_devN.
 * @provider:     out: PHXFS_PROVIDER_*.
 * @pci_domain:   out: PCI domain of the device.
 * @pci_bdf:      out: bus << 8 | devfn.
 * @page_size:    out: registration granularity in bytes (device_addr and
 *                length must be multiples of it; 64 KiB for NVIDIA GPUs).
 * @flags:        out: PHXFS_INFO_*.
 * @bar_size:     out: bytes of device memory the module can map.
 * @regs_live:    out: registrations currently alive on this device.
 * @regs_total:   out: registrations created since load.
 * @pages_mapped: out: device pages currently inserted into user mappings.
 * @revocations:  out: registrations revoked by the provider (e.g. cudaFree).
 * @errors:       out: ioctls that failed validation or pinning.
 * @features:     out: PHXFS_FEATURE_* bits of the module (0 from modules
 *                older than the field, where it was reserved).
 * @reserved:     zero on output.
 */
struct phxfs_info {
	__u32 abi_version;
	__u32 argsz;
	__u32 device_index;
	__u32 provider;
	__u32 pci_domain;
	__u32 pci_bdf;
	__u32 page_size;
	__u32 flags;
	__u64 bar_size;
	__u64 regs_live;
	__u64 regs_total;
	__u64 pages_mapped;
	__u64 revocations;
	__u64 errors;
	__u64 features;
	__u64 reserved[3];
};

/**
 * struct phxfs_register - PHXFS_IOC_REGISTER argument.
 * @abi_version: in: PHXFS_ABI_VERSION (PHXFS_ABI_VERSION_MIN up to the
 *               module's version).
 * @argsz:       in: sizeof(struct phxfs_register).
 * @flags:       in: must be zero.
 * @pad:         must be zero.
 * @device_addr: in: NVIDIA: the CUDA device virtual address; PCIBAR: byte
 *               offset into the BAR.  Multiple of phxfs_info.page_size.
 * @length:      in: bytes, non-zero multiple of phxfs_info.page_size.
 * @handle:      out: names the registration in PHXFS_IOC_DEREGISTER.
 * @mmap_offset: out: pass as mmap's offset, with the same length, to map
 *               the registration; unique per registration so that one can
 *               be revoked with unmap_mapping_range() alone.
 * @pin:         out: PHXFS_PIN_*, what the registration holds (0 from
 *               modules without PHXFS_FEATURE_PIN_REPORTED, where it was
 *               reserved); ignored on input.
 * @reserved:    must be zero.
 */
struct phxfs_register {
	__u32 abi_version;
	__u32 argsz;
	__u32 flags;
	__u32 pad;
	__u64 device_addr;
	__u64 length;
	__u64 handle;
	__u64 mmap_offset;
	__u64 pin;
	__u64 reserved;
};

/*
 * Errors (ioctl returns -1 and sets errno):
 *  EPROTO     abi_version outside the range the module accepts (see
 *             PHXFS_ABI_VERSION);
 *  EINVAL     argsz too small, a reserved/pad/flags field is non-zero, or a
 *             range is empty or not a multiple of phxfs_info.page_size;
 *  EOVERFLOW  device_addr + length wraps;
 *  ERANGE     the range lies (partly) outside the device memory;
 *  EBUSY      another registration holds some of the same pages (one
 *             being torn down, e.g. DEREGISTER waiting for DMA in flight,
 *             is first waited for, up to one second);
 *  EINTR      a signal ended that wait;
 *  EBADF      REGISTER on a file not opened for writing (O_RDONLY);
 *  EPERM      REGISTER on a PCI BAR device (PHXFS_PROVIDER_PCIBAR) without
 *             CAP_SYS_RAWIO, unless the module's pcibar_open parameter is set;
 *  ENOENT     DEREGISTER of a handle this open file does not hold;
 *  EACCES     DEREGISTER from a process other than the one that registered
 *             (a forked child sharing the file);
 *  ENODEV     the provider's driver is not loaded (PHXFS_INFO_PROVIDER_MISSING);
 *  EOPNOTSUPP NVIDIA under nv_api=auto or persistent: the driver has no
 *             persistent API or refuses persistent pins on this device
 *             (MIG, vGPU; PHXFS_INFO_PIN_REFUSED);
 *  EIO, ENOMEM  from the provider (e.g. NVIDIA refuses memory
 *             that is not cudaMalloc'd device memory: EINVAL);
 *  ENOTTY     unknown ioctl number.
 * mmap(fd, length, PROT_READ|PROT_WRITE, MAP_SHARED, mmap_offset):
 *  EINVAL     unknown offset, length differs from the registration, or
 *             MAP_PRIVATE; EPERM  PROT_EXEC; EBUSY  already mapped;
 *  EACCES     the calling process did not make the registration;
 *  ENXIO      the provider revoked the registration.
 * After a revocation (DEREGISTER from another thread, cudaFree) the range
 * stays reserved but unbacked: touching it raises SIGBUS and I/O on it fails
 * with EFAULT.
 */

/**
 * struct phxfs_deregister - PHXFS_IOC_DEREGISTER argument.
 * @abi_version: in: PHXFS_ABI_VERSION.
 * @argsz:       in: sizeof(struct phxfs_deregister).
 * @handle:      in: from PHXFS_IOC_REGISTER on the same open file.
 * @reserved:    must be zero.
 *
 * Revokes any remaining user mapping of the registration, waits for DMA in
 * flight on its pages to finish, then unpins.
 */
struct phxfs_deregister {
	__u32 abi_version;
	__u32 argsz;
	__u64 handle;
	__u64 reserved[2];
};

#define PHXFS_IOC_GET_INFO _IOWR(PHXFS_IOC_MAGIC, 0x01, struct phxfs_info)
#define PHXFS_IOC_REGISTER _IOWR(PHXFS_IOC_MAGIC, 0x02, struct phxfs_register)
#define PHXFS_IOC_DEREGISTER _IOWR(PHXFS_IOC_MAGIC, 0x03, struct phxfs_deregister)

#endif /* PHXFS_UAPI_IOCTL_H */
