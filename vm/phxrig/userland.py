"""Debian programs in the guest: the GUEST_TOOLS list, their packages
downloaded into the cache, and the libraries and loader they need."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .common import RigError, info, need_tools, run_cmd
from .config import cache_dir
from .elf import elf_dynamic_info, elf_kind


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
# guest's own programs under /phx must stay static).  The rig downloads
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
                raise RigError(f"guest tool: {t.package} has no {rel} (see GUEST_TOOLS in vm/phxrig/userland.py)")
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
