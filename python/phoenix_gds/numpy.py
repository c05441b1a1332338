# SPDX-License-Identifier: MIT
"""``phoenix_gds.numpy``: safetensors.numpy's calls on libphoenix.

    from phoenix_gds.numpy import load_file      # instead of safetensors.numpy
    arrays = load_file("model.safetensors")

``load_file(filename)`` returns ``{name: numpy.ndarray}`` as safetensors'
does: writable arrays in host memory.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Union

from ._safetensors import _safetensor_errors, safe_open


def load_file(filename: Union[str, os.PathLike]) -> Dict[str, Any]:
    """Every tensor of a .safetensors file (or a folder or index) as writable numpy arrays."""
    from . import Loader

    loader = Loader("cpu")
    with _safetensor_errors():
        return loader.load(filename, framework="numpy")


__all__ = ["load_file", "safe_open"]
