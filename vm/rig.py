#!/usr/bin/env python3
"""Phoenix VM rig: Debian stock kernels in QEMU with emulated NVMe and ivshmem.

Subcommands (vm/run and vm/fetch-kernels are thin wrappers):
  fetch   download and unpack the newest Debian 6.1 / 6.12 / 7.2 kernels into the
          cache, check their headers by building a hello module
  run     build the guest for each kernel, boot it, judge the report

See vm/README.md for the guest protocol and the layout of the work folder.
Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VM_DIR = REPO / "vm"
WORK_ROOT = REPO / "build" / "vm"
DEFAULT_CACHE = "/var/cache/phoenix-vm"



@dataclass(frozen=True)
class Series:
    """A kernel series the rig boots.

    image: package-name pattern of the kernel image, group 1 the release.
    suite: None for the host's own apt sources (bookworm, backports); else a
           Debian suite read through private apt lists in the cache (sid's
           7.x), never added to the host's sources.
    split: the image is split into linux-binary-, linux-modules- and
           linux-base- packages (Debian from 7.x) instead of one
           linux-image-*-unsigned.
    buildroot: modules are built in a chroot of the suite made with
           debootstrap (its headers need the suite's compiler: sid's 7.x
           headers pass gcc-16 flags that Debian 12's gcc-12 rejects).
    """
    image: re.Pattern
    suite: str | None = None
    split: bool = False
    buildroot: bool = False


SERIES = {
    "6.1": Series(re.compile(r"^linux-image-(6\.1\.0-(\d+)-amd64)-unsigned$")),
    "6.12": Series(re.compile(r"^linux-image-(6\.12\.(\d+)\+deb12-amd64)-unsigned$")),
    # CONFIG_PCI_P2PDMA=y, refcount-0 idle ZONE_DEVICE pages.
    "7.2": Series(re.compile(r"^linux-image-(7\.2\.(\d+)\+deb14-amd64)$"), suite="sid",
                  split=True, buildroot=True),
}
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"

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
    # rdma_rxe computes its ICRC with the crypto API's "crc32" (loaded on
    # demand through the "crypto-crc32" alias).
    "crc32_generic",
    # Fault injection with dmsetup (device-mapper targets).
    "dm_mod", "dm_flakey", "dm_delay", "dm_dust",
]


@dataclass(frozen=True)
class GuestTool:
    """A Debian userland program put into the initramfs with its libraries.

    path is where the package has it; the guest gets it at the same path
    (replacing a busybox applet of that name).  aliases: further guest paths,
    symlinks to it (e.g. mount.nfs4).  data: files of the package the
    program reads at run time (paths inside the package)."""
    package: str
    path: str
    aliases: tuple[str, ...] = ()
    data: tuple[str, ...] = ()


# The one list of dynamically linked Debian programs the guest may run (the
# guest's own programs under /phx must stay static).  vm/rig.py downloads
# each package (apt-get download, never installed on the host) into
# $PHX_VM_CACHE/userland, unpacks it there, and copies the program plus every
# shared library it needs (DT_NEEDED, recursively; from the downloaded
# packages first, else the host's /lib/x86_64-linux-gnu) and the dynamic
# loader into the initramfs.  To add one: append a GuestTool here
# (build/handoff/guest-userland.md).  PHX_VM_TOOLS=none leaves them all out.
GUEST_TOOLS = [
    GuestTool("nvme-cli", "usr/sbin/nvme"),
    GuestTool("nfs-kernel-server", "usr/sbin/exportfs"),
    GuestTool("nfs-kernel-server", "usr/sbin/rpc.mountd"),
    GuestTool("nfs-kernel-server", "usr/sbin/rpc.nfsd"),
    GuestTool("nfs-common", "sbin/mount.nfs", aliases=("sbin/mount.nfs4", "sbin/umount.nfs",
                                                       "sbin/umount.nfs4")),
    GuestTool("iproute2", "usr/bin/rdma"),
    GuestTool("dmsetup", "sbin/dmsetup"),
    # libtirpc reads /etc/netconfig to know its transports (mountd, mount.nfs).
    GuestTool("libtirpc-common", "", data=("etc/netconfig",)),
    # mount.nfs looks its transport up with getprotobyname("tcp").
    GuestTool("netbase", "", data=("etc/protocols", "etc/services")),
]
# Where the guest's loader looks for libraries (Debian's multiarch default).
GUEST_LIB_DIR = "lib/x86_64-linux-gnu"
GUEST_LOADER = "lib64/ld-linux-x86-64.so.2"
HOST_LIB_DIRS = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu")

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
KVM_PROBE_S = 15
# PCIe topology, fixed so that BDFs (and their order) never change: as in a
# GPU server, the NVMe drives and the device-memory BARs sit behind one PCIe
# switch (QEMU's TI XIO3130: an upstream port under a root port, one
# downstream port per device), so that kernels with CONFIG_PCI_P2PDMA find
# them a P2P distance apart; the far BAR sits on the root bus, where P2P to
# the NVMe needs a whitelisted host bridge, which QEMU's Q35 is not.
ROOT_PORT_SLOT = 0x08
FAR_SHM_SLOT = 0x10

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

# dmesg lines that fail a run (searched case-sensitively unless noted).
DMESG_BAD = [
    re.compile(p)
    for p in (
        r"\bBUG\b",                # BUG:, kernel BUG at, slub "BUG kmalloc-64" (not DEBUG)
        r"WARNING:",
        r"Oops",
        r"general protection",
        r"(?i)leak",
        r"Call Trace",
        r"Poison overwritten",
        r"Object padding",
        r"Redzone",
        r"Padding overwritten",
        r"Object already free",
        r"Freechain corrupt",
        r"Freepointer corrupt",
        r"Bad page",
        r"Bad rss-counter",
        r"page dumped because",
        r"UBSAN",
        r"KASAN",
        r"KFENCE",
        r"Kernel panic",
        r"Unable to handle",
        r"INFO: task .* blocked",
        r"rcu_.*(stall|detected)",
        r"list_(add|del) corruption",
        r"refcount_t:",
        r"double free",
        r"use-after-free",
    )
]
# Known-harmless boot lines that would otherwise match DMESG_BAD (exact
# kernel texts seen on QEMU's emulated CPUs; keep this list narrow).
DMESG_BENIGN = [
    re.compile(p)
    for p in (
        r"RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to RETBleed attacks, data leaks possible!",
        r"Spectre V2 : WARNING: Unprivileged eBPF is enabled",
        r"MDS CPU bug present and SMT on, data leak possible",
        r"MMIO Stale Data CPU bug present and SMT on, data leak possible",
        r"TAA CPU bug present and SMT on, data leak possible",
        r"VMSCAPE: SMT on, STIBP is required for full protection",
    )
]


class RigError(Exception):
    """A problem with the rig or its inputs (not a test verdict)."""


def info(msg: str) -> None:
    print(f"vm: {msg}", flush=True)


def run_cmd(cmd, *, cwd=None, env=None, quiet=True, what=None) -> str:
    """Runs cmd; on failure raises RigError with its output."""
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if quiet else None,
        stderr=subprocess.STDOUT if quiet else None, text=True)
    if proc.returncode != 0:
        out = (proc.stdout or "").strip()
        tail = "\n".join(out.splitlines()[-40:])
        raise RigError(f"{what or shlex.join(map(str, cmd))} failed (exit {proc.returncode})"
                       + (f":\n{tail}" if tail else ""))
    return proc.stdout or ""


def need_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise RigError(f"missing tools: {' '.join(missing)} (run scripts/setup)")


def version_key(s: str):
    """sort -V-like key."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", s) if p]


# ---------------------------------------------------------------------------
# Kernel fetch and cache


@dataclass
class Kernel:
    series: str
    release: str            # uname -r, e.g. 6.1.0-57-amd64
    root: Path              # unpacked packages
    packages: list[str]
    buildroot: Path | None = None   # chroot that builds its modules, if any

    @property
    def kdir(self) -> Path:
        base = self.buildroot if self.buildroot else self.root
        return base / "usr/src" / f"linux-headers-{self.release}"

    def _boot_file(self, name: str) -> Path:
        """/boot/NAME-REL (up to 6.x), else /usr/lib/modules/REL/NAME (7.x)."""
        old = self.root / "boot" / f"{name}-{self.release}"
        return old if old.exists() else self.root / "usr/lib/modules" / self.release / name

    @property
    def vmlinuz(self) -> Path:
        return self._boot_file("vmlinuz")

    @property
    def config(self) -> Path:
        return self._boot_file("config")

    @property
    def moddir(self) -> Path:
        return self.root / "lib/modules" / self.release


