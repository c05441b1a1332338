# SPDX-License-Identifier: MIT
"""kvikio's face: ``phoenix_gds.CuFile`` takes kvikio.CuFile's calls, with
their names, arguments and semantics, over phoenix_gds.File.

As kvikio does, ``read``/``pread``/``write``/``pwrite`` cut a request into
tasks of ``task_size`` bytes (default ``defaults.get("task_size")``) that run
at once on the package's thread pool, and a read that meets the end of the
file is an error, not a short count.  Errors are kvikio's classes as well
as phoenix_gds' own: a failure of the system or the library is
:class:`CuFileError` (OSError with errno, and RuntimeError as kvikio raises),
a bad argument ArgumentError (ValueError), a negative size or offset also
OverflowError.
"""

from __future__ import annotations

import errno
import fcntl
import os
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

from . import defaults
from ._futures import IOFuture
from ._phoenix import ArgumentError, _buffer_nbytes

# kvikio's flags -> File's modes.  "a" keeps the file and creates it when
# missing; writes still go to the offset they name (kvikio refuses "a").
_MODES = {"r": "r", "r+": "r+", "w": "w", "w+": "w+", "a": "a", "a+": "a+"}
# kvikio's single-task guard: requests of a page or less are one task.
_PAGE = 4096


class CuFileError(OSError, RuntimeError):
    """A CuFile call that failed in the system or the library: an OSError
    with errno and a message naming the call, file, offset and size, and a
    RuntimeError, which kvikio raises for the same failures (a missing file,
    a write on a file opened "r", a read past the end of the file: EIO)."""


class _NegativeArgument(ArgumentError, OverflowError):
    """A negative size or offset: kvikio's OverflowError, our ArgumentError."""


_FLAVOURS: Dict[Type[OSError], Type[CuFileError]] = {OSError: CuFileError}


def _as_kvikio(error: OSError) -> BaseException:
    """``error`` as a CuFileError of the same OSError subclass
    (FileNotFoundError stays one); bad arguments stay as they are."""
    if isinstance(error, (ArgumentError, CuFileError)):
        return error
    kind = type(error)
    flavour = _FLAVOURS.get(kind)
    if flavour is None:
        flavour = _FLAVOURS.setdefault(
            kind, type(kind.__name__, (CuFileError, kind), {"__module__": __name__,
                                                            "__doc__": CuFileError.__doc__}))
    return flavour(*error.args)


