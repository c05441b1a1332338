"""Paths, the emulated machine and the guest's stock modules: the settings
more than one part of the rig reads, in one place."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
VM_DIR = REPO / "vm"
WORK_ROOT = REPO / "build" / "vm"
DEFAULT_CACHE = "/var/cache/phoenix-vm"

# Stock modules the guest's /init loads (with their dependencies).
# crc32c_generic: ext4's metadata checksums need a crc32c shash and there is
# no modprobe in the guest to load it on demand.
GUEST_MODULES = ["nvme", "crc32c_generic", "ext4"]
# Those a kernel may lack: 7.x computes crc32c in a library, without it.
GUEST_MODULES_OPTIONAL = {"crc32c_generic"}

# Stock modules shipped in the initramfs but not loaded by /init: the guest's
# busybox modprobe loads them on demand from a modules.dep/modules.alias cut
# down to what is shipped (so do the kernel's request_module() calls, e.g.
# "fs-nfs4" or "nvmet-transport-3").  The remote-storage group (NVMe over
# Fabrics on TCP and Soft-RoCE, NFS on TCP and RDMA) needs them.
GUEST_ON_DEMAND_MODULES = [
    "configfs", "nvmet", "nvmet_tcp", "nvmet_rdma", "nvme_fabrics", "nvme_tcp", "nvme_rdma",
    "nfsd", "nfs", "nfsv4", "rpcrdma", "rdma_rxe", "rdma_cm", "rdma_ucm", "ib_uverbs",
    "dummy", "veth",
    # The holder tests' FUSE daemon (vmtest_fuse.c).
    "fuse",
    # rdma_rxe computes its ICRC with the crypto API's "crc32" (loaded on
    # demand through the "crypto-crc32" alias).
    "crc32_generic",
    # Fault injection with dmsetup (device-mapper targets).
    "dm_mod", "dm_flakey", "dm_delay", "dm_dust",
]

RAW_SERIAL = "phxraw"
EXT4_SERIAL = "phxext4"
RAW_MIB = 256
EXT4_MIB = 512
SHM_MIB = 256
# Two large BARs carry the suite; six small ones make the eight devices the
# module must serve at once (2 MiB is its minimum: a memory subsection).
# The last one is the "far" BAR: on the root bus, not behind the switch
# with the NVMe drives (see qemu_command), for the P2PDMA distance case.
SHM_SIZES_MIB = (SHM_MIB, SHM_MIB, 4, 4, 4, 4, 4, 4, 4)
NSHM = len(SHM_SIZES_MIB) - 1

# PCIe topology, fixed so that BDFs (and their order) never change: as in a
# GPU server, the NVMe drives and the device-memory BARs sit behind one PCIe
# switch (QEMU's TI XIO3130: an upstream port under a root port, one
# downstream port per device), so that kernels with CONFIG_PCI_P2PDMA find
# them a P2P distance apart; the far BAR sits on the root bus, where P2P to
# the NVMe needs a whitelisted host bridge, which QEMU's Q35 is not.
ROOT_PORT_SLOT = 0x08
FAR_SHM_SLOT = 0x10

# vm/run --high-bar: one more BAR behind the switch, large and placed tens
# of TiB up, as a GPU's BAR1 is.  8 GiB costs the guest 128 MiB of struct
# pages; the backing file stays sparse (the test touches 64 KiB).  UEFI
# puts the 64-bit aperture (32 TiB) at 32 TiB with 46 physical address
# bits and 4-level paging: beyond what KASLR leaves the direct map of a
# kernel without CONFIG_PCI_P2PDMA (RAM + 10 TiB + a random gap), inside
# the whole-space direct map of one with it.
HIGH_BAR_MIB = 8192
HIGH_BAR_APERTURE_MIB = 32 << 20
HIGH_BAR_PHYS_BITS = 46

KERNEL_CMDLINE = [
    "console=ttyS0",
    "loglevel=4",            # console gets warnings and worse; dmesg keeps all
    "log_buf_len=8M",        # the whole run must fit for the dmesg verdict
    "panic=-1",              # a panic reboots at once; -no-reboot ends QEMU
    "oops=panic",            # an oops ends the run now, not at the timeout
    "softlockup_panic=1",
    "hung_task_panic=1",
    "sysctl.kernel.hung_task_timeout_secs=60",
    "init_on_alloc=0",
    "slub_debug=FZPU",
    "sysrq_always_enabled",  # the host asks a hung guest for backtraces
]


def cache_dir() -> Path:
    return Path(os.environ.get("PHX_VM_CACHE") or DEFAULT_CACHE)
