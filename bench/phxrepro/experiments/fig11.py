# SPDX-License-Identifier: MIT
"""Fig 11: KV-cache block loading.  Four real traces of paged KV-cache
block reads (bench/data/kvcache-traces) replayed by phx-kvcache into a
paged pool with block sizes of 8, 16 and 64 KiB, every block verified.
Next to the engines asked for, the same access pattern read into pinned
host memory ("pinned", the ceiling a GPU engine can approach) runs in the
same call, so each (trace, block size) yields the goal's two ratios:
compat / posix (a per-block pread + cudaMemcpy loop) and compat / pinned.

The disks of the machines we measure on are noisy over the second or so a
replay takes, and an engine run right after another may find the storage
in a different state: on a real machine every engine runs ROUNDS times,
the round's order rotated, and ratios and plots take each engine's median
round.

A peer row, asked for by name (--engines ...,kvikio; never by default, never
in the rig, whose guest has no kvikio): the same traces replayed by
phxrepro.peers.kv_replay, phx-kvcache's replay with the blocks read by
kvikio (in its compat mode, KVIKIO_COMPAT_MODE=ON: NVIDIA's cuFile cannot
register files on the machines we measure on) into GPU memory, from the
KV file phx-kvcache wrote, in the same rotated rounds.  The goal then
also asks compat >= kvikio."""

from __future__ import annotations

import json
import os
import pathlib
import sys

from ..plotting import color, figure, save
from ..records import measured

NAME = "fig11"
TITLE = "KV-cache block loading: bandwidth and per-sequence latency (paper Fig 11)"

TRACES = ("paper_assit.txt", "gsm100.txt", "quality.txt", "sharegpt-sample-200.txt")
BLOCK_SIZES = (8 << 10, 16 << 10, 64 << 10)
# --quick: the first sequences of the smallest trace.
QUICK_TRACE = "quality.txt"
QUICK_SEQUENCES = 4
# The engines phx-kvcache knows, in plotting order; "pinned" is the ceiling.
KV_ENGINES = ("direct", "compat", "cufile", "posix", "host")
GPU_ENGINES = {"direct", "compat", "cufile", "posix"}
# Peers that replay the same trace from the same KV file with another
# library, through phxrepro.peers.kv_replay; only when asked for by name.
PEER_ENGINES = ("kvikio",)
BENCH = pathlib.Path(__file__).resolve().parents[2]
# Where the rig's guest finds the traces (bench/phxrepro/rig.py copies
# GUEST_FILES into the guest folder, mounted at /phx).
GUEST_TRACES = "/phx/kvcache-traces"
# Rounds per (trace, block size, engine) on real hardware (PHX_FIG11_ROUNDS);
# one in quick runs and in the rig, whose timing is emulated anyway.
ROUNDS = 3
# The rig's device 0 BAR is 256 MiB; the pool starts at --device-addr, so leave room.
RIG_POOL_BYTES = 192 << 20


def traces_dir() -> pathlib.Path:
    env = os.environ.get("PHX_KVCACHE_TRACES")
    if env:
        return pathlib.Path(env)
    # A copy travels with the repository (bench/data/kvcache-traces).
    return pathlib.Path(__file__).resolve().parents[2] / "data" / "kvcache-traces"


def guest_files() -> dict:
    """Files the rig's guest needs: relative guest path -> host path."""
    return {f"kvcache-traces/{t}": traces_dir() / t for t in TRACES}


GUEST_FILES = guest_files()


def trace_shape(path: pathlib.Path, max_sequences: int = 0) -> tuple[int, int]:
    """(largest block id, blocks of the longest sequence) of the first
    max_sequences sequences (0: all)."""
    largest, longest, seqs, blocks = 0, 0, 0, 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("Seq"):
                longest = max(longest, blocks)
                seqs, blocks = seqs + 1, 0
                if max_sequences and seqs > max_sequences:
                    break
            elif line.startswith("Round") and "[" in line:
                ids = [int(x) for x in line[line.index("[") + 1:line.index("]")].split(",")
                       if x.strip()]
                largest = max([largest, *ids])
                blocks += len(ids)
    return largest, max(longest, blocks)


def plan(ctx):
    """(trace, max_sequences) pairs, block sizes, engines for phx-kvcache."""
    if ctx.quick:
        runs = [(QUICK_TRACE, QUICK_SEQUENCES)]
    else:
        runs = [(t, 0) for t in TRACES]
    engines = [e for e in KV_ENGINES if ctx.wants(e)]
    local = ctx.mode == "local"
    peers = [e for e in PEER_ENGINES if ctx.wants(e) and local]
    if (GPU_ENGINES & set(engines) or peers) and local:
        engines.append("pinned")  # the ceiling, for the goal's second ratio
    return runs, list(BLOCK_SIZES), engines + peers


