"""Debian kernels: the series the rig boots, finding the newest release
through apt, downloading and unpacking its packages into the cache, and the
debootstrap build root of kernels whose headers need another compiler."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .common import RigError, info, need_tools, run_cmd
from .config import REPO, cache_dir


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


def version_key(s: str):
    """sort -V-like key."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", s) if p]


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
