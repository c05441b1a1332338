"""The guest's initramfs: busybox, /init, stock modules, Debian programs and
the guest folder as /phx."""

from __future__ import annotations

import os
import re
import shlex
import stat
from pathlib import Path

from .common import RigError, run_cmd
from .config import GUEST_MODULES, VM_DIR
from .cpio import Cpio
from .elf import elf_kind
from .kernels import Kernel
from .modules import module_bytes, module_index, module_load_order, on_demand_modules
from .userland import Userland


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
