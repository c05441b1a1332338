# SPDX-License-Identifier: MIT
"""phoenix_gds: GPU Direct Storage I/O with libphoenix, from Python.

File reads and writes straight into GPU memory (or host memory), and
safetensors checkpoints loaded onto a GPU::

    import phoenix_gds as phx, torch
    buf = torch.empty(1 << 20, dtype=torch.uint8, device="cuda:0")
    with phx.Device("cuda:0") as dev, dev.register(buf), phx.File("/data/x.bin") as f:
        n = f.pread(buf, file_offset=4096)           # sync: bytes read
        fut = f.pread_async(buf, 4096, 0)            # IOFuture: .get(), .done()
    weights = phx.load_safetensors("/models/llama", device="cuda:0", framework="torch")

Buffers are anything with ``__dlpack__``, ``__cuda_array_interface__`` or
the buffer protocol (torch, cupy, jax, numpy, bytearray...).  The import
name is ``phoenix_gds`` (distribution ``phoenix-gds``): ``phoenix`` is
arize-phoenix's.

Tensors come back through DLPack, so the package itself depends on no
framework: ``framework=None`` returns :class:`phoenix_gds.Tensor` objects
(``__dlpack__``/``__dlpack_device__``) that ``torch.from_dlpack``,
``cupy.from_dlpack``, ``jax.numpy.from_dlpack`` and ``numpy.from_dlpack``
(CPU) take; ``framework="torch"`` etc. converts for you.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from . import _futures
from ._convert import convert as _convert
from ._convert import framework_name as _framework_name
from ._convert import tensor_array as _tensor_array
from ._futures import IOFuture
from ._phoenix import (ArgumentError, Options, Tensor, __version__, engine_for,
                       release_idle_engines)
from ._phoenix import Device as _Device
from ._phoenix import File as _File
from ._phoenix import Loader as _Loader
from ._phoenix import Registration as _Registration

__all__ = [
    "ArgumentError", "CompatMode", "CuFile", "CuFileError", "Device", "File", "IOFuture", "Loader",
    "Options", "Registration", "SafetensorError", "Tensor", "defaults", "engine_for",
    "load_safetensors", "release_idle_engines", "safe_open", "__version__",
]

PathLike = Union[str, os.PathLike]

# numpy.asarray(tensor) on a CPU Tensor: a writable view, not an object array.
Tensor.__array__ = _tensor_array


class Registration:
    """A buffer registered on a Device once, for many reads and writes.

    Made by :meth:`Device.register`.  Any I/O whose buffer lies inside it
    uses it: no pin-and-map per call.  Keeps the buffer object alive until
    close(); a context manager.  close() waits for the package's I/O started
    before it (queued or running), then deregisters.
    """

    __slots__ = ("_registration",)

    def __init__(self, registration: _Registration):
        self._registration = registration

    def close(self) -> None:
        """Waits for the I/O started so far, deregisters, drops the buffer. Idempotent."""
        if not self._registration.closed:
            _futures.everything.drain(closing=False)
        self._registration.close()

    @property
    def closed(self) -> bool:
        """True after close()."""
        return self._registration.closed

    @property
    def ptr(self) -> int:
        """Address of the registered memory (ValueError when closed)."""
        return self._registration.ptr

    @property
    def nbytes(self) -> int:
        """Bytes registered (ValueError when closed)."""
        return self._registration.nbytes

    @property
    def device(self) -> str:
        """Where the memory is: "cpu" or "cuda:N"."""
        return self._registration.device

    @property
    def buffer(self) -> Any:
        """The registered object (ValueError when closed)."""
        return self._registration.buffer

    def __enter__(self) -> "Registration":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.nbytes} bytes at {self.ptr:#x}"
        return f"<phoenix_gds.Registration {self.device} {state}>"


class Device(_Device):
    """A device opened with an engine, for registering buffers:
    ``Device(device="cpu", engine="auto", *, options=None)``.

    device: "cpu", "cuda", "cuda:N" or an integer N (CUDA ordinal, torch's
    numbering).  close() (or the end of a ``with`` block) waits for the
    package's I/O started before it, then closes the registrations made
    through this Device.
    """

    def register(self, buf: Any) -> Registration:
        """Registers buf's memory once for many I/Os (see docs/python.md)."""
        return Registration(super().register(buf))

    def close(self) -> None:
        """Waits for the I/O started so far, then closes the registrations. Idempotent."""
        if not self.closed:
            _futures.everything.drain(closing=False)
        super().close()

    def __exit__(self, *exc: Any) -> bool:
        self.close()
        return False