def _kvikio_errors(call: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except OSError as error:
            raise _as_kvikio(error) from error
    return run


def _end_of_file(op: str, path: str, file_offset: int, size: int, moved: int) -> CuFileError:
    return CuFileError(errno.EIO, f"CuFile.{op} {path}: file offset {file_offset}, size {size}: "
                                  f"EOF after {moved} bytes (the file ends first)")


def _tasks(size: int, file_offset: int, task_size: int) -> List[Tuple[int, int, int]]:
    """(size, file_offset, buffer offset) of each task, kvikio's way: pieces of
    task_size, the last one taking what is left; one piece up to a page."""
    if task_size >= size or size <= _PAGE:
        return [(size, file_offset, 0)]
    out = []
    done = 0
    while size - done > task_size:
        out.append((task_size, file_offset + done, done))
        done += task_size
    out.append((size - done, file_offset + done, done))
    return out


class CuFile:
    """A file for reads and writes into device or host memory, as kvikio.CuFile:
    ``CuFile(file, flags="r")``, flags "r", "w", "a" with an optional "+".

    ``read``/``write`` block and return the bytes moved; ``pread``/``pwrite``
    return an :class:`IOFuture` (``get()``, ``done()``, and a
    ``concurrent.futures.Future``); each cuts the request into tasks of
    ``task_size`` bytes run at once.  ``raw_read``/``raw_write`` block, make
    one call and take ``dev_offset``, the offset into ``buf``.  ``size``
    None means the whole buffer.  A read that meets the end of the file
    raises :class:`CuFileError` (EIO).  CUDA memory goes through the engine
    of ``defaults.get("compat_mode")`` when the file is opened.  ``close()``
    (and the end of a ``with`` block) waits for every future made on the
    file.  Any size, offset and alignment; ``O_DIRECT`` where the filesystem
    has it.
    """

    def __init__(self, file: Union[str, os.PathLike], flags: str = "r"):
        from . import File

        mode = _MODES.get(flags) if isinstance(flags, str) else None
        if mode is None:
            raise ArgumentError(errno.EINVAL, f"flags {flags!r}: expected r, w or a, "
                                              "each with an optional +")
        engine = defaults._ENGINE_OF_MODE[defaults.compat_mode()]
        self._file = _kvikio_errors(File)(file, mode, engine=engine)

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

    def _request(self, op: str, buf: Any, size: Optional[int], file_offset: int,
                 writing: bool, dev_offset: int = 0) -> int:
        """The size of a request, checked before anything moves, as kvikio
        checks it: negative is OverflowError, beyond the buffer ValueError."""
        for name, value in (("size", size), ("file offset", file_offset),
                            ("dev_offset", dev_offset)):
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise _NegativeArgument(errno.EINVAL, f"CuFile.{op} {self._file.path}: {name} "
                                                      f"{value} is negative")
        nbytes = _buffer_nbytes(buf, not writing)
        if size is None:
            return nbytes
        if size > nbytes:
            raise ArgumentError(errno.EINVAL, f"CuFile.{op} {self._file.path}: size {size} is "
                                              f"more than the buffer's {nbytes} bytes")
        return size

    def _io(self, op: str, writing: bool, buf: Any, size: Optional[int], file_offset: int,
            task_size: Optional[int], wait: bool) -> Any:
        if task_size is not None:
            defaults.at_least("task_size", 1)(task_size)
        total = self._request(op, buf, size, file_offset, writing)
        call = self._file.pwrite if writing else self._file.pread
        pieces = _tasks(total, file_offset, task_size or defaults.task_size())
        # Every task but the last goes to the pool first; the last one runs
        # its own piece and then waits for them.  The pool takes tasks in
        # order, so a task it waits for has always started.
        started = [self._file._submit(call, buf, n, offset, at) for n, offset, at in pieces[:-1]]

        def last() -> int:
            own: Optional[BaseException] = None
            moved = 0
            try:
                moved = call(buf, *pieces[-1])
            except OSError as error:
                own = error
            # Every task is waited for (and its failure looked at) before the
            # first failure, in file order, is raised.
            failures = [task.exception() for task in started]
            moved += sum(task.result() for task, failure in zip(started, failures)
                         if failure is None)
            first = next((f for f in failures + [own] if f is not None), None)
            if first is not None:
                raise first
            if not writing and moved < total:
                raise _end_of_file(op, self._file.path, file_offset, total, moved)
            return moved

        run = _kvikio_errors(last)
        return run() if wait else self._file._submit(run)

    def pread(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
              task_size: Optional[int] = None) -> IOFuture:
        """Starts reading ``size`` bytes at ``file_offset`` into ``buf`` in tasks of
        ``task_size``; the future gives the bytes read, or raises CuFileError
        (EIO) where the file ends first."""
        return self._io("pread", False, buf, size, file_offset, task_size, wait=False)

    def pwrite(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
               task_size: Optional[int] = None) -> IOFuture:
        """Starts writing ``size`` bytes of ``buf`` at ``file_offset`` in tasks of
        ``task_size``; the future gives the bytes written."""
        return self._io("pwrite", True, buf, size, file_offset, task_size, wait=False)

    def read(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
             task_size: Optional[int] = None) -> int:
        """pread(...).get(): the bytes read; CuFileError (EIO) where the file ends first."""
        return self._io("read", False, buf, size, file_offset, task_size, wait=True)

    def write(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
              task_size: Optional[int] = None) -> int:
        """pwrite(...).get(): the bytes written."""
        return self._io("write", True, buf, size, file_offset, task_size, wait=True)

    def raw_read(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
                 dev_offset: int = 0) -> int:
        """Reads into ``buf`` at ``dev_offset`` in one call; returns the bytes read,
        CuFileError (EIO) where the file ends first."""
        nbytes = self._request("raw_read", buf, size, file_offset, False, dev_offset)
        wanted = nbytes - dev_offset if size is None else nbytes
        moved = _kvikio_errors(self._file.pread)(buf, size, file_offset, dev_offset)
        if moved < wanted:
            raise _end_of_file("raw_read", self._file.path, file_offset, wanted, moved)
        return moved

    def raw_write(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
                  dev_offset: int = 0) -> int:
        """Writes from ``buf`` at ``dev_offset`` in one call; returns the bytes written."""
        self._request("raw_write", buf, size, file_offset, True, dev_offset)
        return _kvikio_errors(self._file.pwrite)(buf, size, file_offset, dev_offset)

    def __enter__(self) -> "CuFile":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        return f"<phoenix_gds.CuFile {self._file.path!r}{' closed' if self.closed else ''}>"