def cache_dir() -> Path:
    return Path(os.environ.get("PHX_VM_CACHE") or DEFAULT_CACHE)


def apt_options(series: str) -> list[str]:
    """apt-get/apt-cache options that read SERIES' suite: none for the host's
    own sources; for another suite, private lists in the cache, so the host's
    apt sources never change."""
    suite = SERIES[series].suite
    if suite is None:
        return []
    d = cache_dir() / f"apt-{suite}"
    (d / "lists/partial").mkdir(parents=True, exist_ok=True)
    (d / "archives/partial").mkdir(parents=True, exist_ok=True)
    src = d / "sources.list"
    line = f"deb [signed-by={DEBIAN_KEYRING}] {DEBIAN_MIRROR} {suite} main\n"
    if not src.is_file() or src.read_text() != line:
        src.write_text(line)
    return [f"-oDir::Etc::SourceList={src}", "-oDir::Etc::SourceParts=/dev/null",
            f"-oDir::State::Lists={d / 'lists'}", f"-oDir::Cache={d}",
            "-oAPT::Architecture=amd64", "-oAPT::Architectures=amd64"]


def apt_update(series: str) -> None:
    run_cmd(["apt-get", *apt_options(series), "update"], what="apt-get update")


def apt_has_lists(series: str) -> bool:
    if SERIES[series].suite is None:
        return True
    return any((cache_dir() / f"apt-{SERIES[series].suite}" / "lists").glob("*_Packages*"))


def apt_show_field(pkg: str, fld: str, series: str) -> str:
    out = run_cmd(["apt-cache", *apt_options(series), "show", "--no-all-versions", pkg],
                  what=f"apt-cache show {pkg}")
    m = re.search(rf"^{fld}: (.*)$", out, re.M)
    if not m:
        raise RigError(f"apt-cache show {pkg}: no {fld} field")
    return m.group(1)