class File(_File):
    """A file opened for Phoenix I/O: ``File(path, mode="r", *, direct="auto", engine="auto")``.

    mode: "r" read-only, "r+" read-write, "w"/"w+" created or truncated,
    "a"/"a+" created if missing, kept otherwise, "x"/"x+" created and new
    (writable modes also read: unaligned ``O_DIRECT`` writes read their
    edge blocks).  direct: "auto" (each read by the page cache: through it
    when it holds at least half of the range, else ``O_DIRECT``; writes
    ``O_DIRECT``; the direct engine's memory always ``O_DIRECT``),
    "preferred" (``O_DIRECT`` where the filesystem has it), "required" (or
    True), "off" (or False).  :meth:`reads_buffered` says what a read of a
    range would do now.  engine: the engine for CUDA buffers that no open
    :class:`Device` has registered.

    ``pread``/``pwrite`` block and return the bytes moved; ``pread_async``/
    ``pwrite_async`` return an :class:`IOFuture`; ``pread_batch``/
    ``pwrite_batch`` take many ``(buf, size, file_offset, buf_offset)`` at
    once through io_uring.  Buffers registered with :meth:`Device.register`
    are used as registered; others are registered for the call only.  A
    context manager; ``close()`` waits for every future made on this file,
    queued or running, and raises the first failure among those nobody
    looked at.  Errors: OSError with errno and a message naming the file,
    offset and size; ArgumentError (ValueError and OSError EINVAL) for a bad
    argument; ValueError on a closed file.
    """

    def __init__(self, path: PathLike, mode: str = "r", *, direct: Union[str, bool] = "auto",
                 engine: str = "auto"):
        super().__init__(path, mode, direct=direct, engine=engine)
        self._pending = _futures.Pending(f"I/O operation on closed file {self.path}")

    def _submit(self, call: Callable[..., Any], *args: Any) -> IOFuture:
        return _futures.submit(self._pending, call, *args)

    def pread_async(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
                    buf_offset: int = 0) -> IOFuture:
        """:meth:`pread` on the thread pool; the future gives the bytes read."""
        return self._submit(self.pread, buf, size, file_offset, buf_offset)

    def pwrite_async(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
                     buf_offset: int = 0) -> IOFuture:
        """:meth:`pwrite` on the thread pool; the future gives the bytes written."""
        return self._submit(self.pwrite, buf, size, file_offset, buf_offset)

    def pread_batch_async(self, requests: Iterable[Any]) -> IOFuture:
        """:meth:`pread_batch` on the thread pool."""
        return self._submit(self.pread_batch, list(requests))

    def pwrite_batch_async(self, requests: Iterable[Any]) -> IOFuture:
        """:meth:`pwrite_batch` on the thread pool."""
        return self._submit(self.pwrite_batch, list(requests))

    def close(self) -> None:
        """Waits for every future made on this file, then closes it.  Idempotent.

        Raises the first failure of those futures that nobody looked at
        (get, result or exception): a write nobody awaited is never lost
        without a word."""
        pending = getattr(self, "_pending", None)
        failure = pending.drain(closing=True) if pending is not None else None
        super().close()
        if failure is not None:
            raise failure

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        self.close()
        return False

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"mode={self.mode!r}"
        return f"<phoenix_gds.File {self.path!r} {state}>"


