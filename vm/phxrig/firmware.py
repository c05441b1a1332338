"""UEFI firmware for the high-BAR machine (vm/run --high-bar).

Debian 12's SeaBIOS puts 64-bit BARs just above RAM and its OVMF (2022.11)
caps the 64-bit aperture below 1 TiB: neither places a BAR where a GPU's
BAR1 sits, tens of TiB up.  sid's OVMF sizes the aperture from
opt/ovmf/X-PciMmio64Mb and the CPU's physical address bits, so it is
fetched (never installed) from sid like the 7.x kernels and cached.
"""

from __future__ import annotations

import fcntl
import json
import shutil
from pathlib import Path

from .common import RigError, info, need_tools, run_cmd
from .config import cache_dir
from .kernels import apt_has_lists, apt_options, apt_update

OVMF_PACKAGE = "ovmf-generic"
OVMF_SERIES = "7.2"   # whose suite (sid) serves the package
OVMF_CODE = "usr/share/OVMF/OVMF_CODE_4M.fd"
OVMF_VARS = "usr/share/OVMF/OVMF_VARS_4M.fd"


def fetch_ovmf() -> tuple[Path, Path]:
    """(code, vars template) of sid's OVMF, unpacked once into the cache."""
    dest = cache_dir() / "ovmf"
    stamp = dest / "complete.json"
    with open(cache_dir() / ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        if not stamp.is_file():
            need_tools("apt-get", "dpkg-deb")
            if not apt_has_lists(OVMF_SERIES):
                apt_update(OVMF_SERIES)
            if dest.exists():
                shutil.rmtree(dest)
            (dest / "debs").mkdir(parents=True)
            info(f"downloading {OVMF_PACKAGE} from sid")
            run_cmd(["apt-get", *apt_options(OVMF_SERIES), "download", OVMF_PACKAGE],
                    cwd=dest / "debs", what=f"apt-get download {OVMF_PACKAGE}")
            debs = list((dest / "debs").glob(f"{OVMF_PACKAGE}_*.deb"))
            if len(debs) != 1:
                raise RigError(f"apt-get download left no single {OVMF_PACKAGE} .deb in {dest}")
            run_cmd(["dpkg-deb", "-x", str(debs[0]), str(dest / "root")],
                    what=f"dpkg-deb -x {debs[0].name}")
            stamp.write_text(json.dumps({"package": debs[0].name}) + "\n")
    code, template = dest / "root" / OVMF_CODE, dest / "root" / OVMF_VARS
    if not code.is_file() or not template.is_file():
        raise RigError(f"{dest}: {OVMF_CODE} or {OVMF_VARS} missing from {OVMF_PACKAGE}")
    return code, template
