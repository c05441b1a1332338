# SPDX-License-Identifier: MIT
"""Concurrency: N loads at once against the same N loads one after another
(issue 26, item 4), with the one-line calls (phoenix_gds.load_safetensors,
and safetensors.torch.load_file for comparison), warm page cache.

  threads    one fresh process: N threads released together, each loading
             the file set once; against a fresh process loading it N times
             one after another (the "sequential" row)
  processes  N fresh processes, each ready (CUDA context, imports) before
             all are told to load at once; against N ready processes told
             one at a time (sequential: the sum of their load times)
Every load is compared bit for bit with safetensors' own.  Records:
wall_seconds (all N), aggregate_gbps (N x bytes / wall), and
over_sequential (concurrent wall / sequential wall: <= 1 is the goal).
--concurrency 1,2,4,8, --concurrency-modes threads,processes, --peers
(default phoenix,safetensors), --files (default the single-file
checkpoint at --peers-scale)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time

from .. import checkpoint
from ..context import Unavailable
from ..peers import loaders
from . import peers as base

NAME = "concurrency"
TITLE = "Concurrent loads: N threads or processes at once against N one after another"
JOB_TIMEOUT_S = 300


def member_results(ctx, job: dict, n: int, together: bool, timeout: float) -> dict:
    """N member processes: all ready, then "go" to all at once (@together)
    or to one at a time; returns the row's fields."""
    cmd = [sys.executable, "-m", "phxrepro.peers.worker", json.dumps({**job, "mode": "member"})]
    procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=base.worker_env(ctx))
             for _ in range(n)]
    # A member that dies says nothing on stdout (its stderr is not kept).
    gone = '{"status": "error", "error": "a member process ended without a result"}'
    try:
        ready = [json.loads(p.stdout.readline() or '{"ready": false, "error": "no answer"}')
                 for p in procs]
        if not all(r.get("ready") for r in ready):
            bad = next(r for r in ready if not r.get("ready"))
            return {"status": bad.get("status", "error"), "error": bad.get("error", "")}
        done = []
        go = time.monotonic()
        if together:
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            done = [json.loads(p.stdout.readline() or gone) for p in procs]
        else:
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
                done.append(json.loads(p.stdout.readline() or gone))
        spans = [(d.get("start"), d.get("end")) for d in done]
        loads = [e - s for s, e in spans if s is not None and e is not None]
        if len(loads) < n:
            return {"status": "error", "error": "; ".join(str(d.get("error")) for d in done)[:600]}
        wall = max(e for _, e in spans) - go if together else sum(loads)
        errors = [d.get("error") or d.get("verify_detail") for d in done
                  if d.get("status") != "ok"]
        engines = {k: v for d in done for k, v in (d.get("engines") or {}).items()}
        return {"status": "ok" if not errors else ("failed" if all(
                    d.get("status") in ("ok", "failed") for d in done) else "error"),
                **({"engines": engines} if engines else {}),
                "wall_seconds": wall, "load_seconds": loads,
                "verified": not errors, **({"error": "; ".join(map(str, errors))[:600]}
                                            if errors else {})}
    finally:
        for p in procs:
            try:
                p.stdin.close()
                p.wait(timeout=timeout)
            except (OSError, subprocess.TimeoutExpired):
                p.kill()


def run(ctx) -> list[dict]:
    if ctx.mode != "local":
        raise Unavailable("concurrency loads in local processes; it does not run in the rig")
    opts = base.options(ctx)
    names = loaders.parse(opts.get("peers") or ["phoenix", "safetensors"])
    names = [n for n in names if loaders.LOADERS[n].kind == "tensor"]
    counts = opts.get("concurrency") or ([1, 2] if ctx.quick else [1, 2, 4, 8])
    modes = opts.get("concurrency_modes") or ["threads", "processes"]
    if opts.get("files"):
        fs_name = pathlib.Path(opts["files"][0]).name
        files = base.fileset(pathlib.Path(opts["files"][0]))
    else:
        path = checkpoint.single_file(pathlib.Path(ctx.scratch_file("peers-single")),
                                      float(opts["scale"]), base.half(opts))
        fs_name, files = f"{checkpoint.SINGLE_MODEL}@scale{float(opts['scale']):g}", [str(path)]
    size = sum(pathlib.Path(f).stat().st_size for f in files)
    records: list[dict] = []
    started = time.monotonic()
    for mode in modes:
        for n in counts:
            for name in names:
                for how in ("sequential", "concurrent"):
                    rec = {"kind": "concurrent", "fileset": fs_name, "method": name,
                           "mode": mode, "n": n, "how": how, "cache": "warm",
                           "bytes_each": size, "device": opts["device"]}
                    if time.monotonic() - started > float(opts["budget_s"]):
                        records.append({**rec, "status": "skipped", "error": "time budget spent"})
                        continue
                    job = {"loader": name, "files": files, "device": opts["device"],
                           "fileset": fs_name}
                    if mode == "threads":
                        got = base.run_worker(ctx, {**job, "mode": "concurrent", "n": n,
                                                    "how": "threads" if how == "concurrent"
                                                    else "sequential"}, JOB_TIMEOUT_S)
                        rec.update({k: v for k, v in got[0].items()
                                    if k not in ("kind", "how")})
                    else:
                        rec.update(member_results(ctx, job, n, how == "concurrent",
                                                  JOB_TIMEOUT_S))
                    if rec.get("wall_seconds"):
                        rec["aggregate_gbps"] = n * size / rec["wall_seconds"] / 1e9
                    ctx.log(f"{mode} n={n} {name} {how}: {rec.get('status')} " +
                            (f"{rec['aggregate_gbps']:.2f} GB/s aggregate"
                             if "aggregate_gbps" in rec else str(rec.get("error", ""))[:120]))
                    records.append(rec)
    for r in records:
        if r["how"] == "concurrent" and r.get("wall_seconds"):
            seq = next((s for s in records if s["how"] == "sequential" and
                        all(s[k] == r[k] for k in ("mode", "n", "method"))
                        and s.get("wall_seconds")), None)
            if seq:
                r["over_sequential"] = r["wall_seconds"] / seq["wall_seconds"]
    return records


manifest_extra = base.manifest_extra


def plot(records, ctx, png) -> None:
    from ..plotting import engines_of, figure, save

    fig, axes = figure(ctx, TITLE, ncols=2, width=6.0, engines=engines_of(records))
    for ax, mode in zip(axes[0], ("threads", "processes")):
        for name in dict.fromkeys(r["method"] for r in records):
            for how, style in (("concurrent", "-o"), ("sequential", "--x")):
                pts = sorted((r["n"], r["aggregate_gbps"]) for r in records
                             if r["mode"] == mode and r["method"] == name and r["how"] == how
                             and r.get("status") == "ok" and "aggregate_gbps" in r)
                if pts:
                    ax.plot(*zip(*pts), style, label=f"{name} {how}")
        ax.set_xlabel(f"loads at once ({mode})")
        ax.set_ylabel("aggregate GB/s")
        ax.set_xscale("log", base=2)
        ax.legend(fontsize=6)
    save(fig, png)
