"""The initramfs archive format: a newc writer."""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path

from .common import RigError


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
