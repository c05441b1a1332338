"""The QEMU command line: machine, PCIe topology, disks and BARs; and the
probe that tells whether KVM works here."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from pathlib import Path

from .bootimage import boot_kernel_image
from .common import run_cmd
from .config import (EXT4_SERIAL, FAR_SHM_SLOT, HIGH_BAR_APERTURE_MIB, HIGH_BAR_MIB,
                     HIGH_BAR_PHYS_BITS, KERNEL_CMDLINE, NSHM, RAW_SERIAL, ROOT_PORT_SLOT,
                     SHM_SIZES_MIB, cache_dir)
from .cpio import Cpio
from .initramfs import busybox_path
from .kernels import Kernel

KVM_PROBE_S = 15


def kvm_usable(k: Kernel, work: Path) -> tuple[bool, str]:
    """Boots a tiny initramfs under KVM; True if it reaches userspace quickly."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm not accessible"
    key = "|".join([Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                    run_cmd(["qemu-system-x86_64", "--version"]).splitlines()[0]])
    # Kept with the kernels, not in the checkout: the answer holds for this
    # host until it boots again, whichever clone asks.
    cache = cache_dir() / "kvm-probe.json"
    with contextlib.suppress(OSError, ValueError):
        data = json.loads(cache.read_text())
        if data.get("key") == key:
            return data["ok"], data["why"]
    probe = work / "kvm-probe"
    probe.mkdir(parents=True, exist_ok=True)
    c = Cpio()
    c.dir("dev")
    c.dir("proc")
    c.chardev("dev/console", 5, 1)
    c.file("bin/busybox", busybox_path().read_bytes(), 0o755)
    c.symlink("bin/sh", "busybox")
    c.file("init", b"#!/bin/sh\n/bin/busybox echo PHX-KVM-OK\n/bin/busybox poweroff -f\n", 0o755)
    (probe / "initramfs.cpio").write_bytes(c.finish())
    log = probe / "console.log"
    cmd = ["qemu-system-x86_64", "-machine", "q35", "-accel", "kvm", "-cpu", "host",
           "-m", "256", "-smp", "1", "-nodefaults", "-nographic", "-no-reboot",
           "-monitor", "none", "-serial", f"file:{log}",
           "-kernel", str(k.vmlinuz), "-initrd", str(probe / "initramfs.cpio"),
           "-append", "console=ttyS0 panic=-1 loglevel=4"]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=KVM_PROBE_S)
        out = proc.stdout
    except subprocess.TimeoutExpired:
        out = "timeout"
    ok = log.is_file() and "PHX-KVM-OK" in log.read_text(errors="replace")
    why = (f"probe booted in {time.monotonic() - t0:.1f}s" if ok else
           f"probe kernel did not reach userspace within {KVM_PROBE_S}s ({out.strip()[:200] or 'no output'})")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"key": key, "ok": ok, "why": why}) + "\n")
    return ok, why


def qemu_command(k: Kernel, work: Path, accel: str, initrd: Path, shm: list[Path],
                 interactive: bool, iommu: bool, monitor: Path | None = None,
                 uefi: tuple[Path, Path] | None = None) -> list[str]:
    """shm: one backing file per SHM_SIZES_MIB entry, plus the high BAR's
    when uefi (OVMF's code and a writable copy of its variables) is given:
    vm/run --high-bar."""
    cmd = ["qemu-system-x86_64", "-machine", "q35", "-accel", accel,
           "-m", "2048", "-smp", "2", "-nodefaults", "-nographic", "-no-reboot"]
    cmdline = list(KERNEL_CMDLINE)
    kernel = boot_kernel_image(k)
    if uefi:
        # OVMF boots the bzImage (no PVH entry) and places the 64-bit
        # aperture by the CPU's address bits; 4-level paging as on most
        # servers (la57 would give KASLR a 4 PiB direct map).
        if accel == "tcg":
            cmd += ["-cpu", f"max,phys-bits={HIGH_BAR_PHYS_BITS},la57=off"]
        cmd += ["-drive", f"if=pflash,format=raw,readonly=on,file={uefi[0]}",
                "-drive", f"if=pflash,format=raw,file={uefi[1]}",
                "-fw_cfg", f"name=opt/ovmf/X-PciMmio64Mb,string={HIGH_BAR_APERTURE_MIB}"]
        kernel = k.vmlinuz
    if iommu:
        # Emulated VT-d, before every PCI device it translates; strict
        # invalidation so that DMA after unmap faults at once.
        cmd += ["-device", "intel-iommu,intremap=off"]
        cmdline += ["intel_iommu=on", "iommu.strict=1"]
    if accel == "kvm":
        cmd += ["-cpu", "host"]
    if interactive:
        cmd += ["-serial", "mon:stdio"]
    else:
        mon = f"unix:{monitor},server=on,wait=off" if monitor else "none"
        cmd += ["-monitor", mon, "-serial", f"file:{work / 'console.log'}"]
    cmd += ["-chardev", f"file,id=report,path={work / 'report.log'}",
            "-device", "isa-serial,chardev=report",
            "-kernel", str(kernel), "-initrd", str(initrd),
            "-append", " ".join(cmdline)]
    cmd += ["-device", f"pcie-root-port,id=rp0,bus=pcie.0,addr={ROOT_PORT_SLOT:#x},"
            "chassis=1,slot=1",
            "-device", "x3130-upstream,id=sw0,bus=rp0"]
    ports = 0

    def downstream_port() -> str:
        nonlocal ports
        cmd.extend(["-device", f"xio3130-downstream,id=dp{ports},bus=sw0,addr={ports:#x},"
                    f"port={ports},chassis=2,slot={ports}"])
        ports += 1
        return f"bus=dp{ports - 1},addr=0x0"

    for i, (img, serial) in enumerate(((work / "raw.img", RAW_SERIAL),
                                       (work / "ext4.img", EXT4_SERIAL))):
        cmd += ["-drive", f"file={img},if=none,id=nvm{i},format=raw",
                "-device", f"nvme,drive=nvm{i},serial={serial},{downstream_port()}"]
    for i, p in enumerate(shm):
        # The high BAR, last, sits behind the switch like the first NSHM.
        where = (f"bus=pcie.0,addr={FAR_SHM_SLOT:#x}" if i == NSHM else downstream_port())
        size = SHM_SIZES_MIB[i] if i < len(SHM_SIZES_MIB) else HIGH_BAR_MIB
        cmd += ["-object", f"memory-backend-file,id=shm{i},share=on,mem-path={p},size={size}M",
                "-device", f"ivshmem-plain,memdev=shm{i},{where}"]
    return cmd
