# SPDX-License-Identifier: MIT
"""The single-file checkpoint of issue 26 (48 BF16 tensors of 8192 x 8192,
48 F32 norms of 8192, one small F16 tensor: 6.44 GB), at any --scale of
its side (0.01: 82 x 82, a few hundred KB), written in the safetensors
format tensor by tensor, so that no more than one tensor is in memory."""

from __future__ import annotations

import json
import os
import pathlib
import struct

SINGLE_MODEL = "single-6.44GB"
SIDE = 8192
LAYERS = 48
DTYPE_SIZE = {"F16": 2, "BF16": 2, "F32": 4}


def single_file_tensors(scale: float = 1.0, half: str = "BF16") -> list[tuple[str, list[int], str]]:
    """@half: the weights' dtype (F16 for a numpy-only dry run: numpy has no BF16)."""
    side = max(1, round(SIDE * scale))
    out = []
    for i in range(LAYERS):
        out.append((f"layers.{i}.weight", [side, side], half))
        out.append((f"layers.{i}.norm", [side], "F32"))
    out.append(("embed.scale", [16, 16], "F16"))
    return out


def nbytes(shape, dtype) -> int:
    n = DTYPE_SIZE[dtype]
    for d in shape:
        n *= d
    return n


def _random_bytes(n: int, rng) -> bytes:
    return rng.bytes(n) if rng is not None else os.urandom(n)


def write(path: pathlib.Path, tensors, seed: int = 26) -> int:
    """Writes @tensors with random contents; returns the file's size.
    Tensors are laid out widest element first, so every one starts
    aligned to its element size with no gap (safetensors wants none)."""
    try:
        import numpy

        rng = numpy.random.default_rng(seed)
    except ImportError:
        rng = None
    order = sorted(tensors, key=lambda t: -DTYPE_SIZE[t[2]])
    head, offset = {"__metadata__": {"format": "pt", "generator": "phxrepro.checkpoint"}}, 0
    for name, shape, dt in order:
        size = nbytes(shape, dt)
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(head, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape, dt in order:
            left = nbytes(shape, dt)
            while left:
                piece = min(left, 64 << 20)
                f.write(_random_bytes(piece, rng))
                left -= piece
    os.replace(tmp, path)
    return path.stat().st_size


def single_file(folder: pathlib.Path, scale: float = 1.0, half: str = "BF16") -> pathlib.Path:
    """The single-file checkpoint in @folder (kept when already there at
    the same scale)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"model-scale{scale:g}-{half.lower()}.safetensors"
    want = sum(nbytes(s, d) for _, s, d in single_file_tensors(scale, half))
    if path.exists() and path.stat().st_size > want:
        return path
    write(path, single_file_tensors(scale, half))
    return path
