# SPDX-License-Identifier: MIT
"""``phoenix_gds.torch``: safetensors.torch's calls on libphoenix.

    from phoenix_gds.torch import load_file      # instead of safetensors.torch
    weights = load_file("model.safetensors", device="cuda:0")

``load_file(filename, device="cpu")`` returns ``{name: torch.Tensor}`` as
safetensors' does, read by the loader straight onto the device.
``save_file(tensors, filename, metadata=None)`` writes each tensor from
its own memory (a GPU's included) through libphoenix; ``save(tensors,
metadata=None) -> bytes`` and ``load(data) -> dict`` as safetensors'.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Set, Union

from . import _save
from ._convert import TORCH_DTYPES
from ._safetensors import _error, _safetensor_errors, safe_open

_CODES = {torch_name: code for code, torch_name in TORCH_DTYPES.items()}


def load_file(filename: Union[str, os.PathLike], device: Any = "cpu") -> Dict[str, Any]:
    """Every tensor of a .safetensors file (or a folder or index) as torch tensors on ``device``.

    device: "cpu", "cuda", "cuda:N", an integer N or a torch.device."""
    from . import Loader
    from ._safetensors import _device_text

    loader = Loader(_device_text(device))
    with _safetensor_errors():
        return loader.load(filename, framework="torch")


def _shared(tensors: Mapping[str, Any]) -> List[Set[str]]:
    """The names whose tensors overlap in memory, as safetensors finds them
    (same device and storage, and overlapping byte ranges)."""
    storages: Dict[Any, List[str]] = {}
    for name, t in tensors.items():
        if t.device.type != "meta" and t.untyped_storage().nbytes():
            storages.setdefault((t.device, t.untyped_storage().data_ptr()), []).append(name)
    groups = []
    for names in storages.values():
        areas = sorted((tensors[n].data_ptr(), tensors[n].data_ptr() + tensors[n].nbytes, n)
                       for n in names)
        stop = None
        for start, end, name in areas:
            if stop is not None and start < stop:
                groups[-1].add(name)
            else:
                groups.append({name})
            stop = end
    return [group for group in groups if len(group) > 1]


def _entries(tensors: Mapping[str, Any]) -> Dict[str, _save.Entry]:
    """Each tensor's bytes where they lie, checked as safetensors checks them:
    ValueError for what is no dense tensor or not contiguous, RuntimeError
    for tensors sharing memory (each also a SafetensorError)."""
    import torch

    if not isinstance(tensors, Mapping):
        raise _error(ValueError, f"expected a dict of str to torch.Tensor, not "
                                 f"{type(tensors).__name__}")
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise _error(ValueError, f"tensor {name!r}: expected a torch.Tensor, not "
                                     f"{type(t).__name__}")
        if t.layout != torch.strided:
            raise _error(ValueError, f"tensor {name!r} is sparse ({t.layout}): save t.to_dense()")
    shared = _shared(tensors)
    if shared:
        raise _error(RuntimeError, f"some tensors share memory, which the file would hold twice: "
                                   f"{shared}; save each storage once (safetensors.torch."
                                   "save_model drops the duplicates)")
    entries = {}
    for name, t in tensors.items():
        if not t.is_contiguous():
            raise _error(ValueError, f"tensor {name!r} is not contiguous: save t.contiguous()")
        code = _CODES.get(str(t.dtype).rsplit(".", 1)[-1])
        if code is None:
            raise _error(TypeError, f"tensor {name!r}: torch dtype {t.dtype} has no safetensors "
                                    "dtype")
        shape = list(t.shape)
        if code == "F4":  # two elements a byte: the header counts elements
            shape[-1] *= 2
        data = t.detach().reshape(-1).view(torch.uint8)
        entries[name] = _save.Entry(code, shape, data, data.numel(), t.device.type == "cuda")
    return entries


def save(tensors: Mapping[str, Any], metadata: Optional[Mapping[str, str]] = None) -> bytes:
    """The safetensors file of ``tensors`` as bytes, as safetensors.torch.save."""
    return _save.save(_entries(tensors), metadata,
                      lambda entry: entry.data.cpu().numpy().tobytes())


def save_file(tensors: Mapping[str, Any], filename: Union[str, os.PathLike],
              metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes ``tensors`` to ``filename`` in safetensors' format, each from its
    own memory (GPU tensors straight from the GPU) through libphoenix."""
    _save.save_file(_entries(tensors), filename, metadata)


def load(data: bytes) -> Dict[str, Any]:
    """The tensors of a safetensors file's bytes, as writable CPU torch tensors."""
    return _save.load(data, "torch")


__all__ = ["load", "load_file", "safe_open", "save", "save_file"]
