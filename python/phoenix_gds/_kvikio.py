# SPDX-License-Identifier: MIT
"""kvikio's face: ``phoenix_gds.CuFile`` takes kvikio.CuFile's calls, with
their names, arguments and semantics, over phoenix_gds.File."""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Any, Optional, Union

from . import defaults
from ._futures import IOFuture
from ._phoenix import ArgumentError

# kvikio's flags -> File's modes.  "a" keeps the file and creates it when
# missing; writes still go to the offset they name, as kvikio's pwrite does.
_MODES = {"r": "r", "r+": "r+", "w": "w", "w+": "w+", "a": "a", "a+": "a+"}


def _check_task_size(task_size: Optional[int]) -> None:
    # kvikio splits requests into tasks of this size; libphoenix sizes its
    # own requests, so the value is only checked.
    if task_size is not None and (not isinstance(task_size, int) or task_size <= 0):
        raise ArgumentError(errno.EINVAL, f"task_size {task_size!r}: expected a positive integer")


class CuFile:
    """A file for reads and writes into device or host memory, as kvikio.CuFile:
    ``CuFile(file, flags="r")``, flags "r", "w", "a" with an optional "+".

    ``read``/``write`` block and return the bytes moved; ``pread``/``pwrite``
    return an :class:`IOFuture` (``get()``, ``done()``, and a
    ``concurrent.futures.Future``); ``raw_read``/``raw_write`` block and take
    ``dev_offset``, the offset into ``buf``.  ``size`` None means the whole
    buffer.  ``close()`` (and the end of a ``with`` block) waits for every
    future made on the file.  Any size, offset and alignment; ``O_DIRECT``
    where the filesystem has it.
    """

    def __init__(self, file: Union[str, os.PathLike], flags: str = "r"):
        from . import File

        mode = _MODES.get(flags) if isinstance(flags, str) else None
        if mode is None:
            raise ArgumentError(errno.EINVAL, f"flags {flags!r}: expected r, w or a, "
                                              "each with an optional +")
        # CUDA memory goes through the engine of the compat mode at opening.
        self._file = File(file, mode, engine=defaults._ENGINE_OF_MODE[defaults.compat_mode()])

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._file.closed

    def close(self) -> None:
        """Waits for the futures made on the file, then closes it. Idempotent."""
        self._file.close()

    def fileno(self) -> int:
        """The file descriptor."""
        return self._file.fd

    def open_flags(self) -> int:
        """The descriptor's flags, as fcntl(F_GETFL) gives them (O_DIRECT among them when set)."""
        return fcntl.fcntl(self._file.fd, fcntl.F_GETFL)

    def nbytes(self) -> int:
        """The file's size in bytes."""
        return self._file.size

    def pread(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
              task_size: Optional[int] = None) -> IOFuture:
        """Starts reading ``size`` bytes at ``file_offset`` into ``buf``; the future gives the bytes read."""
        _check_task_size(task_size)
        return self._file.pread_async(buf, size, file_offset, 0)

    def pwrite(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
               task_size: Optional[int] = None) -> IOFuture:
        """Starts writing ``size`` bytes of ``buf`` at ``file_offset``; the future gives the bytes written."""
        _check_task_size(task_size)
        return self._file.pwrite_async(buf, size, file_offset, 0)

    def read(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
             task_size: Optional[int] = None) -> int:
        """Reads and returns the bytes read (short only at end of file)."""
        _check_task_size(task_size)
        return self._file.pread(buf, size, file_offset, 0)

    def write(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
              task_size: Optional[int] = None) -> int:
        """Writes and returns the bytes written."""
        _check_task_size(task_size)
        return self._file.pwrite(buf, size, file_offset, 0)

    def raw_read(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
                 dev_offset: int = 0) -> int:
        """Reads into ``buf`` at ``dev_offset`` in one call; returns the bytes read."""
        return self._file.pread(buf, size, file_offset, dev_offset)

    def raw_write(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
                  dev_offset: int = 0) -> int:
        """Writes from ``buf`` at ``dev_offset`` in one call; returns the bytes written."""
        return self._file.pwrite(buf, size, file_offset, dev_offset)

    def __enter__(self) -> "CuFile":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        return f"<phoenix_gds.CuFile {self._file.path!r}{' closed' if self.closed else ''}>"
