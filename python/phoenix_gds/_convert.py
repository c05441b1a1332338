# SPDX-License-Identifier: MIT
"""From phoenix_gds.Tensor (DLPack) to the frameworks' own types, and the
names users give frameworks and dtypes."""

from __future__ import annotations

import errno
from typing import Any, Optional, Sequence, Tuple

from ._phoenix import ArgumentError, Tensor

# safetensors dtype -> torch dtype attribute (torch's names are safetensors'
# own in its torch module).  F6_E2M3 and F6_E3M2 have none.
TORCH_DTYPES = {
    "BOOL": "bool", "F4": "float4_e2m1fn_x2", "U8": "uint8", "I8": "int8",
    "F8_E5M2": "float8_e5m2", "F8_E4M3": "float8_e4m3fn", "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz", "I16": "int16",
    "U16": "uint16", "F16": "float16", "BF16": "bfloat16", "I32": "int32", "U32": "uint32",
    "F32": "float32", "C64": "complex64", "F64": "float64", "I64": "int64", "U64": "uint64",
}
NUMPY_DTYPES = {
    "BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16",
    "F16": "float16", "I32": "int32", "U32": "uint32", "F32": "float32", "C64": "complex64",
    "F64": "float64", "I64": "int64", "U64": "uint64",
}
# The dtypes whose DLPack codes torch may not take (older versions, or any
# version for the 8-bit and packed floats): loaded as bytes and viewed.
_TORCH_BYTE_VIEWS = {"BOOL", "F4", "F8_E5M2", "F8_E4M3", "F8_E8M0", "F8_E4M3FNUZ",
                     "F8_E5M2FNUZ", "C64"}

# What users write -> the name this package uses.  "pt" and "np" are
# safetensors' names.
_FRAMEWORKS = {"torch": "torch", "pt": "torch", "numpy": "numpy", "np": "numpy",
               "cupy": "cupy", "jax": "jax", "flax": "jax"}


def framework_name(framework: Optional[str], allow_none: bool = True) -> Optional[str]:
    """"torch", "numpy", "cupy", "jax" (or None): ArgumentError for anything else."""
    if framework is None and allow_none:
        return None
    name = _FRAMEWORKS.get(framework) if isinstance(framework, str) else None
    if name is None:
        expected = "'pt' (torch), 'np' (numpy), 'cupy' or 'jax'"
        raise ArgumentError(errno.EINVAL, f"framework {framework!r}: expected "
                                          f"{'None, ' if allow_none else ''}{expected}")
    return name


def numpy_dtype(dtype: str, name: str) -> Any:
    import numpy

    if dtype not in NUMPY_DTYPES:
        raise TypeError(
            f"tensor {name!r} is {dtype}, which numpy lacks; use framework='pt', or "
            "framework=None and numpy.from_dlpack(t.as_bytes()) for its bytes")
    return numpy.dtype(NUMPY_DTYPES[dtype])


def torch_shape(dtype: str, shape: Sequence[int], name: str) -> Tuple[int, ...]:
    """The shape of a torch tensor of ``shape`` elements of ``dtype``: F4's
    torch dtype holds two elements, so its last dimension is halved, and
    must be even (safetensors refuses the others alike)."""
    if dtype != "F4":
        return tuple(shape)
    if not shape or shape[-1] % 2:
        raise ValueError(f"tensor {name!r} is F4 of shape {list(shape)}: torch's "
                         "float4_e2m1fn_x2 holds two, so the last dimension must be even")
    return (*shape[:-1], shape[-1] // 2)


def torch_dtype(dtype: str, name: str) -> Any:
    """torch's dtype for ``dtype``; TypeError where this torch has none."""
    import torch

    found = getattr(torch, TORCH_DTYPES.get(dtype, ""), None)
    if found is None:
        raise TypeError(f"tensor {name!r} is {dtype}, which torch {torch.__version__} lacks; "
                        "framework=None and t.as_bytes() give its bytes")
    return found


def tensor_array(tensor: Tensor, dtype: Any = None, copy: Optional[bool] = None) -> Any:
    """numpy's ``__array__`` for a CPU Tensor: a writable view of its memory
    (a copy with ``copy=True`` or another ``dtype``)."""
    import numpy

    if tensor.device != "cpu":
        raise TypeError(f"tensor {tensor.name!r} is on {tensor.device}: numpy takes host memory "
                        "only (load it with device='cpu', or copy it with its framework)")
    view = numpy.frombuffer(tensor._host_bytes(), dtype=numpy.uint8)
    array = view.view(numpy_dtype(tensor.dtype, tensor.name)).reshape(tensor.shape)
    if dtype is not None and numpy.dtype(dtype) != array.dtype:
        if copy is False:
            raise ValueError(f"tensor {tensor.name!r}: dtype {dtype} needs a copy, and copy=False")
        return array.astype(dtype)
    return array.copy() if copy else array


def to_torch(tensor: Tensor) -> Any:
    import torch

    if tensor.dtype not in _TORCH_BYTE_VIEWS:
        return torch.from_dlpack(tensor)
    raw = torch.from_dlpack(tensor.as_bytes())
    return raw.view(torch_dtype(tensor.dtype, tensor.name)).reshape(
        torch_shape(tensor.dtype, tensor.shape, tensor.name))


def to_numpy(tensor: Tensor) -> Any:
    return tensor_array(tensor)


def convert(tensors: dict, framework: Optional[str]) -> dict:
    """{name: Tensor} in ``framework``'s type (None: as they are)."""
    name = framework_name(framework)
    if name is None:
        return tensors
    if name == "torch":
        return {k: to_torch(t) for k, t in tensors.items()}
    if name == "numpy":
        return {k: to_numpy(t) for k, t in tensors.items()}
    if name == "cupy":
        import cupy

        return {k: cupy.from_dlpack(t) for k, t in tensors.items()}
    import jax.numpy as jnp

    return {k: jnp.from_dlpack(t) for k, t in tensors.items()}
