# SPDX-License-Identifier: MIT
"""Peers: Phoenix side by side with the safetensors loaders users pick
instead (issue 26), timed as a user sees it.

Each (loader, file set, cache state, round) runs in a fresh Python process
(phxrepro.peers.worker) whose CUDA context exists before timing.  Rows:
  call=fresh   the user's call from a fresh object, setup included
  call=steady  the same object's next loads (median of --peers-steady
               calls; one-line calls without an object: the call repeated)
Loaders (--peers): phoenix (load_safetensors), phoenix-loader (Loader),
safetensors, fastsafetensors (nogds) and fastsafetensors-gds,
instanttensor (its default backend) and instanttensor-buffered, runai
(runai-model-streamer), kvikio (raw file-to-GPU bytes, not tensors), and
the ceilings pinned_read and odirect_read (threads reading into host
memory, no GPU copy).  Every tensor loader is compared bit for bit with
safetensors' own load (verified), raw reads and ceilings with the files.
Warm: the files read once before the first call; cold: evicted before
every timed call (fsync + posix_fadvise(DONTNEED), and drop_caches where
writable; the record names the method and what stayed resident).  Rounds
are interleaved: each round runs every loader, warm then cold, in an order
rotated by one from the round before.

Files (--files): safetensors files, or folders of shards (fig12's models:
bench/fig12/generate --model NAME FOLDER); default the issue's single-file
checkpoint (6.44 GB; --peers-scale shrinks its side, --quick uses 0.01),
generated under --scratch.  --peers-models NAME,... generates fig12 models
there too (needs torch and CUDA), one at a time, deleted after."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

from .. import checkpoint
from ..context import Unavailable
from ..peers import loaders, schedule

NAME = "peers"
TITLE = "Safetensors loaders side by side: first call and steady state, warm and cold"

BENCH = pathlib.Path(__file__).resolve().parents[2]
REQUIREMENTS = BENCH / "peers" / "requirements.txt"
DEFAULT_BUDGET_S = 540
JOB_TIMEOUT_S = 300


def options(ctx) -> dict:
    opts = dict(getattr(ctx, "options", None) or {})
    # --quick on a machine without a GPU: the same pipeline onto the host.
    no_gpu = ctx.quick and not ctx.machine_info.get("gpus")
    opts.setdefault("device", "cpu" if no_gpu else "cuda:0")
    opts.setdefault("peers", None)
    opts.setdefault("caches", ["warm", "cold"])
    opts.setdefault("rounds", 1 if ctx.quick else 3)
    opts.setdefault("steady", 2)
    opts.setdefault("scale", 0.01 if ctx.quick else 1.0)
    opts.setdefault("budget_s", DEFAULT_BUDGET_S)
    return opts


def half(opts: dict) -> str:
    """The generated weights' dtype: BF16 as in the issue, F16 for a host
    dry run (where numpy, which has no BF16, may stand in for torch)."""
    return "F16" if opts["device"] == "cpu" else "BF16"


def fileset(path: pathlib.Path) -> list[str]:
    """A file, or a folder's *.safetensors (shards), as the list each loader gets."""
    if path.is_dir():
        files = sorted(str(p) for p in path.glob("*.safetensors"))
        if not files:
            raise FileNotFoundError(f"{path}: no *.safetensors in it")
        return files
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file or folder")
    return [str(path)]


def worker_env(ctx) -> dict:
    env = dict(os.environ)
    paths = [str(BENCH), str(ctx.build / "python")]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_worker(ctx, job: dict, timeout: float) -> list[dict]:
    """Starts one worker; its records, or one error record saying why none came."""
    cmd = [sys.executable, "-m", "phxrepro.peers.worker", json.dumps(job)]
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env=worker_env(ctx), check=False)
    except subprocess.TimeoutExpired:
        return [{"status": "error", "error": f"no result within {timeout:.0f} s"}]
    records = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    process_seconds = time.monotonic() - started
    for r in records:
        r["process_seconds"] = process_seconds
    if proc.returncode != 0 or not records:
        tail = " | ".join(proc.stderr.strip().splitlines()[-4:])[:800]
        records.append({"status": "error", "call": "process",
                        "error": f"worker exited {proc.returncode}: {tail}"})
    return records


