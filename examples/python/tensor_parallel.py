#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Loads one tensor-parallel rank's shard of every weight of a checkpoint,
reading only that shard's bytes, straight onto the rank's device.

A column-parallel linear layer (q/k/v/gate/up projections, [out, in]) keeps
a block of rows: one contiguous read.  A row-parallel one (o/down
projections) keeps a block of columns: one read per row, merged and issued
together.  Embeddings and the LM head split their vocabulary (rows); norms
and biases are replicated.

    examples/python/tensor_parallel.py /models/llama --rank 1 --world-size 2 --device cuda:1

--verify compares each shard with the same slice of the whole tensor.
Prints one JSON record: tensors, the bytes of the shards and of the whole
checkpoint, seconds.
"""

import argparse
import json
import os
import time

import phoenix_gds as phx

# Llama/Qwen names and OPT's.
COLUMN_PARALLEL = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj", "fc1", "embed_tokens",
                   "lm_head")
ROW_PARALLEL = ("o_proj", "down_proj", "out_proj", "fc2")

ELEMENT_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2,
                 "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}


def shard_index(name, shape, rank, world):
    """The index of this rank's shard of tensor @name, or None (replicated)."""
    if len(shape) != 2:
        return None
    dim = 0 if any(p in name for p in COLUMN_PARALLEL) else 1 if any(
        p in name for p in ROW_PARALLEL) else None
    if dim is None or shape[dim] % world != 0:
        return None
    part = shape[dim] // world
    cut = slice(rank * part, (rank + 1) * part)
    return (cut, slice(None)) if dim == 0 else (slice(None), cut)


def shard_files(path):
    if os.path.isdir(path):
        return sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    return [path]


def load_rank(files, rank, world, framework, device, opener=phx.safe_open, whole=False):
    """{name: this rank's shard}, the shards' bytes and the checkpoint's.
    opener: phoenix_gds.safe_open or anything with its calls (safetensors').
    whole: every tensor whole instead (what the shards are measured against)."""
    shards, shard_bytes, total_bytes = {}, 0, 0
    for file in files:
        with opener(file, framework=framework, device=device) as f:
            names = f.offset_keys() if hasattr(f, "offset_keys") else f.keys()
            for name in names:
                view = f.get_slice(name)
                shape = view.get_shape()
                size = ELEMENT_BYTES[view.get_dtype()]
                for extent in shape:
                    size *= extent
                total_bytes += size
                index = None if whole else shard_index(name, shape, rank, world)
                if index is None:
                    shards[name] = f.get_tensor(name)
                    shard_bytes += size
                else:
                    shards[name] = view[index]
                    shard_bytes += size // world
    return shards, shard_bytes, total_bytes


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a .safetensors file or a folder of them")
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--framework", default="pt", choices=["pt", "np"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--verify", action="store_true",
                        help="compare each shard with the same slice of the whole tensor")
    args = parser.parse_args()
    if not 0 <= args.rank < args.world_size:
        parser.error(f"--rank {args.rank} is not in [0, --world-size {args.world_size})")

    files = shard_files(args.checkpoint)
    start = time.perf_counter()
    shards, shard_bytes, total_bytes = load_rank(files, args.rank, args.world_size,
                                                 args.framework, args.device)
    seconds = time.perf_counter() - start
    if args.verify:
        for file in files:
            with phx.safe_open(file, framework=args.framework, device=args.device) as f:
                for name in f.keys():
                    whole = f.get_tensor(name)
                    index = shard_index(name, f.get_slice(name).get_shape(), args.rank,
                                        args.world_size)
                    expected = whole if index is None else whole[index]
                    got = shards[name]
                    same = (got == expected).all()
                    if not bool(same) or tuple(got.shape) != tuple(expected.shape):
                        raise SystemExit(f"tensor_parallel: {name}: the shard differs from the "
                                         "same slice of the whole tensor")
    print(json.dumps({"example": "tensor_parallel", "rank": args.rank,
                      "world_size": args.world_size, "tensors": len(shards),
                      "shard_bytes": shard_bytes, "checkpoint_bytes": total_bytes,
                      "seconds": round(seconds, 6), "verified": args.verify}))


if __name__ == "__main__":
    main()
