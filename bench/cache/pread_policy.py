#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One thread reading a file into a GPU buffer, the page cache warm or
cold: phoenix_gds.File's default (the cache policy), its forced modes,
kvikio's compat mode, kvikio through Phoenix's libcufile, and the loader
at the largest size, side by side in one run.

    bench/cache/pread_policy.py run --shim BUILD/lib/cufile_shim/libcufile.so.0 \\
        --out OUT/pread_policy.jsonl [--rounds 3] [--caches warm,cold]

Every (configuration, cache, round) runs in a fresh process with CUDA
already up, the configurations in an order rotated each round.  Per size
two rows: "first" opens a fresh object and reads once (what a user's first
call costs, setup included); "steady" is the median of later reads on that
object at other offsets (--reps of them, up to 25 for sizes under 4 MiB).  Cold reads first drop the file from the page
cache (fsync, posix_fadvise DONTNEED) and record the fraction mincore
still finds resident, which must be 0.  One read per size is checked byte
for byte against os.pread.  The last records are the summary: medians per
configuration, cache, size and row, and the ratios issue 38 names.
"""

import argparse
import json
import os
import pathlib
import statistics
import struct
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from phxrepro.experiments.cufile_costs import kvikio_env, rotated  # noqa: E402
from phxrepro.peers import pagecache  # noqa: E402
from phxrepro.records import add_round_arguments, goal_ratio  # noqa: E402
from phxrepro.records import manifest_header, run_worker  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = [64 * KiB, MiB, 4 * MiB, 16 * MiB, 256 * MiB]
CONFIGS = ["phoenix-auto", "phoenix-buffered", "phoenix-direct", "kvikio-compat", "kvikio-shim",
           "kvikio-shim-nospin", "phoenix-loader"]
# The copy threads' polling (PHX_COPY_SPIN_US) turned off: what it buys the
# shim, warm, where per-call latency is all there is.
WARM_ONLY = {"kvikio-shim-nospin"}
DATA_BYTES = GiB
LOADER_BYTES = 256 * MiB
PAGE = 4096


def write_safetensors(path, nbytes, seed):
    """One uint8 tensor "blob" of @nbytes seeded bytes: a file both the raw
    readers and the loader can read."""
    header = json.dumps({"blob": {"dtype": "U8", "shape": [nbytes],
                                  "data_offsets": [0, nbytes]}}).encode()
    header += b" " * (-(8 + len(header)) % PAGE)  # data page-aligned
    import numpy

    rng = numpy.random.default_rng(seed)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        for _ in range(0, nbytes, 64 * MiB):
            f.write(rng.integers(0, 256, min(64 * MiB, nbytes), dtype=numpy.uint8).tobytes())
        f.flush()
        os.fsync(f.fileno())


def offsets(size, length, count):
    """Page-aligned offsets spread over the file, each leaving room for @size."""
    room = max(0, length - size) // PAGE
    return [((i * 7919) % (room + 1)) * PAGE for i in range(count)]


class Reader:
    """What a user writes for one configuration: open(), read(buf, size, offset)."""

    def __init__(self, config, path):
        self.config, self.path, self.handle = config, path, None

    def open(self):
        if self.config.startswith("kvikio"):
            import kvikio

            self.handle = kvikio.CuFile(self.path, "r")
        elif self.config != "phoenix-loader":
            import phoenix_gds

            direct = {"phoenix-auto": "auto", "phoenix-buffered": "off",
                      "phoenix-direct": "preferred"}[self.config]
            self.handle = phoenix_gds.File(self.path, direct=direct)

    def read(self, buf, size, offset):
        if self.config.startswith("kvikio"):
            return self.handle.pread(buf, size, offset).get()
        if self.config == "phoenix-loader":
            from phoenix_gds.torch import load_file

            tensors = load_file(self.path, device="cuda:0")
            self.last = tensors["blob"]
            return self.last.numel()
        return self.handle.pread(buf, size, offset)

    def close(self):
        if self.handle is not None:
            self.handle.close()


def reps_for(size, reps):
    """Steady reads per size: more of the small ones, whose single reads
    spread most and cost least."""
    return max(reps, min(25, (16 * MiB) // size))


def evict(path):
    """Drops @path from the page cache; the fraction still resident.  Pages
    under the previous read's asynchronous readahead cannot be dropped
    until it lands (one kvikio read found 8 MiB of them), so it tries a
    few times."""
    for _ in range(20):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        resident = pagecache.resident_fraction([path])
        if not resident:
            return resident
        time.sleep(0.005)
    return resident


def worker(job):
    import torch

    torch.empty(1, device="cuda")  # CUDA up before the clock
    path, cache, config = job["path"], job["cache"], job["config"]
    length = os.path.getsize(path)
    base = {"kind": "read", "config": config, "cache": cache, "round": job["round"]}
    if cache == "warm":
        pagecache.prime([path])
    fd = os.open(path, os.O_RDONLY)
    for size in job["sizes"]:
        rec = {**base, "size": size}
        try:
            buf = torch.empty(size, dtype=torch.uint8, device="cuda")
            reps = reps_for(size, job["reps"])
            spots = offsets(size, length, reps + 2)
            resident = []

            def timed(reader, offset):
                if cache == "cold":
                    resident.append(evict(path))
                start = time.perf_counter()
                n = reader.read(buf, size, offset)
                torch.cuda.synchronize()
                seconds = time.perf_counter() - start
                if n != size:
                    raise RuntimeError(f"read returned {n} of {size} bytes at {offset}")
                return seconds

            reader = Reader(config, path)
            if cache == "cold":
                resident.append(evict(path))
            start = time.perf_counter()
            reader.open()
            n = reader.read(buf, size, spots[0])
            torch.cuda.synchronize()
            first = time.perf_counter() - start
            if n != size:
                raise RuntimeError(f"first read returned {n} of {size} bytes")
            steady = [timed(reader, off) for off in spots[1:reps + 1]]
            # The check: poisoned memory, one read, the host's own read.
            off = spots[-1]
            if config == "phoenix-loader":
                reader.read(buf, size, off)
                got, off = reader.last.cpu(), length - size  # the tensor's bytes end the file
            else:
                buf.fill_(0xA5)
                reader.read(buf, size, off)
                got = buf.cpu()
            torch.cuda.synchronize()
            want = torch.frombuffer(bytearray(os.pread(fd, size, off)), dtype=torch.uint8)
            verified = bool(torch.equal(got, want))
            reader.close()
            rec.update({"status": "ok" if verified else "failed", "verified": verified,
                        "first_seconds": first, "steady_seconds": statistics.median(steady),
                        "first_gbps": size / first / 1e9,
                        "steady_gbps": size / statistics.median(steady) / 1e9,
                        "reps": len(steady),
                        "resident_before_max": max(resident) if resident else None})
            del got, want
        except Exception as exc:  # noqa: BLE001  (one size failing is a record)
            rec.update({"status": "error", "error": repr(exc)[:800]})
        print(json.dumps(rec), flush=True)
    os.close(fd)


def summarise(records):
    out = []
    medians = {}
    ok = [r for r in records if r.get("kind") == "read" and r.get("status") == "ok"]
    for key in sorted({(r["config"], r["cache"], r["size"]) for r in ok}):
        rows = [r for r in ok if (r["config"], r["cache"], r["size"]) == key]
        for row in ("first", "steady"):
            gbps = statistics.median(r[f"{row}_gbps"] for r in rows)
            medians[(*key, row)] = gbps
            out.append({"kind": "summary", "config": key[0], "cache": key[1], "size": key[2],
                        "row": row, "gbps": gbps, "rounds": len(rows),
                        "resident_before_max": max((r["resident_before_max"] or 0) for r in rows)})

    def ratio(goal, a, b, at_least):
        if rec := goal_ratio(goal, medians, a, b, at_least):
            out.append(rec)

    sizes = sorted({k[2] for k in medians})
    for size in sizes:
        for row in ("first", "steady"):
            ratio("warm: File at least 1.5x kvikio compat", ("phoenix-auto", "warm", size, row),
                  ("kvikio-compat", "warm", size, row), 1.5)
            ratio("cold: File at least 1x kvikio compat", ("phoenix-auto", "cold", size, row),
                  ("kvikio-compat", "cold", size, row), 1.0)
            if size >= MiB:
                ratio("warm: kvikio through the shim at least 0.9x File",
                      ("kvikio-shim", "warm", size, row), ("phoenix-auto", "warm", size, row), 0.9)
            else:
                ratio("warm: kvikio through the shim at least 1x kvikio compat",
                      ("kvikio-shim", "warm", size, row), ("kvikio-compat", "warm", size, row), 1.0)
    big = max(sizes) if sizes else 0
    for row in ("first", "steady"):
        ratio("warm: File at least 0.9x the loader", ("phoenix-auto", "warm", big, row),
              ("phoenix-loader", "warm", big, row), 0.9)
    return out




def run(args):
    scratch = pathlib.Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    data, loader = scratch / "data.safetensors", scratch / "loader.safetensors"
    if not data.exists():
        write_safetensors(data, DATA_BYTES, 1)
    if not loader.exists():
        write_safetensors(loader, LOADER_BYTES, 2)
    out = pathlib.Path(args.out)
    manifest = {**manifest_header("phx-pread-policy/1", ROOT, ("torch", "kvikio-cu13", "numpy")),
                "files": {"data": DATA_BYTES, "loader": LOADER_BYTES},
                "rounds": args.rounds, "caches": args.caches, "sizes": args.sizes,
                "reps": args.reps, "configs": args.configs}
    out.with_name("manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    records = []
    deadline = time.monotonic() + args.budget_s
    with open(out, "w") as sink:
        for rnd in range(args.rounds):
            for cache in args.caches.split(","):
                for config in rotated(args.configs.split(","), rnd):
                    if time.monotonic() > deadline:
                        break
                    if config in WARM_ONLY and cache != "warm":
                        continue
                    is_loader = config == "phoenix-loader"
                    job = {"config": config, "cache": cache, "round": rnd,
                           "path": str(loader if is_loader else data),
                           "sizes": [LOADER_BYTES] if is_loader else args.sizes,
                           "reps": args.reps}
                    env = dict(os.environ)
                    if config.startswith("kvikio"):
                        env = kvikio_env(env, "compat" if config == "kvikio-compat" else "shim",
                                         args.shim)
                    if config == "kvikio-shim-nospin":
                        env["PHX_COPY_SPIN_US"] = "0"
                    for rec in run_worker(__file__, job, kind="read", env=env,
                                          timeout_s=args.job_timeout_s):
                        records.append(rec)
                        sink.write(json.dumps(rec) + "\n")
                        sink.flush()
        for rec in summarise(records):
            sink.write(json.dumps(rec) + "\n")
            if rec["kind"] == "ratio":
                print(json.dumps(rec))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--shim", required=True, help="Phoenix's libcufile.so.0")
    r.add_argument("--scratch", default=os.path.join(os.environ.get("TMPDIR", "/var/tmp"),
                                                      "phx-cache"))
    r.add_argument("--configs", default=",".join(CONFIGS))
    r.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=SIZES)
    r.add_argument("--reps", type=int, default=3)
    add_round_arguments(r)
    w = sub.add_parser("worker")
    w.add_argument("job")
    args = parser.parse_args()
    if args.command == "worker":
        return worker(json.loads(args.job)) or 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
