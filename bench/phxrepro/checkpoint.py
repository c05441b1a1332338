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


# Llama-3-8B's shapes (hidden 4096, MLP 14336, 8 KV heads of 128, vocabulary
# 128256); 16 layers in BF16 are 9.08 GB, the checkpoint of issue 52.
LLAMA_HIDDEN, LLAMA_MLP, LLAMA_KV, LLAMA_VOCAB = 4096, 14336, 1024, 128256


def llama_tensors(layers: int = 16, scale: float = 1.0,
                  half: str = "BF16") -> list[tuple[str, list[int], str]]:
    """Llama-3-8B's tensors with @layers layers, every side times @scale."""
    def side(n):
        return max(1, round(n * scale))

    h, m, kv, v = side(LLAMA_HIDDEN), side(LLAMA_MLP), side(LLAMA_KV), side(LLAMA_VOCAB)
    out = [("model.embed_tokens.weight", [v, h], half)]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", [h, h], half),
                (p + "self_attn.k_proj.weight", [kv, h], half),
                (p + "self_attn.v_proj.weight", [kv, h], half),
                (p + "self_attn.o_proj.weight", [h, h], half),
                (p + "mlp.gate_proj.weight", [m, h], half),
                (p + "mlp.up_proj.weight", [m, h], half),
                (p + "mlp.down_proj.weight", [h, m], half),
                (p + "input_layernorm.weight", [h], half),
                (p + "post_attention_layernorm.weight", [h], half)]
    out += [("model.norm.weight", [h], half), ("lm_head.weight", [v, h], half)]
    return out


def llama_shards(folder: pathlib.Path, layers: int = 16, shards: int = 4, scale: float = 1.0,
                 half: str = "BF16") -> list[pathlib.Path]:
    """The Llama-shaped checkpoint in @shards files of about equal size in
    @folder, tensors in model order (kept when already there)."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors = llama_tensors(layers, scale, half)
    total = sum(nbytes(s, d) for _, s, d in tensors)
    per_shard = -(-total // shards)
    groups, current, size = [], [], 0
    for t in tensors:
        current.append(t)
        size += nbytes(t[1], t[2])
        if size >= per_shard:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    paths = []
    for i, group in enumerate(groups):
        path = folder / f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        want = sum(nbytes(s, d) for _, s, d in group)
        if not (path.exists() and path.stat().st_size > want):
            write(path, group, seed=52 + i)
        paths.append(path)
    return paths
