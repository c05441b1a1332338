# SPDX-License-Identifier: MIT
"""``phoenix_gds.torch``: safetensors.torch's calls on libphoenix.

    from phoenix_gds.torch import load_file      # instead of safetensors.torch
    weights = load_file("model.safetensors", device="cuda:0")

``load_file(filename, device="cpu")`` returns ``{name: torch.Tensor}`` as
safetensors' does, read by the loader straight onto the device.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Union

from ._safetensors import _safetensor_errors, safe_open


def load_file(filename: Union[str, os.PathLike], device: Any = "cpu") -> Dict[str, Any]:
    """Every tensor of a .safetensors file (or a folder or index) as torch tensors on ``device``.

    device: "cpu", "cuda", "cuda:N", an integer N or a torch.device."""
    from . import Loader
    from ._safetensors import _device_text

    loader = Loader(_device_text(device))
    with _safetensor_errors():
        return loader.load(filename, framework="torch")


__all__ = ["load_file", "safe_open"]