def run(ctx) -> list[dict]:
    runs, sizes, engines = plan(ctx)
    if not engines:
        return []
    local = ctx.mode == "local"
    host_dir = traces_dir()
    trace_dir = str(host_dir) if local else GUEST_TRACES
    shapes = {t: trace_shape(host_dir / t, n) for t, n in runs}
    need = max((largest + 1) * max(sizes) for largest, _ in shapes.values())
    path = ctx.scratch_file("fig11-kv.bin")
    rounds = rounds_for(ctx)
    # A peer reads the file but never writes it: with a peer in the run it
    # is written here even for a single round.
    if rounds > 1 or set(PEER_ENGINES) & set(engines):
        # The KV file is written (and fsynced) by the first call that needs
        # it; a timed replay right behind that write found the H200's disk
        # slower (gsm100, 8 KiB: 1.07 GB/s in that round, 1.26 and 1.87 in
        # the two later ones).  One untimed call writes it beforehand.
        trace, _ = runs[0]
        ctx.run_json([ctx.tool("phx-kvcache"), "--trace", f"{trace_dir}/{trace}",
                      "--block-size", str(max(sizes)), "--engine", "host", "--file", path,
                      "--min-file-size", str(need), "--max-sequences", "1"], timeout=900)
    records = []
    for trace, max_seq in runs:
        for size in sizes:
            unavailable = set()
            for k in range(rounds):
                # Engines one call each: an unavailable engine (exit 2) keeps
                # the others' records, and each engine's pool is freed before
                # the next one allocates.  Each round starts one engine later.
                for engine in engines[k % len(engines):] + engines[:k % len(engines)]:
                    if engine in unavailable:
                        continue
                    meta = {"point": f"{trace}/{size}", "kv_engine": engine, "round": k}
                    if engine in PEER_ENGINES:
                        got = run_peer(ctx, engine, f"{trace_dir}/{trace}", path, size, max_seq,
                                       need, meta)
                        if any(r.get("status") == "unavailable" for r in got):
                            unavailable.add(engine)
                        records += got
                        continue
                    cmd = [ctx.tool("phx-kvcache"), "--trace", f"{trace_dir}/{trace}",
                           "--block-size", str(size), "--engine", engine, "--verify",
                           "--file", path, "--min-file-size", str(need),
                           "--max-sequences", str(max_seq),
                           *pool_args(ctx, engine, shapes[trace][1], size)]
                    got = ctx.run_json(cmd, timeout=900, meta=meta)
                    if any(r.get("status") == "unavailable" for r in got):
                        unavailable.add(engine)
                    records += got
    return records + ratios(records)


def run_peer(ctx, engine: str, trace: str, path: str, size: int, max_seq: int, need: int,
             meta: dict) -> list[dict]:
    """One replay by a peer (kv_replay) in a process of its own, whose
    environment chooses kvikio's mode before libkvikio loads."""
    if not os.path.exists(path) or os.path.getsize(path) < need:
        # phx-kvcache writes the file before the rounds (run()); a missing
        # one means that call did not: say so rather than read nothing.
        return [{**meta, "engine": engine, "trace": os.path.basename(trace), "block_size": size,
                 "status": "failed",
                 "error": f"the KV file {path} is missing or shorter than {need} bytes"}]
    job = {"trace": trace, "file": path, "block_size": size, "max_sequences": max_seq,
           "verify": True}
    pythonpath = os.pathsep.join(filter(None, [str(BENCH), os.environ.get("PYTHONPATH")]))
    # env(1) sets the variables for the child only, in a command ctx.run_json
    # runs (and records) like any tool's.
    cmd = ["env", "KVIKIO_COMPAT_MODE=ON", f"PYTHONPATH={pythonpath}", sys.executable,
           "-m", "phxrepro.peers.kv_replay", json.dumps(job)]
    got = ctx.run_json(cmd, timeout=900, meta=meta)
    for r in got:
        if r.get("status") != "ok":
            ctx.log(f"{engine} {meta['point']} round {meta['round']}: {r.get('status')} "
                    f"{r.get('reason') or r.get('error') or r.get('first_mismatch', '')}")
    return got


def rounds_for(ctx) -> int:
    if ctx.quick or ctx.mode != "local":
        return 1
    return max(1, int(os.environ.get("PHX_FIG11_ROUNDS", ROUNDS)))