class Loader:
    """Loads checkpoints with one configuration, keeping the device's engine
    (CUDA context, copy threads, staging memory) set up between loads.

    device: "cpu" (host engine), "cuda", "cuda:N" or an integer N (CUDA
    ordinal, torch's numbering).
    engine: "auto" (direct where the phxfs module serves the GPU, else
    compat), "direct", "compat", "cufile" or "host".  device_map: {tensor
    name prefix: device} (the longest dotted prefix wins).  cache: "auto"
    (buffered when the page cache holds the file, else O_DIRECT), "direct",
    "buffered".  chunk_size, queue_depth, parallel_files: the I/O shape
    of host-view queues.  pinned: host engine into pinned memory.
    cold_reader ("auto", "threads", "stripes", "uring"), cold_request (bytes per read),
    cold_in_flight (reads at once): force a compat GPU's cold (O_DIRECT)
    reads into another shape than the rule's (None: the rule's part;
    docs/model-loading.md, "Cold files"); stats' per_file says which shape
    each file got and why.
    """

    def __init__(
        self,
        device: Union[str, int] = "cuda:0",
        *,
        engine: str = "auto",
        device_map: Optional[Mapping[str, str]] = None,
        cache: str = "auto",
        chunk_size: int = 32 << 20,
        queue_depth: int = 8,
        parallel_files: int = 4,
        pinned: bool = False,
        cold_reader: str = "auto",
        cold_request: Optional[int] = None,
        cold_in_flight: Optional[int] = None,
    ):
        self._loader = _Loader(
            device, engine, dict(device_map) if isinstance(device_map, Mapping) else device_map,
            cache, chunk_size,
            queue_depth, parallel_files, pinned,
            cold_reader, cold_request, cold_in_flight,
        )

    def warm_up(self, paths: Union[PathLike, Iterable[PathLike]]) -> None:
        """Opens the devices and moves one small read through each."""
        self._loader.warm_up(_paths(paths))

    def load(
        self,
        paths: Union[PathLike, Iterable[PathLike]],
        *,
        framework: Optional[str] = None,
        progress: Optional[Callable[[int, int], None]] = None,
        keys: Optional[Iterable[str]] = None,
    ) -> dict:
        """{name: tensor} for every tensor of the file(s), folder(s) or index(es).

        keys: only these tensors (their bytes alone are read); a name that no
        file holds is OSError EINVAL."""
        _framework_name(framework)  # a bad name fails before the load, not after it
        tensors = self._loader.load(_paths(paths), progress, keys)
        return _convert(tensors, framework)

    @property
    def stats(self) -> dict:
        """The last load: seconds, bytes_read, tensor_bytes, files, engines, and
        per_file: how each file was read (mode, path_taken, threads,
        request_bytes, depth, resident) and why (docs/model-loading.md)."""
        return self._loader.stats


def _paths(paths):
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def load_safetensors(
    paths: Union[PathLike, Iterable[PathLike]],
    device: Union[str, int] = "cuda:0",
    *,
    framework: Optional[str] = None,
    progress: Optional[Callable[[int, int], None]] = None,
    **options,
) -> dict:
    """Loads safetensors file(s), folder(s) or index(es) onto ``device``.

    Returns {name: tensor}: :class:`phoenix_gds.Tensor` (DLPack) objects, or
    torch/numpy/cupy/jax arrays with ``framework=``.  ``options`` are
    :class:`Loader`'s (engine, device_map, cache, chunk_size, queue_depth,
    parallel_files, pinned, cold_reader, cold_request, cold_in_flight).  Errors raise OSError with the errno set.
    The GPU's engine (copy threads, pinned staging) stays set up for the
    next call; :func:`release_idle_engines` lets it go.
    """
    return Loader(device, **options).load(paths, framework=framework, progress=progress)


from . import defaults  # noqa: E402
from ._kvikio import CuFile, CuFileError  # noqa: E402  (uses File)
from .defaults import CompatMode  # noqa: E402
from ._safetensors import SafetensorError, safe_open  # noqa: E402
