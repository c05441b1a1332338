"""Host checks of the guest's PHX-EVIDENCE claims: bytes of an ivshmem
file against the raw disk or a file of the ext4 image."""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from .common import RigError, run_cmd
from .config import SHM_MIB, SHM_SIZES_MIB


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
            if self.shm[idx].is_file():
                size_mib = self.shm[idx].stat().st_size >> 20  # as QEMU made it
            else:
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
