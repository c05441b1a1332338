"""The guest's disks: the raw pattern image and a fresh ext4 image."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from .common import need_tools, run_cmd


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
