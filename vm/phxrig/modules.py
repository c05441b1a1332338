"""The kernel's stock modules the guest gets: load order from modules.dep,
decompression, and the cut-down modules.dep/modules.alias for modprobe."""

from __future__ import annotations

import gzip
import lzma
import re
from pathlib import Path

from .common import RigError
from .config import GUEST_MODULES_OPTIONAL, GUEST_ON_DEMAND_MODULES
from .kernels import Kernel


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
