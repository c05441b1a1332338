# SPDX-License-Identifier: MIT
"""phoenix: safetensors checkpoints straight into GPU memory with libphoenix.

    import phoenix, torch
    weights = phoenix.load_safetensors("/models/llama", device="cuda:0", framework="torch")

Tensors come back through DLPack, so the package itself depends on no
framework: ``framework=None`` returns :class:`phoenix.Tensor` objects
(``__dlpack__``/``__dlpack_device__``) that ``torch.from_dlpack``,
``cupy.from_dlpack``, ``jax.numpy.from_dlpack`` and ``numpy.from_dlpack``
(CPU) take; ``framework="torch"`` etc. converts for you.
"""

from __future__ import annotations

import os
from typing import Callable, Iterable, Mapping, Optional, Union

from ._phoenix import File, Tensor, __version__, engine_for
from ._phoenix import Loader as _Loader

__all__ = ["File", "Loader", "Tensor", "engine_for", "load_safetensors", "__version__"]

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

    Returns {name: tensor}: :class:`phoenix.Tensor` (DLPack) objects, or
    torch/numpy/cupy/jax arrays with ``framework=``.  ``options`` are
    :class:`Loader`'s (engine, device_map, cache, chunk_size, queue_depth,
    parallel_files, pinned).  Errors raise OSError with the errno set.
    """
    return Loader(device, **options).load(paths, framework=framework, progress=progress)
