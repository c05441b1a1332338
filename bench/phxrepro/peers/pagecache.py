# SPDX-License-Identifier: MIT
"""The page cache state of a load: warm (the file read once beforehand) or
cold (evicted).  Eviction needs no root: fsync, then
posix_fadvise(POSIX_FADV_DONTNEED) over the whole file; where
/proc/sys/vm/drop_caches is writable it can be used as well (evict_to_zero
does only when fadvise left pages), and the record says which ran.  mincore() over a mapping of the file tells how much of it
is still resident, so a record shows whether eviction worked."""

from __future__ import annotations

import ctypes
import mmap
import os

READ_CHUNK = 64 << 20
DROP_CACHES = "/proc/sys/vm/drop_caches"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def prime(paths) -> None:
    """Reads every file once, so that the page cache holds it."""
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.read(READ_CHUNK):
                pass


def evict(paths, *, drop_caches: bool = True) -> dict:
    """Evicts @paths from the page cache; returns how, and what is left."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            # Dirty pages are not dropped: write them back first.
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    how = ["fsync+posix_fadvise(DONTNEED)"]
    if drop_caches and os.access(DROP_CACHES, os.W_OK):
        try:
            os.sync()
            with open(DROP_CACHES, "w", encoding="ascii") as f:
                f.write("1\n")
            how.append("drop_caches=1")
        except OSError as exc:
            how.append(f"drop_caches failed: {exc.strerror}")
    return {"evicted_by": "+".join(how), "resident_after_evict": resident_fraction(paths)}


def resident_fraction(paths) -> float | None:
    """The fraction of @paths' pages in the page cache (mincore), or None
    where it cannot be asked."""
    pages = resident = 0
    page = mmap.PAGESIZE
    for path in paths:
        size = os.path.getsize(path)
        if size == 0:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if addr in (None, ctypes.c_void_p(-1).value):
                return None
            try:
                n = (size + page - 1) // page
                vec = (ctypes.c_ubyte * n)()
                if _libc.mincore(addr, size, vec) != 0:
                    return None
                pages += n
                resident += sum(b & 1 for b in vec)
            finally:
                _libc.munmap(addr, size)
        finally:
            os.close(fd)
    return resident / pages if pages else 0.0


def evict_to_zero(paths, *, drop_caches: bool = True, tries: int = 20) -> dict:
    """Evicts @paths until mincore finds none of their pages (readahead still
    in flight cannot be dropped at once): evict()'s record of the last try,
    with "evict_tries".  The first try is fsync and fadvise alone; only a
    later one (pages stayed) also writes drop_caches where @drop_caches
    allows, since that drops every file's clean pages, the libraries the
    next process imports among them, which it then reads from the disk
    again."""
    import time

    state: dict = {}
    for attempt in range(tries):
        state = evict(paths, drop_caches=drop_caches and attempt > 0)
        state["evict_tries"] = attempt + 1
        if not state["resident_after_evict"]:
            break
        time.sleep(0.05)
    return state


def evict_until_cold(paths, *, drop_caches: bool = True, tries: int = 20) -> float | None:
    """evict_to_zero(); the fraction left."""
    return evict_to_zero(paths, drop_caches=drop_caches, tries=tries)["resident_after_evict"]