def summarise(records: list[dict]) -> list[dict]:
    """Per (file set, cache, call, loader): the median round, and the
    ratios the issue's goals name (phoenix's fresh call over the best
    ceiling and over the fastest peer), from the same run only."""
    groups: dict = {}
    for r in records:
        if r.get("kind") == "load":
            groups.setdefault((r["fileset"], r["cache"], r["call"], r["method"]), []).append(r)
    out = []
    for (fs, cache, call, method), rows in groups.items():
        ok = [r for r in rows if r.get("status") == "ok"]
        rec = {"kind": "summary", "fileset": fs, "cache": cache, "call": call,
               "method": method, "loader_kind": rows[0].get("loader_kind"),
               "rounds": len(rows), "rounds_ok": len(ok),
               "all_verified": bool(rows) and all(r.get("verified") is True for r in rows),
               "status": "ok" if ok else rows[-1].get("status", "error")}
        if ok:
            rec["seconds"] = statistics.median(r["seconds"] for r in ok)
            rec["gbps"] = statistics.median(r["gbps"] for r in ok)
        else:
            rec["error"] = next((r.get("error") or r.get("verify_detail") for r in rows
                                 if r.get("error") or r.get("verify_detail")), "")
        out.append(rec)
    for fs in dict.fromkeys(r["fileset"] for r in out):
        for cache in ("warm", "cold"):
            best = {r["method"]: r for r in out if r["fileset"] == fs and r["cache"] == cache
                    and r["call"] == "fresh" and "gbps" in r}
            main = best.get("phoenix")
            ceilings = [r["gbps"] for r in best.values() if r["loader_kind"] == "ceiling"]
            peers = {m: r["gbps"] for m, r in best.items() if r["loader_kind"] == "tensor"
                     and not m.startswith("phoenix") and not m.startswith("selftest")}
            if not best:
                continue
            fastest = max(peers, key=peers.get) if peers else None
            out.append({
                "kind": "ratios", "fileset": fs, "cache": cache, "call": "fresh",
                "status": "ok", "method": "phoenix",
                "over_best_ceiling": main["gbps"] / max(ceilings) if main and ceilings else None,
                "fastest_peer": fastest,
                "over_fastest_peer": main["gbps"] / peers[fastest] if main and fastest else None})
    return out


