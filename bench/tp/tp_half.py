#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""A tensor-parallel half of a checkpoint against the whole of it, through
safe_open: phoenix_gds's and safetensors' own, side by side in one run.

    bench/tp/tp_half.py run CHECKPOINT_DIR --out results.jsonl [--rounds 3] [--caches warm,cold]

Each call runs in a fresh process with CUDA and the libraries already up:
the clock covers what a user's code does, from safe_open to every tensor
(or rank 0's shard of it, world size 2, examples/python/tensor_parallel.py)
on the GPU.  Cold rounds drop the files from the page cache first
(fsync, posix_fadvise DONTNEED) and record the fraction mincore still finds
resident (bench/phxrepro/peers/pagecache).
The order of the calls rotates each round.  Each record is one JSON line;
the last ones are the summary (medians, half over whole in bytes and in
time per method and cache) and a check that every shard equals the same
slice that safetensors reads.
"""

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from phxrepro.peers import pagecache  # noqa: E402
from phxrepro.records import source_rev  # noqa: E402
METHODS = {"phoenix": ("whole", "half"), "safetensors": ("whole", "half"), "phoenix-loader": ("whole",)}


def example():
    spec = importlib.util.spec_from_file_location(
        "tensor_parallel", ROOT / "examples" / "python" / "tensor_parallel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def files_of(folder):
    return sorted(str(p) for p in pathlib.Path(folder).glob("*.safetensors"))


def storage_read_bytes():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return -1


def worker(args):
    import torch

    torch.empty(1, device=args.device)  # CUDA up before the clock
    tp = example()
    files = files_of(args.checkpoint)
    if args.method == "safetensors":
        from safetensors import safe_open as opener
    else:
        import phoenix_gds

        opener = phoenix_gds.safe_open
    before = storage_read_bytes()
    start = time.perf_counter()
    if args.method == "phoenix-loader":
        from phoenix_gds.torch import load_file

        tensors = {}
        for path in files:
            tensors.update(load_file(path, device=args.device))
        shard_bytes = total = sum(t.numel() * t.element_size() for t in tensors.values())
    else:
        tensors, shard_bytes, total = tp.load_rank(files, 0, 2, "pt", args.device, opener=opener,
                                                   whole=args.part == "whole")
    if args.device != "cpu":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "shard_bytes": shard_bytes, "checkpoint_bytes": total,
                      "tensors": len(tensors),
                      "storage_read_bytes": storage_read_bytes() - before}))


def verify(args):
    """Every phoenix shard (and whole tensor) equals safetensors' same read."""
    import torch
    from safetensors import safe_open as theirs

    import phoenix_gds

    tp = example()
    checked = 0
    for path in files_of(args.checkpoint):
        for whole in (False, True):
            ours, _, _ = tp.load_rank([path], 0, 2, "pt", args.device,
                                      opener=phoenix_gds.safe_open, whole=whole)
            ref, _, _ = tp.load_rank([path], 0, 2, "pt", args.device, opener=theirs, whole=whole)
            for name, tensor in ours.items():
                other = ref[name]
                if tensor.dtype != other.dtype or tensor.shape != other.shape or not torch.equal(
                        tensor.contiguous().reshape(-1).view(torch.uint8),
                        other.contiguous().reshape(-1).view(torch.uint8)):
                    print(json.dumps({"verified": False, "tensor": name, "file": path}))
                    return 1
                checked += 1
            del ours, ref
    print(json.dumps({"verified": True, "tensors_checked": checked}))
    return 0


def write_manifest(args, files):
    versions = {}
    for name in ("torch", "safetensors", "numpy"):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.split("\n") if args.device != "cpu" else []
    manifest = {
        "schema": "phx-tp-half/1",
        "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git": source_rev(ROOT),
        "command": " ".join([pathlib.Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": {"kernel": os.uname().release, "cpus": os.cpu_count(),
                    "gpus": [g for g in gpus if g.strip()]},
        "checkpoint": {"files": [os.path.basename(f) for f in files],
                       "bytes": sum(os.path.getsize(f) for f in files)},
        "versions": versions,
        "rounds": args.rounds, "caches": args.caches, "device": args.device,
    }
    with open(pathlib.Path(args.out).with_name("manifest.json"), "w") as f:
        json.dump(manifest, f, indent=2)


def run(args):
    files = files_of(args.checkpoint)
    calls = [(m, p) for m, parts in METHODS.items() for p in parts]
    write_manifest(args, files)
    out = open(args.out, "a")

    def emit(record):
        line = json.dumps(record)
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()

    rows = []
    for cache in args.caches.split(","):
        if cache == "warm":
            pagecache.prime(files)  # in the page cache before the first warm call
        for rnd in range(args.rounds):
            k = rnd % len(calls)
            for method, part in calls[k:] + calls[:k]:
                if cache == "cold":
                    resident = pagecache.evict(files, drop_caches=False)["resident_after_evict"]
                else:
                    resident = pagecache.resident_fraction(files)
                proc = subprocess.run(
                    [sys.executable, __file__, "worker", args.checkpoint, "--method", method,
                     "--part", part, "--device", args.device],
                    capture_output=True, text=True, timeout=args.call_timeout)
                record = {"bench": "tp_half", "method": method, "part": part, "cache": cache,
                          "round": rnd, "resident_fraction_before": resident}
                if proc.returncode != 0:
                    record.update(status="error", error=proc.stderr[-600:])
                else:
                    result = json.loads(proc.stdout.strip().splitlines()[-1])
                    record.update(result, status="ok",
                                  gbps=result["shard_bytes"] / result["seconds"] / 1e9)
                emit(record)
                rows.append(record)
    for cache in args.caches.split(","):
        for method, parts in METHODS.items():
            med = {}
            for part in parts:
                ok = [r for r in rows if r["method"] == method and r["part"] == part and
                      r["cache"] == cache and r["status"] == "ok"]
                if ok:
                    med[part] = {"seconds": statistics.median(r["seconds"] for r in ok),
                                 "shard_bytes": ok[0]["shard_bytes"],
                                 "storage_read_bytes": statistics.median(
                                     r["storage_read_bytes"] for r in ok),
                                 "rounds": len(ok)}
            summary = {"bench": "tp_half", "kind": "summary", "method": method, "cache": cache,
                       **{f"{part}": v for part, v in med.items()}}
            if "whole" in med and "half" in med:
                summary["half_over_whole_bytes"] = med["half"]["shard_bytes"] / med["whole"]["shard_bytes"]
                summary["half_over_whole_seconds"] = med["half"]["seconds"] / med["whole"]["seconds"]
                if cache == "cold" and med["whole"]["storage_read_bytes"] > 0:
                    summary["half_over_whole_storage_bytes"] = (
                        med["half"]["storage_read_bytes"] / med["whole"]["storage_read_bytes"])
            emit(summary)
    proc = subprocess.run([sys.executable, __file__, "verify", args.checkpoint,
                           "--device", args.device], capture_output=True, text=True,
                          timeout=args.call_timeout * 4)
    tail = proc.stdout.strip().splitlines()[-1:] or ["{}"]
    result = json.loads(tail[0]) if tail[0].startswith("{") else {"error": proc.stderr[-600:]}
    emit({"bench": "tp_half", "kind": "verify", **result})
    out.close()
    return 0 if result.get("verified") else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["run", "worker", "verify"])
    parser.add_argument("checkpoint")
    parser.add_argument("--out", default="tp_half.jsonl")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--caches", default="warm,cold")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--method", choices=list(METHODS))
    parser.add_argument("--part", choices=["whole", "half"])
    parser.add_argument("--call-timeout", type=int, default=120)
    args = parser.parse_args()
    if args.command == "worker":
        return worker(args)
    if args.command == "verify":
        return verify(args)
    return run(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
