# SPDX-License-Identifier: MIT
"""``phoenix_gds.numpy``: safetensors.numpy's calls on libphoenix.

    from phoenix_gds.numpy import load_file      # instead of safetensors.numpy
    arrays = load_file("model.safetensors")

``load_file(filename)`` returns ``{name: numpy.ndarray}`` as safetensors'
does: writable arrays in host memory.  ``save_file(tensor_dict, filename,
metadata=None)``, ``save(tensor_dict, metadata=None) -> bytes`` and
``load(data) -> dict`` write and read the bytes safetensors does.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Mapping, Optional, Union

from . import _save
from ._convert import NUMPY_DTYPES
from ._safetensors import _error, _safetensor_errors, safe_open

_CODES = {numpy_name: code for code, numpy_name in NUMPY_DTYPES.items()}


def load_file(filename: Union[str, os.PathLike]) -> Dict[str, Any]:
    """Every tensor of a .safetensors file (or a folder or index) as writable numpy arrays."""
    from . import Loader

    loader = Loader("cpu")
    with _safetensor_errors():
        return loader.load(filename, framework="numpy")


def _entries(tensor_dict: Mapping[str, Any]) -> Dict[str, _save.Entry]:
    """Each array as little-endian C-order bytes.  safetensors writes a
    non-contiguous array's memory as it lies (not its values); here it is
    copied into order first, so the file holds what the array holds."""
    import numpy

    if not isinstance(tensor_dict, Mapping):
        raise _error(ValueError, f"expected a dict of str to numpy.ndarray, not "
                                 f"{type(tensor_dict).__name__}")
    entries = {}
    for name, array in tensor_dict.items():
        if not isinstance(array, numpy.ndarray):
            raise _error(ValueError, f"tensor {name!r}: expected a numpy.ndarray, not "
                                     f"{type(array).__name__}")
        code = _CODES.get(array.dtype.name)
        if code is None:
            raise _error(TypeError, f"tensor {name!r}: numpy dtype {array.dtype} has no "
                                    "safetensors dtype")
        data = numpy.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<"))
        entries[name] = _save.Entry(code, list(array.shape), data.reshape(-1).view(numpy.uint8),
                                    data.nbytes)
    return entries


def save(tensor_dict: Mapping[str, Any], metadata: Optional[Mapping[str, str]] = None) -> bytes:
    """The safetensors file of ``tensor_dict`` as bytes, as safetensors.numpy.save."""
    return _save.save(_entries(tensor_dict), metadata, lambda entry: entry.data.tobytes())


def save_file(tensor_dict: Mapping[str, Any], filename: Union[str, os.PathLike],
              metadata: Optional[Mapping[str, str]] = None) -> None:
    """Writes ``tensor_dict`` to ``filename`` in safetensors' format, through libphoenix."""
    _save.save_file(_entries(tensor_dict), filename, metadata)


def load(data: bytes) -> Dict[str, Any]:
    """The tensors of a safetensors file's bytes, as writable numpy arrays."""
    return _save.load(data, "numpy")


__all__ = ["load", "load_file", "safe_open", "save", "save_file"]