def run(ctx) -> list[dict]:
    if ctx.mode != "local":
        raise Unavailable("peers loads in fresh local processes; it does not run in the rig")
    opts = options(ctx)
    try:
        names = loaders.parse(opts["peers"])
    except ValueError as exc:
        raise Unavailable(str(exc)) from exc
    sets: dict[str, list[str]] = {}
    made: list[pathlib.Path] = []
    for f in opts.get("files") or []:
        p = pathlib.Path(f)
        sets[p.name] = fileset(p)
    if not sets:
        folder = pathlib.Path(ctx.scratch_file("peers-single"))
        path = checkpoint.single_file(folder, float(opts["scale"]), half(opts))
        made.append(folder)
        sets[f"{checkpoint.SINGLE_MODEL}@scale{float(opts['scale']):g}"] = [str(path)]
    models = [m for m in (opts.get("models") or []) if m]
    budget = float(opts["budget_s"])
    started = time.monotonic()
    records: list[dict] = []
    for fs_name, files in [*sets.items(), *[(m, None) for m in models]]:
        if files is None:  # a fig12 model, generated now and deleted after
            folder = pathlib.Path(ctx.scratch_file(f"peers-{fs_name}"))
            shutil.rmtree(folder, ignore_errors=True)
            gen = subprocess.run([sys.executable, str(BENCH / "fig12" / "generate"), "--model",
                                  fs_name, str(folder)], capture_output=True, text=True,
                                 check=False)
            if gen.returncode != 0:
                records.append({"kind": "checkpoint", "fileset": fs_name, "status": "error",
                                "error": gen.stderr.strip()[-500:]})
                continue
            made.append(folder)
            files = fileset(folder)
        records.append({"kind": "checkpoint", "fileset": fs_name, "status": "ok",
                        "files": files, "bytes": sum(os.path.getsize(f) for f in files)})
        for job in schedule.round_robin(names, [fs_name], opts["caches"], int(opts["rounds"])):
            left = budget - (time.monotonic() - started)
            if left < 5:
                records.append({"kind": "load", "fileset": fs_name, "method": job["loader"],
                                "cache": job["cache"], "round": job["round"], "call": "fresh",
                                "loader_kind": loaders.LOADERS[job["loader"]].kind,
                                "status": "skipped",
                                "error": f"time budget of {budget:.0f} s spent"})
                continue
            work = {**job, "mode": "load", "files": files, "device": opts["device"],
                    "steady_calls": int(opts["steady"]),
                    "options": {"threads": int(opts.get("threads", 16))}}
            got = run_worker(ctx, work, min(JOB_TIMEOUT_S, left))
            for r in got:
                r.setdefault("kind", "load")
                for k in ("fileset", "cache", "round", "slot"):
                    r.setdefault(k, job[k])
                r.setdefault("method", job["loader"])
                r.setdefault("loader_kind", loaders.LOADERS[job["loader"]].kind)
                r.setdefault("call", "fresh")
                ctx.log(f"{fs_name} {job['cache']} r{job['round']} {r['method']} {r['call']}: "
                        + (f"{r['gbps']:.2f} GB/s verified={r.get('verified')}"
                           if r.get("status") in ("ok", "failed") and "gbps" in r
                           else f"{r.get('status')}: {str(r.get('error', ''))[:120]}"))
            records += got
        if files is not None and fs_name in models:
            shutil.rmtree(made.pop(), ignore_errors=True)
    return records + summarise(records)


def pinned_versions() -> dict:
    """The wheel versions bench/peers/requirements.txt pins (name==version)."""
    out = {}
    if REQUIREMENTS.exists():
        for line in REQUIREMENTS.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if "==" in line:
                name, version = line.split("==", 1)
                out[name.strip()] = version.strip()
    return out


def manifest_extra(records: list[dict]) -> dict:
    """What the manifest names beside the commit: the pinned wheels and the
    versions each loader's process actually imported."""
    seen: dict = {}
    for r in records:
        if r.get("versions") and r.get("method") not in seen:
            seen[r["method"]] = r["versions"]
    return {"pinned": pinned_versions(), "imported_versions": seen}


def plot(records, ctx, png) -> None:
    from ..plotting import engines_of, figure, save

    rows = [r for r in records if r.get("kind") == "summary"]
    sets = list(dict.fromkeys(r["fileset"] for r in rows)) or ["(none)"]
    fig, axes = figure(ctx, TITLE, ncols=2, nrows=len(sets), width=7.0,
                       engines=engines_of(records))
    for i, fs in enumerate(sets):
        for ax, cache in zip(axes[i], ("warm", "cold")):
            sel = [r for r in rows if r["fileset"] == fs and r["cache"] == cache]
            methods = list(dict.fromkeys(r["method"] for r in sel))
            for j, method in enumerate(methods):
                for k, call in enumerate(("fresh", "steady")):
                    r = next((x for x in sel if x["method"] == method and x["call"] == call), None)
                    if r is None or "gbps" not in r:
                        continue
                    ax.bar(j + (k - 0.5) * 0.4, r["gbps"], 0.4,
                           color="#1f77b4" if call == "fresh" else "#aec7e8",
                           hatch="//" if r.get("loader_kind") == "ceiling" else
                           ("xx" if r.get("loader_kind") == "raw" else None),
                           edgecolor="black" if not r.get("all_verified") else None)
            ax.set_xticks(range(len(methods)))
            ax.set_xticklabels(methods, rotation=40, fontsize=6, ha="right")
            ax.set_ylabel("GB/s (median round)")
            ax.set_title(f"{fs}, {cache}: dark = fresh call, light = steady; "
                         "// ceiling, xx raw", fontsize=7)
    save(fig, png, bottom=0.12)