def medians(records: list[dict]) -> list[dict]:
    """Per (trace, block size, engine), the round with the median bandwidth
    (the lower middle one for an even count), with every round's figure in
    "rounds_GBps"."""
    ok = [r for r in measured(records) if r.get("status") == "ok" and "bandwidth_GBps" in r]
    groups: dict = {}
    for r in ok:
        groups.setdefault((r["trace"], r["block_size"], r["engine"]), []).append(r)
    out = []
    for key in sorted(groups):
        runs = sorted(groups[key], key=lambda r: r["bandwidth_GBps"])
        mid = dict(runs[(len(runs) - 1) // 2])
        mid["rounds_GBps"] = [r["bandwidth_GBps"] for r in runs]
        mid["verified"] = all(r.get("verified") is True for r in runs)
        out.append(mid)
    return out


def pool_args(ctx, engine: str, longest: int, size: int) -> list[str]:
    """In the rig the phoenix pool is a BAR range (--device-addr): keep it
    inside the BAR, which still holds the longest sequence."""
    args = ctx.engine_args(engine)
    if "--device-addr" in args:
        slots = max(longest, min(2 * longest, RIG_POOL_BYTES // size))
        args += ["--pool-blocks", str(slots)]
    return args


def ratios(records: list[dict]) -> list[dict]:
    """Per (trace, block size): compat against posix, against pinned and,
    when a kvikio row ran, against kvikio."""
    out = []
    ok = medians(records)
    points = sorted({(r["trace"], r["block_size"]) for r in ok})
    for trace, size in points:
        bw = {r["engine"]: r["bandwidth_GBps"] for r in ok
              if r["trace"] == trace and r["block_size"] == size}
        spread = {r["engine"]: r["rounds_GBps"] for r in ok
                  if r["trace"] == trace and r["block_size"] == size}
        verified = all(r.get("verified") is True for r in ok
                       if r["trace"] == trace and r["block_size"] == size)
        rec = {"status": "derived", "kind": "ratios", "trace": trace, "block_size": size,
               "verified": verified, "bandwidth_GBps": bw, "rounds_GBps": spread}
        for engine in ("compat", "direct", "cufile", "host", *PEER_ENGINES):
            if engine in bw and bw.get("posix"):
                rec[f"{engine}_over_posix"] = bw[engine] / bw["posix"]
            if engine in bw and bw.get("pinned"):
                rec[f"{engine}_over_pinned"] = bw[engine] / bw["pinned"]
        if bw.get("pinned") and bw.get("posix"):
            # No engine that ends in GPU memory beats the same reads into
            # pinned host memory: below 5, the first goal is out of reach
            # on this storage whatever the engine does.
            rec["pinned_over_posix"] = bw["pinned"] / bw["posix"]
        for engine in ("compat", "direct"):
            if engine in bw and bw.get("kvikio"):
                rec[f"{engine}_over_kvikio"] = bw[engine] / bw["kvikio"]
        peer_problems = sorted({r.get("status", "?") for r in records
                                if r.get("engine") in PEER_ENGINES and r.get("trace") == trace
                                and r.get("block_size") == size and r.get("status") != "ok"})
        if peer_problems:
            # A peer round that did not run or did not verify is not in the
            # ratios: the record says so rather than dropping it unseen.
            rec["peer_problems"] = peer_problems
        if "compat_over_posix" in rec and "compat_over_pinned" in rec:
            rec["goal_met"] = (verified and rec["compat_over_posix"] >= 5.0
                               and rec["compat_over_pinned"] >= 0.8
                               and rec.get("compat_over_kvikio", 1.0) >= 1.0)
        out.append(rec)
    return out


def plot(records, ctx, png) -> None:
    rows = medians(records)
    traces = [t for t in TRACES if any(r["trace"] == t for r in rows)] or \
        sorted({r["trace"] for r in rows})
    engines = [e for e in (*KV_ENGINES, *PEER_ENGINES, "pinned")
               if any(r["engine"] == e for r in rows)]
    ncols = max(len(traces), 1)
    fig, axes = figure(ctx, TITLE, ncols=ncols, nrows=2, engines=engines,
                       width=max(4.2, 9.0 / ncols))
    sizes = sorted({r["block_size"] for r in rows})
    width = 0.8 / max(len(engines), 1)
    for col, trace in enumerate(traces):
        for row, (metric, label) in enumerate((("bandwidth_GBps", "GB/s (median round)"),
                                              ("p99", "p99 per-sequence latency (ms)"))):
            ax = axes[row][col]
            for k, engine in enumerate(engines):
                xs, ys, spread = [], [], [[], []]
                for i, size in enumerate(sizes):
                    match = [r for r in rows if r["trace"] == trace and r["engine"] == engine
                             and r["block_size"] == size]
                    if match:
                        r = match[0]
                        xs.append(i + (k - (len(engines) - 1) / 2) * width)
                        ys.append(r["bandwidth_GBps"] if metric == "bandwidth_GBps"
                                  else r["latency_ms"]["p99"])
                        # Whiskers: the slowest and fastest rounds.
                        lo, hi = (min(r["rounds_GBps"]), max(r["rounds_GBps"])) \
                            if metric == "bandwidth_GBps" else (ys[-1], ys[-1])
                        spread[0].append(ys[-1] - lo)
                        spread[1].append(hi - ys[-1])
                ax.bar(xs, ys, width=width, label=engine, yerr=spread, capsize=1.5,
                       error_kw={"elinewidth": 0.6},
                       color=color("ceiling" if engine == "pinned" else engine))
            ax.set_xticks(range(len(sizes)))
            ax.set_xticklabels([f"{s >> 10}K" for s in sizes], fontsize=8)
            if row == 1:
                ax.set_yscale("log")
                ax.set_xlabel("block size")
            else:
                ax.set_title(trace, fontsize=9)
            if col == 0:
                ax.set_ylabel(label)
            if row == 0 and col == 0:
                ax.legend(fontsize=7)
    save(fig, png)
