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

import concurrent.futures
import os
import threading
from typing import Any, Callable, Generic, Iterable, List, Mapping, Optional, Sequence, TypeVar, Union

from ._phoenix import (Device, Options, Registration, Tensor, __version__, engine_for,
                       release_idle_engines)
from ._phoenix import File as _File
from ._phoenix import Loader as _Loader

__all__ = [
    "Device", "File", "IOFuture", "Loader", "Options", "Registration", "Tensor", "engine_for",
    "load_safetensors", "release_idle_engines", "__version__",
]

T = TypeVar("T")

PathLike = Union[str, os.PathLike]

# safetensors dtype -> torch dtype attribute, for the dtypes whose DLPack
# codes an older torch may not take: loaded as bytes and viewed instead.
_TORCH_BYTE_VIEWS = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "BOOL": "bool"}


def _to_torch(tensor: Tensor):
    import torch

    try:
        return torch.from_dlpack(tensor)
    except (BufferError, RuntimeError, TypeError):
        view = _TORCH_BYTE_VIEWS.get(tensor.dtype)
        if view is None:
            raise
        raw = torch.from_dlpack(tensor.as_bytes())
        return raw.view(getattr(torch, view)).reshape(tensor.shape)


def _to_numpy(tensor: Tensor):
    import numpy

    if tensor.dtype in ("BF16", "F8_E4M3", "F8_E5M2"):
        raise TypeError(
            f"tensor {tensor.name!r} is {tensor.dtype}, which numpy lacks; "
            "use framework=None and numpy.from_dlpack(t.as_bytes()) for its bytes"
        )
    if tensor.dtype == "BOOL":
        return numpy.from_dlpack(tensor.as_bytes()).view(numpy.bool_).reshape(tensor.shape)
    return numpy.from_dlpack(tensor)


def _convert(tensors: dict, framework: Optional[str]) -> dict:
    if framework is None:
        return tensors
    if framework == "torch":
        return {name: _to_torch(t) for name, t in tensors.items()}
    if framework == "numpy":
        return {name: _to_numpy(t) for name, t in tensors.items()}
    if framework == "cupy":
        import cupy

        return {name: cupy.from_dlpack(t) for name, t in tensors.items()}
    if framework == "jax":
        import jax.numpy as jnp

        return {name: jnp.from_dlpack(t) for name, t in tensors.items()}
    raise ValueError(f"framework {framework!r}: expected None, 'torch', 'numpy', 'cupy' or 'jax'")


class IOFuture(Generic[T]):
    """The result of an asynchronous I/O (File.pread_async and friends).

    The I/O runs on the package's thread pool, with the GIL released while
    it moves bytes.  ``get()`` waits and returns the bytes (a list of them for
    a batch), or raises the I/O's OSError; ``done()`` asks without waiting.
    """

    __slots__ = ("_future",)

    def __init__(self, future: "concurrent.futures.Future[T]"):
        self._future = future

    def get(self, timeout: Optional[float] = None) -> T:
        """Waits (at most ``timeout`` seconds: TimeoutError) and returns the result."""
        return self._future.result(timeout)

    def done(self) -> bool:
        """True once the I/O has finished, successfully or not."""
        return self._future.done()

    def __repr__(self) -> str:
        return f"<IOFuture {'done' if self.done() else 'pending'}>"


_pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
_pool_lock = threading.Lock()


def _submit(call: Callable[..., T], *args: Any) -> IOFuture[T]:
    global _pool
    with _pool_lock:
        if _pool is None:
            workers = int(os.environ.get("PHX_PY_THREADS", "0")) or min(32, (os.cpu_count() or 1) * 4)
            _pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="phoenix_gds")
    return IOFuture(_pool.submit(call, *args))


Request = Union[tuple, Sequence[Any]]