def newest_release(series: str) -> str:
    env = os.environ.get("PHX_VM_KERNEL_" + series.replace(".", "_"))
    if env:
        return env
    ser = SERIES[series]
    if not apt_has_lists(series):
        apt_update(series)
    names = run_cmd(["apt-cache", *apt_options(series), "pkgnames", "linux-image-" + series + "."],
                    what="apt-cache pkgnames").split()
    found = sorted({m.group(1) for n in names if (m := ser.image.match(n))}, key=version_key)
    # pkgnames also lists names only mentioned by other packages: take the
    # newest one apt can actually download.
    for rel in reversed(found):
        proc = subprocess.run(["apt-cache", *apt_options(series), "show", "--no-all-versions",
                               image_package(series, rel)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if proc.returncode == 0 and proc.stdout.strip():
            return rel
    where = f"the {ser.suite} suite" if ser.suite else "bookworm or bookworm-backports"
    raise RigError(
        f"apt knows no kernel image package of the {series} series in {where} "
        "(apt lists stale or a source missing: run scripts/setup)")


def image_package(series: str, rel: str) -> str:
    return f"linux-image-{rel}" if SERIES[series].split else f"linux-image-{rel}-unsigned"


def depends_names(pkg: str, series: str) -> list[str]:
    deps = apt_show_field(pkg, "Depends", series)
    return [d.strip().split()[0] for alt in deps.split(",") for d in alt.split("|")]


def kernel_packages(series: str, rel: str) -> list[str]:
    if SERIES[series].split:
        # The image is a metapackage: vmlinuz, modules, and config/System.map.
        names = depends_names(f"linux-image-{rel}", series)
        parts = [f"linux-{part}-{rel}" for part in ("binary", "modules", "base")]
        missing = [p for p in parts if p not in names]
        if missing:
            raise RigError(f"linux-image-{rel} does not depend on {', '.join(missing)}")
        return parts
    hdr = f"linux-headers-{rel}"
    names = depends_names(hdr, series)
    common = [n for n in names if re.fullmatch(r"linux-headers-.*-common", n)]
    kbuild = [n for n in names if n.startswith("linux-kbuild-")]
    if len(common) != 1 or len(kbuild) != 1:
        raise RigError(f"cannot find the -common and kbuild packages in {hdr}'s Depends: {names}")
    return [f"linux-image-{rel}-unsigned", hdr, common[0], kbuild[0]]


HELLO_C = r"""
#include <linux/module.h>
static int __init hello_init(void) { return 0; }
static void __exit hello_exit(void) {}
module_init(hello_init);
module_exit(hello_exit);
MODULE_LICENSE("GPL");
"""


def check_headers(k: Kernel) -> None:
    """Builds a trivial out-of-tree module against the kernel's headers, in
    its build root when it has one."""
    with tempfile.TemporaryDirectory(prefix="phx-hello-") as d:
        Path(d, "hello.c").write_text(HELLO_C)
        Path(d, "Kbuild").write_text("obj-m := hello.o\n")
        if k.buildroot:
            run_cmd([str(REPO / "vm/kbuild-chroot"), str(k.buildroot), str(k.kdir), d],
                    what=f"building a hello module in {k.buildroot}")
        else:
            run_cmd(["make", "-C", str(k.kdir), f"M={d}", "modules"],
                    what=f"building a hello module against {k.kdir}")
        if not Path(d, "hello.ko").is_file():
            raise RigError(f"hello module against {k.kdir}: no hello.ko produced")


def ensure_buildroot(series: str, rel: str) -> Path:
    """A minimal chroot of SERIES' suite with its compiler and rel's headers,
    made once with debootstrap and cached (about two minutes)."""
    suite = SERIES[series].suite or "bookworm"
    dest = cache_dir() / f"buildroot-{rel}"
    stamp = dest / "phx-complete.json"
    if stamp.is_file():
        return dest
    need_tools("debootstrap")
    hdr = f"linux-headers-{rel}"
    # The headers name the compiler they were made with (gcc-N-for-host).
    compilers = [n for n in depends_names(hdr, series) if re.fullmatch(r"gcc-\d+(-for-host)?", n)]
    if not compilers:
        raise RigError(f"{hdr} names no gcc-N in its Depends")
    if dest.exists():
        shutil.rmtree(dest)
    t0 = time.monotonic()
    info(f"making the {suite} build root for {rel} with debootstrap")
    include = ",".join([compilers[0], "make", "libc6-dev", "libelf-dev", hdr])
    run_cmd(["debootstrap", "--variant=minbase", f"--keyring={DEBIAN_KEYRING}",
             f"--include={include}", suite, str(dest), DEBIAN_MIRROR],
            what=f"debootstrap {suite} into {dest}")
    # Only the build root's own tools run in it: drop the apt caches.
    shutil.rmtree(dest / "var/cache/apt/archives", ignore_errors=True)
    stamp.write_text(json.dumps({"release": rel, "suite": suite, "compiler": compilers[0]},
                                indent=1) + "\n")
    info(f"build root {dest} ready ({time.monotonic() - t0:.0f}s)")
    return dest


def unpack_kernel(series: str, rel: str, dest: Path, packages: list[str],
                  buildroot: Path | None) -> None:
    debs = dest / "debs"
    root = dest / "root"
    debs.mkdir(parents=True, exist_ok=True)
    have = {p.name.split("_")[0]: p for p in debs.glob("*.deb")}
    todo = [p for p in packages if p not in have]
    if todo:
        info(f"downloading {' '.join(todo)}")
        try:
            run_cmd(["apt-get", *apt_options(series), "download", *todo], cwd=debs,
                    what="apt-get download")
        except RigError as e:
            raise DownloadError(str(e)) from e
    have = {p.name.split("_")[0]: p for p in debs.glob("*.deb")}
    missing = [p for p in packages if p not in have]
    if missing:
        raise RigError(f"apt-get download left no .deb for {' '.join(missing)}")
    if root.exists():
        shutil.rmtree(root)
    root.mkdir()
    for p in packages:
        run_cmd(["dpkg-deb", "-x", str(have[p]), str(root)], what=f"dpkg-deb -x {have[p].name}")
    k = Kernel(series, rel, root, packages, buildroot)
    if (root / "usr/lib/modules").is_dir() and not (root / "lib").exists():
        # Merged /usr (7.x packages): depmod -b and the rig read lib/modules.
        (root / "lib").symlink_to("usr/lib")
    if not buildroot:
        # The arch headers' Makefile includes the -common one by absolute path.
        mk = k.kdir / "Makefile"
        text = mk.read_text()
        fixed = re.sub(r"(?m)^include /usr/src/", f"include {root}/usr/src/", text)
        if fixed == text:
            raise RigError(f"{mk}: no 'include /usr/src/...' line to point into the cache")
        mk.write_text(fixed)
    # lib/modules/<rel>/build and source are absolute links into /usr/src.
    for name in ("build", "source"):
        link = k.moddir / name
        if link.is_symlink():
            target = os.readlink(link)
            if target.startswith("/"):
                link.unlink()
                link.symlink_to(os.path.relpath(root / target.lstrip("/"), k.moddir))
    if not k.vmlinuz.is_file():
        raise RigError(f"{k.vmlinuz} missing after unpacking")
    # The packages ship no modules.dep (the postinst runs depmod).
    run_cmd(["depmod", "-b", str(root), rel], what=f"depmod -b {root} {rel}")
    check_headers(k)


class DownloadError(RigError):
    pass


def fetch(series: str) -> Kernel:
    need_tools("apt-cache", "apt-get", "dpkg-deb", "depmod", "make")
    if not SERIES[series].buildroot:
        need_tools("gcc-12")
    try:
        return fetch_once(series)
    except DownloadError as e:
        # Stale apt lists name packages the mirror no longer has (Debian
        # drops old kernel ABIs): refresh them once and look again.
        if os.geteuid() != 0:
            raise
        info(f"{e}; running apt-get update and trying again")
        apt_update(series)
        return fetch_once(series)


def fetch_once(series: str) -> Kernel:
    rel = newest_release(series)
    base = cache_dir()
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RigError(f"cannot create the kernel cache {base}: {e} (set PHX_VM_CACHE)") from e
    dest = base / rel
    stamp = dest / "complete.json"
    with open(base / ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        buildroot = ensure_buildroot(series, rel) if SERIES[series].buildroot else None
        if stamp.is_file():
            data = json.loads(stamp.read_text())
            k = Kernel(series, rel, dest / "root", data["packages"], buildroot)
            if data.get("root") == str(k.root) and k.vmlinuz.is_file():
                return k
        packages = kernel_packages(series, rel)
        t0 = time.monotonic()
        unpack_kernel(series, rel, dest, packages, buildroot)
        k = Kernel(series, rel, dest / "root", packages, buildroot)
        stamp.write_text(json.dumps({"release": rel, "packages": packages,
                                     "root": str(k.root)}, indent=1) + "\n")
        info(f"kernel {rel} cached in {dest} ({time.monotonic() - t0:.0f}s)")
        return k


def pvh_vmlinux(k: Kernel) -> Path:
    """The uncompressed vmlinux of k's bzImage, extracted once into the cache.

    QEMU boots an ELF vmlinux with a PVH note straight in 32-bit mode: no
    real-mode setup and no decompression, about 5 s less per boot under TCG.
    """
    out = k.root / "boot" / f"vmlinux-{k.release}"
    if out.is_file():
        return out
    out.parent.mkdir(exist_ok=True)
    with open(cache_dir() / ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if out.is_file():
            return out
        img = k.vmlinuz.read_bytes()
        if img[0x202:0x206] != b"HdrS":
            raise RigError(f"{k.vmlinuz}: not a bzImage")
        setup_sects = img[0x1F1] or 4
        payload_off, payload_len = struct.unpack_from("<II", img, 0x248)
        start = (setup_sects + 1) * 512 + payload_off
        payload = img[start:start + payload_len]
        if payload.startswith(b"\xfd7zXZ\x00"):
            data = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(payload)
        elif payload.startswith(b"\x28\xb5\x2f\xfd"):
            need_tools("zstd")
            # The payload ends with the 4-byte uncompressed size, which zstd
            # would take for a truncated next frame.
            proc = subprocess.run(["zstd", "-dcq"], input=payload[:-4], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE)
            if proc.returncode != 0:
                raise RigError(f"zstd could not unpack {k.vmlinuz}: {proc.stderr.decode().strip()}")
            data = proc.stdout
        elif payload.startswith(b"\x1f\x8b"):
            data = gzip.GzipFile(fileobj=io.BytesIO(payload)).read()
        else:
            raise RigError(f"{k.vmlinuz}: unknown payload compression {payload[:6].hex()}")
        if not data.startswith(b"\x7fELF"):
            raise RigError(f"{k.vmlinuz}: payload is not an ELF vmlinux")
        tmp = out.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.rename(out)
        return out


def boot_kernel_image(k: Kernel) -> Path:
    """vmlinux (PVH entry) when the kernel has CONFIG_PVH, else the bzImage;
    PHX_VM_BOOT=bzimage forces the bzImage."""
    mode = os.environ.get("PHX_VM_BOOT", "auto")
    if mode not in ("auto", "pvh", "bzimage"):
        raise RigError(f"PHX_VM_BOOT={mode!r}: use auto, pvh or bzimage")
    has_pvh = re.search(r"^CONFIG_PVH=y$", k.config.read_text(), re.M) is not None
    if mode == "pvh" and not has_pvh:
        raise RigError(f"{k.release} has no CONFIG_PVH: cannot boot its vmlinux")
    if mode == "bzimage" or not has_pvh:
        return k.vmlinuz
    return pvh_vmlinux(k)


# ---------------------------------------------------------------------------
# ELF checks, modules, initramfs


def elf_kind(path: Path) -> str | None:
    """'static', 'dynamic', 'rel' (object/module) for 64-bit ELF; None otherwise."""
    with open(path, "rb") as f:
        hdr = f.read(64)
        if len(hdr) < 64 or hdr[:4] != b"\x7fELF":
            return None
        if hdr[4] != 2 or hdr[5] != 1:
            return "foreign"
        e_type = struct.unpack_from("<H", hdr, 16)[0]
        if e_type == 1:
            return "rel"
        phoff = struct.unpack_from("<Q", hdr, 32)[0]
        phentsize, phnum = struct.unpack_from("<HH", hdr, 54)
        f.seek(phoff)
        ph = f.read(phentsize * phnum)
        for i in range(phnum):
            if struct.unpack_from("<I", ph, i * phentsize)[0] == 3:  # PT_INTERP
                return "dynamic"
        return "static"


def module_load_order(k: Kernel, wanted: list[str]) -> list[Path]:
    dep_file = k.moddir / "modules.dep"
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in dep_file.read_text().splitlines():
        if ":" not in line:
            continue
        mod, rest = line.split(":", 1)
        deps[mod] = rest.split()
        name = re.sub(r"\.ko(\.xz|\.gz|\.zst)?$", "", Path(mod).name).replace("-", "_")
        by_name[name] = mod
    order: list[str] = []
    seen: set[str] = set()

    def visit(mod: str, chain: tuple[str, ...]) -> None:
        if mod in seen:
            return
        if mod in chain:
            raise RigError(f"module dependency cycle: {' -> '.join(chain + (mod,))}")
        for d in deps.get(mod, []):
            visit(d, chain + (mod,))
        seen.add(mod)
        order.append(mod)

    builtin = (k.moddir / "modules.builtin").read_text()
    for name in wanted:
        key = name.replace("-", "_")
        if key not in by_name:
            if re.search(rf"/{re.escape(name)}\.ko$", builtin, re.M) or \
               re.search(rf"/{re.escape(name.replace('_', '-'))}\.ko$", builtin, re.M):
                continue  # built in
            if name in GUEST_MODULES_OPTIONAL:
                continue
            raise RigError(f"module {name} is neither in {dep_file} nor built into {k.release}")
        visit(by_name[key], ())
    return [k.moddir / m for m in order]


def module_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".xz":
        return lzma.decompress(data)
    if path.suffix == ".gz":
        return gzip.decompress(data)
    if path.suffix == ".ko":
        return data
    raise RigError(f"cannot decompress module {path}")


class Cpio:
    """Writer of a newc ("070701") archive, as the kernel's initramfs unpacker reads it."""

    def __init__(self) -> None:
        self.buf = io.BytesIO()
        self.ino = 1
        self.names: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev=(0, 0), nlink=1) -> None:
        name = name.lstrip("/")
        if name in self.names:
            raise RigError(f"initramfs: duplicate entry {name}")
        self.names.add(name)
        nb = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdev[0], rdev[1], len(nb), 0]
        self.ino += 1
        hdr = b"070701" + b"".join(b"%08X" % v for v in fields)
        self.buf.write(hdr + nb)
        self.buf.write(b"\0" * (-(len(hdr) + len(nb)) % 4))
        self.buf.write(data)
        self.buf.write(b"\0" * (-len(data) % 4))

    def dir(self, name: str, perm=0o755) -> None:
        parts = name.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            p = "/".join(parts[:i])
            if p not in self.names:
                self._entry(p, stat.S_IFDIR | perm, nlink=2)

    def _parent(self, name: str) -> None:
        parent = os.path.dirname(name.strip("/"))
        if parent:
            self.dir(parent)

    def file(self, name: str, data: bytes, perm=0o644) -> None:
        self._parent(name)
        self._entry(name, stat.S_IFREG | perm, data)

    def symlink(self, name: str, target: str) -> None:
        self._parent(name)
        self._entry(name, stat.S_IFLNK | 0o777, target.encode())

    def chardev(self, name: str, major: int, minor: int, perm=0o600) -> None:
        self._parent(name)
        self._entry(name, stat.S_IFCHR | perm, rdev=(major, minor))

    def tree(self, src: Path, dest: str) -> None:
        """Copies a host directory (files, dirs, symlinks) under dest."""
        self.dir(dest)
        for dirpath, dirnames, filenames in os.walk(src):
            dirnames.sort()
            rel = os.path.relpath(dirpath, src)
            base = dest if rel == "." else f"{dest}/{rel}"
            for d in dirnames:
                p = Path(dirpath, d)
                if p.is_symlink():
                    self.symlink(f"{base}/{d}", os.readlink(p))
                else:
                    self.dir(f"{base}/{d}", stat.S_IMODE(p.stat().st_mode))
            for fn in sorted(filenames):
                p = Path(dirpath, fn)
                if p.is_symlink():
                    self.symlink(f"{base}/{fn}", os.readlink(p))
                elif p.is_file():
                    self.file(f"{base}/{fn}", p.read_bytes(), stat.S_IMODE(p.stat().st_mode))
                else:
                    raise RigError(f"{p}: not a regular file, directory or symlink")

    def finish(self) -> bytes:
        self._entry("TRAILER!!!", 0)
        return self.buf.getvalue()


def elf_dynamic_info(path: Path) -> tuple[list[str], str | None]:
    """(DT_NEEDED sonames, PT_INTERP) of a 64-bit little-endian ELF file."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise RigError(f"{path}: not a 64-bit little-endian ELF")
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    loads, dynamic, interp = [], None, None
    for i in range(phnum):
        p_type, _, off, vaddr, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data,
                                                                  phoff + i * phentsize)
        if p_type == 1:
            loads.append((vaddr, off, filesz))
        elif p_type == 2:
            dynamic = (off, filesz)
        elif p_type == 3:
            interp = data[off:off + filesz].rstrip(b"\0").decode()
    if dynamic is None:
        return [], interp

    def file_offset(vaddr: int) -> int:
        for start, off, size in loads:
            if start <= vaddr < start + size:
                return vaddr - start + off
        raise RigError(f"{path}: address {vaddr:#x} is in no loaded segment")

    needed, strtab = [], None
    for pos in range(dynamic[0], dynamic[0] + dynamic[1], 16):
        tag, val = struct.unpack_from("<qQ", data, pos)
        if tag == 0:
            break
        if tag == 1:
            needed.append(val)
        elif tag == 5:
            strtab = file_offset(val)
    if needed and strtab is None:
        raise RigError(f"{path}: DT_NEEDED without DT_STRTAB")
    names = [data[strtab + n:data.index(b"\0", strtab + n)].decode() for n in needed]
    return names, interp


def userland_dir() -> Path:
    return cache_dir() / "userland"


def selected_tools() -> list[GuestTool]:
    """GUEST_TOOLS, or none with PHX_VM_TOOLS=none."""
    want = os.environ.get("PHX_VM_TOOLS", "all")
    if want == "none":
        return []
    if want != "all":
        raise RigError(f"PHX_VM_TOOLS={want!r}: use all or none")
    return list(GUEST_TOOLS)


def library_depends(pkg: str) -> list[str]:
    """The library packages (lib*) among pkg's Depends and Pre-Depends (first
    of each alternative, without versions or architecture qualifiers)."""
    out = run_cmd(["apt-cache", "show", "--no-all-versions", pkg], what=f"apt-cache show {pkg}")
    names = []
    for fld in ("Pre-Depends", "Depends"):
        m = re.search(rf"^{fld}: (.*)$", out, re.M)
        for group in (m.group(1).split(",") if m else []):
            name = group.split("|")[0].strip().split()[0].split(":")[0]
            if name.startswith("lib") and name not in names:
                names.append(name)
    return names


def fetch_userland(tools: list[GuestTool]) -> Path:
    """Downloads the tools' packages and their library packages into
    $PHX_VM_CACHE/userland/debs and unpacks them into .../root (once; a new
    tool in GUEST_TOOLS fetches only what is missing).  Never installs."""
    base = userland_dir()
    debs, root, stamp = base / "debs", base / "root", base / "complete.json"
    tool_pkgs = sorted({t.package for t in tools})
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise RigError(f"cannot create the userland cache {base}: {e} (set PHX_VM_CACHE)") from e
    with open(cache_dir() / ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(stamp.read_text())
            if set(tool_pkgs) <= set(data["tool_packages"]) and root.is_dir():
                return root
        need_tools("apt-cache", "apt-get", "dpkg-deb")
        packages = list(tool_pkgs)
        for p in tool_pkgs:
            packages += [d for d in library_depends(p) if d not in packages]
        debs.mkdir(parents=True, exist_ok=True)
        have = {p.name.split("_")[0]: p for p in debs.glob("*.deb")}
        todo = [p for p in packages if p not in have]
        if todo:
            info(f"guest userland: downloading {' '.join(todo)}")
            run_cmd(["apt-get", "download", *todo], cwd=debs,
                    what="apt-get download (guest userland)")
            have = {p.name.split("_")[0]: p for p in debs.glob("*.deb")}
        missing = [p for p in packages if p not in have]
        if missing:
            raise RigError(f"apt-get download left no .deb for {' '.join(missing)}")
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir()
        for p in packages:
            run_cmd(["dpkg-deb", "-x", str(have[p]), str(root)], what=f"dpkg-deb -x {have[p].name}")
        stamp.write_text(json.dumps({"tool_packages": tool_pkgs, "packages": packages},
                                    indent=1) + "\n")
        return root


@dataclass
class Userland:
    """What the tools put into the initramfs: guest path -> host file, guest
    path -> symlink target, and where each library came from."""
    files: dict[str, Path] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    origin: dict[str, str] = field(default_factory=dict)

    def occupies(self, guest_path: str) -> bool:
        return guest_path in self.files or guest_path in self.links


def find_library(soname: str, roots: list[Path]) -> Path | None:
    for d in roots:
        p = d / soname
        if p.exists():
            return p.resolve()
    return None


def resolve_userland(tools: list[GuestTool], root: Path) -> Userland:
    """The tools, their data files, every library they need (DT_NEEDED,
    transitively) and the loader.  Libraries come from the unpacked
    packages first, else from the host."""
    u = Userland()
    search = [root / "lib/x86_64-linux-gnu", root / "usr/lib/x86_64-linux-gnu",
              *map(Path, HOST_LIB_DIRS)]
    pending: list[tuple[str, Path]] = []
    for t in tools:
        for rel in ([t.path] if t.path else []) + list(t.data):
            src = root / rel
            if not src.is_file():
                raise RigError(f"guest tool: {t.package} has no {rel} (see GUEST_TOOLS in vm/rig.py)")
            u.files[rel] = src.resolve()
            u.origin[rel] = f"package {t.package}"
        if t.path:
            kind = elf_kind(root / t.path)
            if kind not in ("dynamic", "static"):
                raise RigError(f"guest tool {t.path} of {t.package} is not an x86-64 program")
            pending.append((t.path, root / t.path))
        for alias in t.aliases:
            u.links[alias] = "/" + t.path
    interps: set[str] = set()
    while pending:
        who, path = pending.pop()
        needed, interp = elf_dynamic_info(path)
        if interp:
            interps.add(interp)
        for soname in needed:
            dest = f"{GUEST_LIB_DIR}/{soname}"
            if dest in u.files:
                continue
            src = find_library(soname, search)
            if src is None:
                raise RigError(f"guest tool: {soname} (needed by {who}) is neither in the "
                               f"downloaded packages nor in {', '.join(HOST_LIB_DIRS)}: add its "
                               "package to GUEST_TOOLS as a GuestTool with an empty path")
            u.files[dest] = src
            u.origin[dest] = ("package" if root in src.parents else "host") + f" {src}"
            pending.append((soname, src))
    for interp in sorted(interps):
        name = Path(interp).name
        src = find_library(name, search)
        if src is None:
            raise RigError(f"guest tool: the dynamic loader {interp} was not found")
        dest = f"{GUEST_LIB_DIR}/{name}"
        u.files[dest] = src
        u.origin[dest] = ("package" if root in src.parents else "host") + f" {src}"
        if interp.strip("/") != dest:
            u.links[interp.strip("/")] = "/" + dest
    return u


def prepare_userland() -> Userland | None:
    tools = selected_tools()
    if not tools:
        return None
    return resolve_userland(tools, fetch_userland(tools))



def busybox_path() -> Path:
    for p in ("/bin/busybox", "/usr/bin/busybox"):
        if Path(p).is_file() and elf_kind(Path(p)) == "static":
            return Path(p)
    raise RigError("no statically linked busybox (install busybox-static: run scripts/setup)")


def check_guest_dir(guest: Path, entry: str) -> None:
    if not (guest / entry).is_file():
        raise RigError(f"guest folder {guest} has no {entry}")
    dynamic = []
    for dirpath, _, filenames in os.walk(guest):
        for fn in filenames:
            p = Path(dirpath, fn)
            if p.is_file() and not p.is_symlink() and elf_kind(p) == "dynamic":
                dynamic.append(str(p.relative_to(guest)))
    if dynamic:
        raise RigError("guest programs must be linked statically (the initramfs has no libc): "
                       + ", ".join(sorted(dynamic)))


def on_demand_modules(k: Kernel, loaded: list[Path]) -> list[Path]:
    """GUEST_ON_DEMAND_MODULES and their dependencies, less what /init loads
    (and less any this kernel lacks, which modprobe then reports)."""
    have = {re.sub(r"\.ko(\.xz|\.gz|\.zst)?$", "", line.split(":", 1)[0].rsplit("/", 1)[-1])
            .replace("-", "_") for line in (k.moddir / "modules.dep").read_text().splitlines()}
    wanted = [m for m in GUEST_ON_DEMAND_MODULES if m.replace("-", "_") in have]
    return [m for m in module_load_order(k, wanted) if m not in loaded]


def module_index(k: Kernel, shipped: list[Path]) -> tuple[str, str]:
    """modules.dep and modules.alias for busybox modprobe, limited to the
    shipped (flat, decompressed) modules."""
    flat = {str(m.relative_to(k.moddir)): re.sub(r"\.(xz|gz)$", "", m.name) for m in shipped}
    dep_lines = []
    for line in (k.moddir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        if mod in flat:
            deps = [flat[d] for d in rest.split() if d in flat]
            dep_lines.append(f"{flat[mod]}: {' '.join(deps)}".rstrip())
    names = {n.removesuffix(".ko").replace("-", "_") for n in flat.values()}
    alias_file = k.moddir / "modules.alias"
    aliases = [ln for ln in (alias_file.read_text().splitlines() if alias_file.is_file() else [])
               if ln.startswith("alias ") and len(ln.split()) == 3
               and ln.split()[2].replace("-", "_") in names]
    return "\n".join(dep_lines) + "\n", "\n".join(aliases) + "\n"


def build_initramfs(k: Kernel, guest: Path | None, out: Path, config: dict[str, str],
                    userland: Userland | None = None) -> None:
    bb = busybox_path()
    c = Cpio()
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "dev", "proc", "sys", "tmp",
              "mnt/ext4", "etc/phx", "root", "lib/modules"):
        c.dir(d)
    c.chardev("dev/console", 5, 1)
    c.chardev("dev/null", 1, 3, 0o666)
    c.file("bin/busybox", bb.read_bytes(), 0o755)
    applets = run_cmd([str(bb), "--list-full"], what="busybox --list-full").split()
    for a in sorted(set(applets)):
        # A declared Debian tool of the same path replaces the applet.
        if a != "bin/busybox" and not (userland and userland.occupies(a)):
            c.symlink(a, "/bin/busybox")
    if userland is not None:
        for dest, src in sorted(userland.files.items()):
            c.file(dest, src.read_bytes(), stat.S_IMODE(src.stat().st_mode))
        for dest, target in sorted(userland.links.items()):
            c.symlink(dest, target)
    c.file("init", (VM_DIR / "init").read_bytes(), 0o755)
    mods = []
    loaded = module_load_order(k, GUEST_MODULES + os.environ.get("PHX_VM_MODULES", "").split())
    extra = on_demand_modules(k, loaded)
    for m in loaded + extra:
        name = re.sub(r"\.(xz|gz)$", "", m.name)
        dest = f"lib/modules/{k.release}/{name}"
        c.file(dest, module_bytes(m))
        if m in loaded:
            mods.append("/" + dest)
    dep, alias = module_index(k, loaded + extra)
    c.file(f"lib/modules/{k.release}/modules.dep", dep.encode())
    c.file(f"lib/modules/{k.release}/modules.alias", alias.encode())
    c.file("etc/phx/modules", ("\n".join(mods) + "\n").encode())
    c.file("etc/phx/config", "".join(f"{key}={shlex.quote(v)}\n"
                                     for key, v in config.items()).encode())
    if guest is not None:
        c.tree(guest, "phx")
    else:
        c.dir("phx")
    out.write_bytes(c.finish())


# ---------------------------------------------------------------------------
# Disk images


def raw_pattern_block(i: int) -> bytes:
    """MiB number i of the raw disk: SHAKE128(b'phx-raw' || le64(i)), 1 MiB."""
    return hashlib.shake_128(b"phx-raw" + i.to_bytes(8, "little")).digest(1 << 20)


def make_raw_image(path: Path, mib: int) -> None:
    with open(path, "wb") as f:
        for i in range(mib):
            f.write(raw_pattern_block(i))


def make_ext4_image(path: Path, mib: int) -> None:
    need_tools("mkfs.ext4", "debugfs")
    with tempfile.TemporaryDirectory(prefix="phx-ext4-") as d:
        os.mkdir(Path(d, "phx"))
        os.chmod(Path(d, "phx"), 0o1777)
        with open(path, "wb") as f:
            f.truncate(mib << 20)
        # lazy_*_init=0: no ext4lazyinit writes in the guest while tests run.
        run_cmd(["mkfs.ext4", "-F", "-q", "-L", "phxext4", "-d", d,
                 "-E", "lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0",
                 str(path)], what="mkfs.ext4")


# ---------------------------------------------------------------------------
# QEMU


def kvm_usable(k: Kernel, work: Path) -> tuple[bool, str]:
    """Boots a tiny initramfs under KVM; True if it reaches userspace quickly."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm not accessible"
    key = "|".join([Path("/proc/sys/kernel/random/boot_id").read_text().strip(),
                    run_cmd(["qemu-system-x86_64", "--version"]).splitlines()[0]])
    cache = WORK_ROOT / "kvm-probe.json"
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
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    cache.write_text(json.dumps({"key": key, "ok": ok, "why": why}) + "\n")
    return ok, why


@dataclass
class Boot:
    accel: str
    wall_s: float = 0.0
    init_s: float | None = None       # guest uptime when /init was ready
    ready_s: float | None = None      # host seconds from QEMU start to PHX-INIT
    timed_out: bool = False
    stalled: bool = False             # killed because /init never got ready
    qemu_rc: int | None = None
    qemu_out: str = ""


def qemu_command(k: Kernel, work: Path, accel: str, initrd: Path, shm: list[Path],
                 interactive: bool, iommu: bool, monitor: Path | None = None) -> list[str]:
    cmd = ["qemu-system-x86_64", "-machine", "q35", "-accel", accel,
           "-m", "2048", "-smp", "2", "-nodefaults", "-nographic", "-no-reboot"]
    cmdline = list(KERNEL_CMDLINE)
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
            "-kernel", str(boot_kernel_image(k)), "-initrd", str(initrd),
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
        where = downstream_port() if i < NSHM else f"bus=pcie.0,addr={FAR_SHM_SLOT:#x}"
        cmd += ["-object", f"memory-backend-file,id=shm{i},share=on,mem-path={p},"
                f"size={SHM_SIZES_MIB[i]}M",
                "-device", f"ivshmem-plain,memdev=shm{i},{where}"]
    return cmd


def ask_for_backtraces(monitor: Path) -> None:
    """Before a hung guest is killed: magic SysRq through the emulated
    keyboard (QEMU monitor sendkey) for console loglevel 9, blocked tasks
    (w) and every CPU's backtrace (l), so the console log shows the hang."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sk:
            sk.settimeout(2)
            sk.connect(str(monitor))
            for key in ("9", "w", "l"):
                sk.sendall(f"sendkey alt-sysrq-{key}\n".encode())
                time.sleep(1)
            time.sleep(3)
    except OSError as e:
        info(f"could not ask the hung guest for backtraces: {e}")


def boot(cmd: list[str], work: Path, accel: str, timeout: float, ready_timeout: float,
         monitor: Path | None = None) -> Boot:
    """Runs QEMU to the end; kills it after timeout seconds, or after
    ready_timeout if the guest's /init has not reported PHX-INIT by then."""
    b = Boot(accel)
    report = work / "report.log"
    t0 = time.monotonic()
    with open(work / "qemu.log", "w") as qlog:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=qlog,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                try:
                    b.qemu_rc = proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic() - t0
                if b.ready_s is None and report.is_file():
                    with open(report, "rb") as f:
                        if re.search(rb"^PHX-INIT(-ERROR)? ", f.read(1 << 16), re.M):
                            b.ready_s = now
                if now > timeout or (b.ready_s is None and now > ready_timeout):
                    b.timed_out = True
                    b.stalled = b.ready_s is None
                    if monitor is not None:
                        ask_for_backtraces(monitor)
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    b.wall_s = time.monotonic() - t0
    if b.ready_s is None and report.is_file() and \
            re.search(rb"^PHX-INIT(-ERROR)? ", report.read_bytes()[:1 << 16], re.M):
        b.ready_s = b.wall_s  # became ready just before QEMU ended
    b.qemu_out = (work / "qemu.log").read_text(errors="replace")
    return b


# ---------------------------------------------------------------------------
# Verdict


@dataclass
class Verdict:
    results: list[dict] = field(default_factory=list)     # guest PHX-RESULTs
    evidence: list[dict] = field(default_factory=list)    # host checks of PHX-EVIDENCE
    problems: list[str] = field(default_factory=list)     # everything else that fails
    dmesg_bad: list[str] = field(default_factory=list)
    init_lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)       # PHX-NOTE: information only
    exit_code: int | None = None
    dmesg_lines: int = 0


def strip_level(line: str) -> str:
    return re.sub(r"^<\d+>", "", line)


def scan_kernel_log(lines: list[str]) -> list[str]:
    bad = []
    for line in lines:
        text = strip_level(line)
        if any(p.search(text) for p in DMESG_BAD) and not any(p.search(text) for p in DMESG_BENIGN):
            bad.append(text)
    return bad


class EvidenceChecker:
    def __init__(self, work: Path, shm: list[Path]) -> None:
        self.work = work
        self.shm = shm
        self.extracted: dict[str, Path | str] = {}

    def _ext4_file(self, path: str) -> Path:
        if path in self.extracted:
            got = self.extracted[path]
            if isinstance(got, str):
                raise RigError(got)
            return got
        if not re.fullmatch(r"[A-Za-z0-9._/-]+", path) or ".." in path.split("/"):
            raise RigError(f"unsupported path {path!r}")
        dest = self.work / "extract" / path.strip("/").replace("/", "__")
        dest.parent.mkdir(exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            dest.unlink()
        out = run_cmd(["debugfs", "-R", f"dump -p /{path.strip('/')} {dest}",
                       str(self.work / "ext4.img")], what="debugfs dump")
        if not dest.is_file():
            msg = f"debugfs could not extract /{path.strip('/')}: {out.strip()}"
            self.extracted[path] = msg
            raise RigError(msg)
        self.extracted[path] = dest
        return dest

    @staticmethod
    def _read(path: Path, off: int, n: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(off)
            return f.read(n)

    def check(self, ev: dict) -> tuple[bool, str]:
        try:
            kind = ev["kind"]
            idx, soff, n = int(ev["shm"]), int(ev["shm_off"]), int(ev["len"])
            if not 0 <= idx < len(self.shm):
                return False, f"no ivshmem #{idx}"
            size_mib = SHM_SIZES_MIB[idx] if idx < len(SHM_SIZES_MIB) else SHM_MIB
            if n <= 0 or soff < 0 or soff + n > size_mib << 20:
                return False, f"shm range [{soff},{soff + n}) outside the {size_mib} MiB BAR"
            if kind == "shm_eq_disk":
                src, off, what = self.work / "raw.img", int(ev["disk_off"]), "raw disk"
            elif kind == "shm_eq_file":
                src = self._ext4_file(str(ev["path"]))
                off, what = int(ev["file_off"]), f"ext4:/{str(ev['path']).strip('/')}"
            else:
                return False, f"unknown evidence kind {kind!r}"
            if off < 0 or off + n > src.stat().st_size:
                return False, f"range [{off},{off + n}) outside {what} ({src.stat().st_size} bytes)"
            a = self._read(self.shm[idx], soff, n)
            b = self._read(src, off, n)
            if a == b:
                return True, f"{n} bytes of shm{idx}@{soff} == {what}@{off}"
            first = next(i for i in range(n) if a[i] != b[i])
            ndiff = sum(1 for x, y in zip(a, b) if x != y)
            return False, (f"shm{idx}@{soff} != {what}@{off}: {ndiff} of {n} bytes differ, "
                           f"first at +{first} (shm {a[first:first+8].hex()} vs {b[first:first+8].hex()})")
        except (KeyError, ValueError, TypeError) as e:
            return False, f"malformed evidence: {e!r}"
        except (RigError, OSError) as e:
            return False, str(e)


def judge(work: Path, shm: list[Path], only: str | None) -> Verdict:
    v = Verdict()
    report = work / "report.log"
    text = report.read_text(errors="replace") if report.is_file() else ""
    lines = [ln.rstrip("\r") for ln in text.split("\n")]
    checker = EvidenceChecker(work, shm)
    in_dmesg = False
    dmesg: list[str] = []
    saw_end = False
    for ln in lines:
        if in_dmesg:
            if ln == "PHX-DMESG-END":
                in_dmesg, saw_end = False, True
            else:
                dmesg.append(ln)
            continue
        if not ln.strip():
            continue
        tag, _, rest = ln.partition(" ")
        if tag == "PHX-DMESG-BEGIN":
            in_dmesg = True
        elif tag == "PHX-RESULT":
            try:
                r = json.loads(rest)
                if not isinstance(r, dict) or r.get("status") not in ("pass", "fail", "skip") \
                        or not isinstance(r.get("test"), str):
                    raise ValueError("needs test and status pass|fail|skip")
                v.results.append(r)
            except ValueError as e:
                v.problems.append(f"malformed PHX-RESULT ({e}): {ln[:300]}")
        elif tag == "PHX-EVIDENCE":
            try:
                ev = json.loads(rest)
                if not isinstance(ev, dict):
                    raise ValueError("not an object")
            except ValueError as e:
                v.problems.append(f"malformed PHX-EVIDENCE ({e}): {ln[:300]}")
                continue
            ok, detail = checker.check(ev)
            v.evidence.append({"test": f"host:evidence:{ev.get('test', len(v.evidence))}",
                               "status": "pass" if ok else "fail", "detail": detail, "claim": ev})
        elif tag == "PHX-EXIT":
            try:
                v.exit_code = int(rest)
            except ValueError:
                v.problems.append(f"malformed PHX-EXIT: {ln}")
        elif tag in ("PHX-INIT",):
            v.init_lines.append(rest)
        elif tag == "PHX-NOTE":
            v.notes.append(rest)
        elif tag == "PHX-INIT-ERROR":
            v.problems.append(f"guest init: {rest}")
        elif tag.startswith("PHX-"):
            v.problems.append(f"unknown protocol line: {ln[:300]}")
        # Other lines on the report port are free text; they stay in report.log.
    v.dmesg_lines = len(dmesg)
    if v.exit_code is None:
        v.problems.append("no PHX-EXIT: the guest did not finish (timeout, panic or hang)")
    elif v.exit_code != 0:
        v.problems.append(f"guest entry exited with {v.exit_code}")
    if dmesg and not saw_end:
        v.problems.append("dmesg dump truncated (no PHX-DMESG-END)")
    if not dmesg:
        # No dump (panic, timeout): judge what reached the console instead.
        console = work / "console.log"
        clines = console.read_text(errors="replace").splitlines() if console.is_file() else []
        # Backtraces the host asked a hung guest for are not findings.
        cut = next((i for i, ln in enumerate(clines) if "sysrq: Changing Loglevel" in ln), None)
        v.dmesg_bad = scan_kernel_log(clines[:cut])
    else:
        v.dmesg_bad = scan_kernel_log(dmesg)
    if v.dmesg_bad:
        v.problems.append(f"kernel log has {len(v.dmesg_bad)} bad line(s)")
    if not v.results:
        v.problems.append("no PHX-RESULT lines")
    if not v.evidence and not only:
        v.problems.append("no PHX-EVIDENCE lines (nothing shows that NVMe DMA reached device memory)")
    if any(r["status"] == "fail" for r in v.results):
        v.problems.append("guest tests failed")
    if any(e["status"] == "fail" for e in v.evidence):
        v.problems.append("evidence mismatch")
    return v


def e2fsck(work: Path) -> dict:
    proc = subprocess.run(["e2fsck", "-fn", str(work / "ext4.img")], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ok = proc.returncode == 0
    detail = "clean" if ok else f"exit {proc.returncode}: " + " | ".join(proc.stdout.splitlines()[-6:])
    return {"test": "host:e2fsck", "status": "pass" if ok else "fail", "detail": detail}


# ---------------------------------------------------------------------------
# Run one kernel


def prepare_guest(k: Kernel, work: Path, args) -> Path:
    if args.guest:
        guest = Path(args.guest).resolve()
        if not guest.is_dir():
            raise RigError(f"--guest {guest}: not a folder")
        return guest
    if args.selftest:
        return VM_DIR / "selftest"
    script = REPO / "tests/vm/build-guest"
    if not script.is_file():
        raise RigError(f"{script.relative_to(REPO)} does not exist yet "
                       "(use --selftest for the rig's own guest, or --guest DIR)")
    out = work / "guest"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    t0 = time.monotonic()
    info(f"[{k.release}] tests/vm/build-guest {k.kdir} {out.relative_to(REPO)}")
    log = work / "build-guest.log"
    env = dict(os.environ)
    if k.buildroot:
        env["PHX_KBUILD_CHROOT"] = str(k.buildroot)
    with open(log, "w") as f:
        proc = subprocess.run([str(script), str(k.kdir), str(out)], cwd=REPO, env=env,
                              stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:])
        raise RigError(f"tests/vm/build-guest failed for {k.release} (exit {proc.returncode}), "
                       f"log {log}:\n{tail}")
    info(f"[{k.release}] guest built in {time.monotonic() - t0:.1f}s")
    return out


def choose_accel(args, k: Kernel, work: Path) -> tuple[str, str]:
    want = args.accel or os.environ.get("PHX_VM_ACCEL") or "auto"
    if want in ("tcg", "kvm"):
        return want, "requested"
    if want != "auto":
        raise RigError(f"accel {want!r}: use tcg, kvm or auto")
    ok, why = kvm_usable(k, work)
    return ("kvm" if ok else "tcg"), f"auto: kvm {'works' if ok else 'unusable'} ({why})"


def env_mib(name: str, default: int) -> int:
    val = os.environ.get(name) or str(default)
    if not val.isdigit() or not 16 <= int(val) <= 65536:
        raise RigError(f"{name}={val!r}: a size in MiB from 16 to 65536")
    return int(val)


def variant(args) -> str:
    """Suffix of work folders and reports for non-default machines."""
    return "-iommu" if args.iommu else ""


def guest_vars() -> dict[str, str]:
    """PHX_VM_GUEST_VARS="PHX_A=1 PHX_B=x": extra /etc/phx/config entries (vm/soak's knobs)."""
    out = {}
    for item in os.environ.get("PHX_VM_GUEST_VARS", "").split():
        key, eq, val = item.partition("=")
        if not eq or not re.fullmatch(r"PHX_[A-Z0-9_]+", key):
            raise RigError(f"PHX_VM_GUEST_VARS: {item!r} is not PHX_NAME=VALUE")
        out[key] = val
    return out


def run_kernel(k: Kernel, args) -> dict:
    work = WORK_ROOT / (k.release + variant(args))
    work.mkdir(parents=True, exist_ok=True)
    # One run per kernel at a time: the work folder holds its images.
    with open(work / ".lock", "w") as lk:
        try:
            fcntl.flock(lk, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            info(f"[{k.release}] waiting for another vm/run using {work}")
            fcntl.flock(lk, fcntl.LOCK_EX)
        return run_kernel_locked(k, args, work)


def run_kernel_locked(k: Kernel, args, work: Path) -> dict:
    # build/vm/<series> -> <release>: a stable path for scripts.
    alias = WORK_ROOT / (k.series + variant(args))
    if alias.is_symlink() or not alias.exists():
        with contextlib.suppress(FileNotFoundError):
            alias.unlink()
        alias.symlink_to(work.name)
    for name in ("console.log", "report.log", "qemu.log", "raw.img", "ext4.img"):
        with contextlib.suppress(FileNotFoundError):
            (work / name).unlink()
    shutil.rmtree(work / "extract", ignore_errors=True)
    accel, why = choose_accel(args, k, work)
    guest = prepare_guest(k, work, args)
    entry = "shell" if args.shell else args.entry
    if not args.shell:
        check_guest_dir(guest, entry)
    t0 = time.monotonic()
    initrd = work / "initramfs.cpio"
    userland = prepare_userland()
    (work / "guest-userland.json").write_text(json.dumps(
        userland.origin if userland else {}, indent=1, sort_keys=True) + "\n")
    build_initramfs(k, guest, initrd, {
        "PHX_ENTRY": args.entry, "PHX_ONLY": args.only or "", "PHX_WAIT_S": "60",
        "PHX_RAW_SERIAL": RAW_SERIAL, "PHX_EXT4_SERIAL": EXT4_SERIAL,
        "PHX_NSHM": str(NSHM), "PHX_MODE": "shell" if args.shell else "run",
        "PHX_TOOLS": " ".join(t.path for t in (selected_tools() if userland else []) if t.path),
        **guest_vars()}, userland)
    make_raw_image(work / "raw.img", env_mib("PHX_VM_RAW_MIB", RAW_MIB))
    make_ext4_image(work / "ext4.img", env_mib("PHX_VM_EXT4_MIB", EXT4_MIB))
    tag = f"{os.getpid()}-{re.sub(r'[^A-Za-z0-9.]', '_', k.release)}"
    shm_dir = Path(os.environ.get("PHX_VM_SHM_DIR") or "/dev/shm")
    shm = [shm_dir / f"phx-{tag}-shm{i}" for i in range(len(SHM_SIZES_MIB))]
    # Device memory files of runs that were killed (their pid is gone).
    for p in shm_dir.glob("phx-*-shm*"):
        m = re.fullmatch(r"phx-(\d+)-.*-shm\d+", p.name)
        if m and not Path(f"/proc/{m.group(1)}").exists():
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
    try:
        st = os.statvfs(shm_dir)
    except OSError as e:
        raise RigError(f"ivshmem backing folder {shm_dir}: {e} (set PHX_VM_SHM_DIR)") from e
    free_mib = st.f_bavail * st.f_frsize >> 20
    if free_mib < sum(SHM_SIZES_MIB) + 64:
        raise RigError(f"{shm_dir} has {free_mib} MiB free; the ivshmem files need "
                       f"{sum(SHM_SIZES_MIB)} MiB (a container's /dev/shm is often 64 MiB: "
                       "enlarge it or set PHX_VM_SHM_DIR to another folder)")
    prep_s = time.monotonic() - t0
    timeout = float(os.environ.get("PHX_VM_TIMEOUT") or (600 if accel == "tcg" else 300))
    ready_timeout = min(timeout, float(os.environ.get("PHX_VM_READY_TIMEOUT")
                                       or (120 if accel == "tcg" else 60)))
    # Unix socket paths are short (108 bytes): the monitor lives in /tmp.
    mon_dir = Path(tempfile.mkdtemp(prefix="phx-vm-"))
    monitor = mon_dir / "monitor.sock"
    cmd = qemu_command(k, work, accel, initrd, shm, args.shell, args.iommu,
                       None if args.shell else monitor)
    (work / "qemu-cmd.sh").write_text(shlex.join(cmd) + "\n")
    info(f"[{k.release}] booting ({accel}, {why}; prep {prep_s:.1f}s, timeout {timeout:.0f}s)")
    try:
        if args.shell:
            subprocess.run(cmd)
            return {"kernel": k.release, "pass": True, "shell": True}
        b = boot(cmd, work, accel, timeout, ready_timeout, monitor)
        v = judge(work, shm, args.only)
        host_results = list(v.evidence)
        if (work / "ext4.img").is_file() and v.exit_code is not None:
            host_results.append(e2fsck(work))
    finally:
        shutil.rmtree(mon_dir, ignore_errors=True)
        for i, p in enumerate(shm):
            with contextlib.suppress(FileNotFoundError):
                if args.keep:
                    # One kept set per kernel, replaced by the next --keep run.
                    kept = shm_dir / f"phx-kept-{work.name.replace('+', '_')}-shm{i}"
                    p.rename(kept)
                    info(f"[{k.release}] kept ivshmem #{i} as {kept}")
                else:
                    p.unlink()
    if b.stalled:
        v.problems.insert(0, f"QEMU killed: the guest's /init was not ready after {ready_timeout:.0f}s"
                          + (" (KVM here may not work: try --accel tcg)" if accel == "kvm" else ""))
    elif b.timed_out:
        v.problems.insert(0, f"QEMU killed after the {timeout:.0f}s timeout "
                          "(blocked tasks and CPU backtraces requested first: see the console log)")
    elif b.qemu_rc not in (0, None):
        v.problems.append(f"QEMU exited with {b.qemu_rc}: {b.qemu_out.strip()[-500:]}")
    if any(r["status"] == "fail" for r in host_results) and "evidence mismatch" not in v.problems:
        v.problems.append("host-side checks failed")
    for ln in v.init_lines:
        m = re.search(r"uptime=([\d.]+)", ln)
        if m:
            b.init_s = float(m.group(1))
    all_results = v.results + host_results
    guest_counts = {s: sum(1 for r in v.results if r["status"] == s) for s in ("pass", "fail", "skip")}
    ok = not v.problems
    summary = {
        "kernel": k.release, "series": k.series, "accel": accel, "iommu": args.iommu,
        "boot_s": None if b.ready_s is None else round(b.ready_s, 1),
        "run_s": round(b.wall_s, 1), "guest_uptime_ready_s": b.init_s, "prep_s": round(prep_s, 1),
        "results": guest_counts, "host_checks": {s: sum(1 for r in host_results if r["status"] == s)
                                                 for s in ("pass", "fail")},
        "evidence": {"lines": len(v.evidence),
                     "verified": sum(1 for e in v.evidence if e["status"] == "pass")},
        "dmesg": {"lines": v.dmesg_lines, "bad": len(v.dmesg_bad),
                  "verdict": ("clean" if not v.dmesg_bad else "bad")
                  + ("" if v.dmesg_lines else " (no dump: console log scanned)")},
        "exit": v.exit_code, "timed_out": b.timed_out, "pass": ok,
        "problems": v.problems,
    }
    report = {**summary, "results_detail": all_results, "notes": v.notes,
              "dmesg_bad_lines": v.dmesg_bad,
              "qemu_cmd": cmd, "work": str(work), "entry": args.entry, "only": args.only}
    (WORK_ROOT / f"report-{k.release}{variant(args)}.json").write_text(json.dumps(report, indent=1) + "\n")

    # Human summary.
    ready = "never" if b.ready_s is None else f"{b.ready_s:.1f}s"
    print(f"\n=== {k.release} ({accel}{', iommu' if args.iommu else ''}): {'PASS' if ok else 'FAIL'}  "
          f"QEMU {b.wall_s:.1f}s (guest ready after {ready}, uptime {b.init_s if b.init_s is not None else '-'}s)")
    print(f"    guest results: {guest_counts['pass']} pass, {guest_counts['fail']} fail, "
          f"{guest_counts['skip']} skip; evidence {summary['evidence']['verified']}/"
          f"{len(v.evidence)} verified; dmesg {summary['dmesg']['verdict']}")
    for r in all_results:
        if r["status"] == "fail" or args.verbose:
            print(f"    {r['status'].upper():4} {r['test']}: {r.get('detail', '')}")
    if args.verbose:
        for n in v.notes:
            print(f"    note: {n}")
    for p in v.problems:
        print(f"    problem: {p}")
    if v.dmesg_bad:
        print("    offending kernel log lines:")
        for ln in v.dmesg_bad[:60]:
            print(f"      {ln}")
    if v.exit_code is None:
        console = work / "console.log"
        tail = console.read_text(errors="replace").splitlines()[-100:] if console.is_file() else []
        print(f"    console tail ({console}):")
        for ln in tail:
            print(f"      {ln}")
    if not ok:
        print(f"    logs: {work.relative_to(REPO)}/{{console,report,qemu}}.log; "
              f"report: {(WORK_ROOT / f'report-{k.release}{variant(args)}.json').relative_to(REPO)}")
    if not args.keep:
        for name in ("raw.img", "ext4.img"):
            with contextlib.suppress(FileNotFoundError):
                (work / name).unlink()
    print(json.dumps(summary, separators=(",", ":")), flush=True)
    return summary


# ---------------------------------------------------------------------------
# CLI


def series_list(arg: str) -> list[str]:
    if arg == "all":
        return list(SERIES)
    if arg not in SERIES:
        raise RigError(f"--kernel {arg}: use {', '.join(SERIES)} or all")
    return [arg]


def self_check() -> None:
    """Runs vm/test_rig.py (well under a second): a verdict is only as good
    as the code that reaches it."""
    proc = subprocess.run([sys.executable, "-B", "-m", "unittest", "-q", "test_rig"], cwd=VM_DIR,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise RigError(f"the rig's own unit tests (vm/test_rig.py) fail:\n{proc.stdout.strip()}")


def cmd_fetch(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="vm/fetch-kernels",
                                 description="Download, unpack and check the rig's kernels.")
    ap.add_argument("--kernel", default="all", help=f"{', '.join(SERIES)} or all (default)")
    ap.add_argument("--print-kdir", action="store_true",
                    help="print only the headers folder (KDIR) of each kernel")
    args = ap.parse_args(argv)
    for s in series_list(args.kernel):
        k = fetch(s)
        if args.print_kdir:
            print(k.kdir)
        else:
            print(f"{s}: {k.release}  KDIR={k.kdir}  vmlinuz={k.vmlinuz}")
    return 0


def cmd_run(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="vm/run", description=(
        "Boot Debian's stock kernels in QEMU with emulated NVMe and ivshmem "
        "device memory, run the guest suite and judge its report."))
    ap.add_argument("--kernel", default="all", help=f"{', '.join(SERIES)} or all (default)")
    ap.add_argument("--accel", choices=("tcg", "kvm", "auto"),
                    help="default: $PHX_VM_ACCEL, else auto (kvm if a probe boot works)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the disk images and /dev/shm files after the run")
    ap.add_argument("--only", metavar="GLOB",
                    help="passed to the guest as PHX_ONLY (tests to run); "
                         "zero evidence lines are then not a failure")
    ap.add_argument("--entry", default="guest.sh",
                    help="script under /phx/ that /init runs (default guest.sh; demo.sh for scripts/demo)")
    ap.add_argument("--demo", action="store_true", help="same as --entry demo.sh")
    ap.add_argument("--guest", metavar="DIR", help="use a prebuilt guest folder instead of tests/vm/build-guest")
    ap.add_argument("--selftest", action="store_true",
                    help="use the rig's own guest (vm/selftest) to check the rig itself")
    ap.add_argument("--shell", action="store_true",
                    help="boot interactively (console on the terminal), no verdict")
    ap.add_argument("--iommu", action="store_true",
                    default=os.environ.get("PHX_VM_IOMMU", "") not in ("", "0"),
                    help="add an emulated Intel IOMMU (intel_iommu=on, strict); "
                         "default $PHX_VM_IOMMU; work folder and report get -iommu")
    ap.add_argument("-v", "--verbose", action="store_true", help="list every result")
    args = ap.parse_args(argv)
    if args.demo:
        args.entry = "demo.sh"
    if not re.fullmatch(r"[A-Za-z0-9._-]+", args.entry):
        raise RigError(f"--entry {args.entry!r}: a file name under /phx/")
    if args.only and not re.fullmatch(r"[A-Za-z0-9._*?\[\]/:,-]+", args.only):
        raise RigError(f"--only {args.only!r}: letters, digits and ._*?[]/:,- only")
    need_tools("qemu-system-x86_64", "mkfs.ext4", "debugfs", "e2fsck")
    WORK_ROOT.mkdir(parents=True, exist_ok=True)
    self_check()
    t0 = time.monotonic()
    kernels = [fetch(s) for s in series_list(args.kernel)]
    info(f"kernels ready in {time.monotonic() - t0:.1f}s: {', '.join(k.release for k in kernels)}")
    summaries = []
    for k in kernels:
        try:
            summaries.append(run_kernel(k, args))
        except RigError as e:
            # This kernel could not be run (e.g. the guest did not build):
            # it fails, the next one still runs.
            print(f"vm: error: {e}", file=sys.stderr)
            summary = {"kernel": k.release, "series": k.series, "pass": False,
                       "problems": [str(e).splitlines()[0]]}
            (WORK_ROOT / f"report-{k.release}{variant(args)}.json").write_text(
                json.dumps({**summary, "error": str(e)}, indent=1) + "\n")
            print(f"\n=== {k.release}: FAIL (not run)")
            print(json.dumps(summary, separators=(",", ":")), flush=True)
            summaries.append(summary)
    if args.shell:
        return 0
    failed = [s["kernel"] for s in summaries if not s["pass"]]
    print(f"\nvm: {len(summaries) - len(failed)}/{len(summaries)} kernels passed"
          + (f"; failed: {', '.join(failed)}" if failed else "")
          + f" ({time.monotonic() - t0:.0f}s)")
    return 1 if failed else 0


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("fetch", "run"):
        print("usage: rig.py fetch|run [options]  (use vm/fetch-kernels or vm/run)", file=sys.stderr)
        return 2
    try:
        return (cmd_fetch if sys.argv[1] == "fetch" else cmd_run)(sys.argv[2:])
    except RigError as e:
        print(f"vm: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("vm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