class File(_File):
    """A file opened for Phoenix I/O: ``File(path, mode="r", *, direct="preferred", engine="auto")``.

    mode: "r" read-only, "r+" read-write, "w"/"w+" created or truncated,
    "x"/"x+" created and new (writable modes also read: unaligned
    ``O_DIRECT`` writes read their edge blocks).  direct: "preferred"
    (``O_DIRECT`` where the filesystem has it), "required", "off".  engine:
    the engine for CUDA buffers that no open :class:`Device` has registered.

    ``pread``/``pwrite`` block and return the bytes moved; ``pread_async``/
    ``pwrite_async`` return an :class:`IOFuture`; ``pread_batch``/
    ``pwrite_batch`` take many ``(buf, size, file_offset, buf_offset)`` at
    once through io_uring.  Buffers registered with :meth:`Device.register`
    are used as registered; others are registered for the call only.  A
    context manager; ``close()`` waits for I/O in flight.  Errors: OSError
    with errno and a message naming the file, offset and size; ValueError
    on a closed file.
    """

    def pread_async(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
                    buf_offset: int = 0) -> IOFuture[int]:
        """:meth:`pread` on the thread pool; the future gives the bytes read."""
        return _submit(self.pread, buf, size, file_offset, buf_offset)

    def pwrite_async(self, buf: Any, size: Optional[int] = None, file_offset: int = 0,
                     buf_offset: int = 0) -> IOFuture[int]:
        """:meth:`pwrite` on the thread pool; the future gives the bytes written."""
        return _submit(self.pwrite, buf, size, file_offset, buf_offset)

    def pread_batch_async(self, requests: Iterable[Request]) -> IOFuture[List[int]]:
        """:meth:`pread_batch` on the thread pool."""
        return _submit(self.pread_batch, list(requests))

    def pwrite_batch_async(self, requests: Iterable[Request]) -> IOFuture[List[int]]:
        """:meth:`pwrite_batch` on the thread pool."""
        return _submit(self.pwrite_batch, list(requests))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"mode={self.mode!r}"
        return f"<phoenix_gds.File {self.path!r} {state}>"


class Loader:
    """Loads checkpoints with one configuration, keeping the device's engine
    (CUDA context, copy threads, staging memory) set up between loads.

    device: "cpu" (host engine), "cuda" or "cuda:N" (torch's numbering).
    engine: "auto" (direct where the phxfs module serves the GPU, else
    compat), "direct", "compat", "cufile" or "host".  device_map: {tensor
    name prefix: device} (the longest dotted prefix wins).  cache: "auto"
    (buffered when the page cache holds the file, else O_DIRECT), "direct",
    "buffered".  chunk_size, queue_depth, parallel_files: the I/O shape.
    pinned: host engine into pinned memory.
    """

    def __init__(
        self,
        device: str = "cuda:0",
        *,
        engine: str = "auto",
        device_map: Optional[Mapping[str, str]] = None,
        cache: str = "auto",
        chunk_size: int = 32 << 20,
        queue_depth: int = 8,
        parallel_files: int = 4,
        pinned: bool = False,
    ):
        self._loader = _Loader(
            device, engine, dict(device_map) if device_map else None, cache, chunk_size,
            queue_depth, parallel_files, pinned,
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
    ) -> dict:
        """{name: tensor} for every tensor of the file(s), folder(s) or index(es)."""
        return _convert(self._loader.load(_paths(paths), progress), framework)

    @property
    def stats(self) -> dict:
        """The last load: seconds, bytes_read, tensor_bytes, files, engines..."""
        return self._loader.stats


def _paths(paths):
    if isinstance(paths, (str, os.PathLike)):
        return [os.fspath(paths)]
    return [os.fspath(p) for p in paths]


def load_safetensors(
    paths: Union[PathLike, Iterable[PathLike]],
    device: str = "cuda:0",
    *,
    framework: Optional[str] = None,
    progress: Optional[Callable[[int, int], None]] = None,
    **options,
) -> dict:
    """Loads safetensors file(s), folder(s) or index(es) onto ``device``.

    Returns {name: tensor}: :class:`phoenix_gds.Tensor` (DLPack) objects, or
    torch/numpy/cupy/jax arrays with ``framework=``.  ``options`` are
    :class:`Loader`'s (engine, device_map, cache, chunk_size, queue_depth,
    parallel_files, pinned).  Errors raise OSError with the errno set.
    The GPU's engine (copy threads, pinned staging) stays set up for the
    next call; :func:`release_idle_engines` lets it go.
    """
    return Loader(device, **options).load(paths, framework=framework, progress=progress)
