# SPDX-License-Identifier: MIT
"""cufile-costs: what the cuFile shim (libphoenix-cufile) costs, against
NVIDIA's libcufile where both run and against libphoenix's own calls
(issue 27, item 3).

Two parts, each configuration in fresh processes, rounds interleaved (the
order rotates by one each round), medians over rounds:
  tool    phx-cufile-bench once per library per round (library "phoenix":
          the shim; "nvidia": NVIDIA's libcufile.so.0): cuFileDriverOpen,
          cuFileBufRegister per size, and cuFileRead against
          phx::File::read of the same size from a warm file (per-call
          median and p99, data checked);
  kvikio  kvikio.CuFile(path).pread(buf, size) from a warm file, sizes
          4 KiB to 1 GiB, data checked, in these configurations:
            shim    KVIKIO_COMPAT_MODE=OFF, LD_PRELOAD of the shim
            shim-all-sizes  the same with KVIKIO_GDS_THRESHOLD=4096: kvikio
                    reads under its threshold (16 KiB in kvikio 26.10)
                    with POSIX on the calling thread without calling
                    cuFile, so only this configuration puts the shim under
                    4 KiB reads
            compat  KVIKIO_COMPAT_MODE=ON, no shim (kvikio's own POSIX path)
            compat-all-sizes  the same with KVIKIO_GDS_THRESHOLD=4096: a
                    4 KiB read then takes the path shim-all-sizes takes
                    (kvikio's thread pool, one task) with kvikio's POSIX
                    read in place of cuFileRead, so the pair differs by
                    the shim alone
            nvidia  KVIKIO_COMPAT_MODE=OFF, no shim (NVIDIA's cuFile)
Without a GPU the tool part runs on the fake CUDA driver the build has
(tests/fakecuda; records say so), and kvikio is recorded unavailable.

Settings (bench/reproduce --cufile-*): sizes, rounds, configs, the shim's
path (default BUILD/lib/cufile_shim/libcufile.so.0), NVIDIA's (default:
the loader's cache, then /usr/local/cuda*)."""

from __future__ import annotations

import glob
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

from ..context import ToolError, Unavailable
from ..peers import pagecache

NAME = "cufile-costs"
TITLE = "cuFile shim costs: driver open, registration, per-call overhead, kvikio"

BENCH = pathlib.Path(__file__).resolve().parents[2]
KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 * GiB]
QUICK_SIZES = [4 * KiB, 64 * KiB, 1 * MiB]
CONFIGS = ("shim", "shim-all-sizes", "compat", "compat-all-sizes", "nvidia")
# kvikio calls cuFile for reads of at least this many bytes (its default is
# 16 KiB in 26.10); the smallest size measured.
ALL_SIZES_GDS_THRESHOLD = 4 * 1024
LIBRARIES = ("phoenix", "nvidia")
DEFAULT_BUDGET_S = 360
JOB_TIMEOUT_S = 240


def options(ctx) -> dict:
    opts = {k[len("cufile_"):]: v for k, v in (getattr(ctx, "options", None) or {}).items()
            if k.startswith("cufile_")}
    opts.setdefault("sizes", QUICK_SIZES if ctx.quick else SIZES)
    opts.setdefault("rounds", 1 if ctx.quick else 3)
    opts.setdefault("configs", list(CONFIGS))
    opts.setdefault("shim", str(ctx.build / "lib" / "cufile_shim" / "libcufile.so.0"))
    opts.setdefault("budget_s", DEFAULT_BUDGET_S)
    return opts


def nvidia_cufile(shim: str) -> str | None:
    """NVIDIA's libcufile.so.0: the loader's cache, else the CUDA
    toolkit's folders; never the shim."""
    found = []
    try:
        cache = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True,
                               check=False, timeout=20).stdout
        found += [line.split("=>")[-1].strip() for line in cache.splitlines()
                  if "libcufile.so.0 " in line and "=>" in line]
    except (OSError, subprocess.SubprocessError):
        pass
    for pattern in ("/usr/local/cuda*/lib64/libcufile.so.0",
                    "/usr/local/cuda*/targets/*/lib/libcufile.so.0",
                    "/usr/lib/x86_64-linux-gnu/libcufile.so.0"):
        found += sorted(glob.glob(pattern))
    shim_real = os.path.realpath(shim)
    for path in found:
        if os.path.exists(path) and os.path.realpath(path) != shim_real:
            return path
    return None


def rotated(items: list, round_no: int) -> list:
    if not items:
        return []
    k = round_no % len(items)
    return items[k:] + items[:k]


def plan(rounds: int, libraries: list[str], configs: list[str]) -> list[dict]:
    """The jobs in run order: per round, the tool for each library, then
    kvikio for each configuration, each list rotated by the round."""
    jobs = []
    for r in range(rounds):
        jobs += [{"part": "tool", "library": lib, "round": r} for lib in rotated(libraries, r)]
        jobs += [{"part": "kvikio", "config": c, "round": r} for c in rotated(configs, r)]
    return jobs


def _strip(value: str | None, drop) -> str | None:
    kept = [p for p in (value or "").split(":") if p and not drop(p)]
    return ":".join(kept) or None


def environment(base: dict, *, shim: str, preload: bool, compat: str | None = None,
                extra: dict | None = None) -> dict:
    """@base without any libcufile preloaded and without the shim's folder
    on LD_LIBRARY_PATH; then, with @preload, the shim preloaded and its
    folder first; KVIKIO_COMPAT_MODE=@compat when given."""
    env = dict(base)
    shim_dir = os.path.dirname(os.path.abspath(shim))
    for key, drop in (("LD_PRELOAD", lambda p: "libcufile" in os.path.basename(p)),
                      ("LD_LIBRARY_PATH", lambda p: os.path.abspath(p) == shim_dir)):
        value = _strip(env.get(key), drop)
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    if preload:
        env["LD_PRELOAD"] = ":".join(filter(None, [os.path.abspath(shim), env.get("LD_PRELOAD")]))
        env["LD_LIBRARY_PATH"] = ":".join(filter(None, [shim_dir, env.get("LD_LIBRARY_PATH")]))
    if compat is not None:
        env["KVIKIO_COMPAT_MODE"] = compat
    env.update(extra or {})
    return env


def kvikio_env(base: dict, config: str, shim: str) -> dict:
    through_shim = config in ("shim", "shim-all-sizes")
    extra = {"KVIKIO_GDS_THRESHOLD": str(ALL_SIZES_GDS_THRESHOLD)} \
        if config.endswith("-all-sizes") else None
    return environment(base, shim=shim, preload=through_shim,
                       compat="ON" if config.startswith("compat") else "OFF", extra=extra)


def tool_args(opts: dict, library_path: str, file: str) -> list[str]:
    registers = ",".join(str(s) for s in opts.get("register_sizes") or opts["sizes"])
    return ["--cufile-library", library_path, "--register-sizes", registers,
            "--io-sizes", "4096,65536", "--file", file, "--create", "--file-size", "64M",
            "--iterations", str(opts.get("iterations", 2000)), "--rounds", "5"]


def write_data(path: pathlib.Path, length: int, seed: int = 27) -> None:
    """Bytes from a seeded generator, in chunks of their own seed, so no
    two ranges of the file repeat each other."""
    chunk = 64 * MiB
    with open(path, "wb") as out:
        for i, off in enumerate(range(0, length, chunk)):
            out.write(random.Random(seed * 1000003 + i).randbytes(min(chunk, length - off)))


def parse_lines(stdout: str) -> list[dict]:
    out = []
    for line in stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out


def run_process(cmd: list[str], env: dict, cwd: str, timeout: float, meta: dict) -> list[dict]:
    """Runs one job; its records with @meta, or one error record saying
    why none came.  Exit 1 from the tool is a failed data check: its
    records say which."""
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=cwd, check=False)
    except subprocess.TimeoutExpired:
        return [{**meta, "status": "error", "error": f"no result within {timeout:.0f} s"}]
    records = [{**r, **meta, "process_seconds": time.monotonic() - started}
               for r in parse_lines(proc.stdout)]
    if proc.returncode not in (0, 1, 2) or not records:
        tail = " | ".join(proc.stderr.strip().splitlines()[-4:])[:800]
        records.append({**meta, "kind": "process", "status": "error",
                        "error": f"exited {proc.returncode}: {tail}"})
    return records


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(records: list[dict]) -> list[dict]:
    """Medians over rounds, per library or configuration and size, and the
    issue's goals from the same run: overhead under 2 us at 4 KiB, the
    shim's kvikio not slower than kvikio's compat mode at any size."""
    out = []
    tool = [r for r in records if r.get("part") == "tool" and r.get("status") == "ok"]
    for lib in dict.fromkeys(r["library_name"] for r in tool):
        mine = [r for r in tool if r["library_name"] == lib]
        opens = [r["open_us"] for r in mine if r.get("kind") == "driver_open"]
        if opens:
            out.append({"kind": "summary", "metric": "driver_open", "library_name": lib,
                        "api": "cufile", "rounds": len(opens), "median_us": _median(opens),
                        "max_us": max(opens), "status": "ok"})
        for api in ("cufile", "phx"):
            regs = [r for r in mine if r.get("kind") == "buf_register" and r.get("api") == api]
            for size in sorted(dict.fromkeys(r["size"] for r in regs)):
                rows = [r for r in regs if r["size"] == size and "register" in r]
                out.append({"kind": "summary", "metric": "buf_register", "library_name": lib,
                            "api": api, "size": size, "rounds": len(rows), "status": "ok",
                            "register_p50_us": _median(r["register"]["p50_us"] for r in rows),
                            "register_first_us": _median(r["register"]["first_us"] for r in rows),
                            "deregister_p50_us": _median(r["deregister"]["p50_us"]
                                                         for r in rows)})
        overhead = [r for r in mine if r.get("kind") == "call_overhead"]
        for size in sorted(dict.fromkeys(r["size"] for r in overhead)):
            rows = [r for r in overhead if r["size"] == size]
            p50 = _median(r["overhead_p50_us"] for r in rows)
            goal = rows[0].get("goal_us")
            out.append({"kind": "summary", "metric": "call_overhead", "library_name": lib,
                        "api": "cufile", "size": size, "rounds": len(rows), "status": "ok",
                        "cufile_p50_us": _median(r["cufile_p50_us"] for r in rows),
                        "phx_p50_us": _median(r["phx_p50_us"] for r in rows),
                        "overhead_p50_us": p50,
                        "overhead_p99_us": _median(r["overhead_p99_us"] for r in rows),
                        "goal_us": goal,
                        "within_goal": (p50 < goal) if goal is not None and p50 is not None
                        else None})
    kv = [r for r in records if r.get("part") == "kvikio" and r.get("kind") == "kvikio"
          and "size" in r]
    medians: dict = {}
    for config in dict.fromkeys(r["config"] for r in kv):
        for size in sorted(dict.fromkeys(r["size"] for r in kv if r["config"] == config)):
            rows = [r for r in kv if r["config"] == config and r["size"] == size]
            ok = [r for r in rows if r.get("status") == "ok"]
            rec = {"kind": "summary", "metric": "kvikio_read", "config": config, "size": size,
                   "rounds": len(rows), "rounds_ok": len(ok),
                   "all_verified": bool(rows) and all(r.get("verified") is True for r in rows),
                   "status": "ok" if ok else "error"}
            if ok:
                rec["seconds"] = _median(r["seconds"] for r in ok)
                rec["gbps"] = size / rec["seconds"] / 1e9
                medians[(config, size)] = rec["seconds"]
            else:
                rec["error"] = next((r.get("error") for r in rows if r.get("error")), "")
            out.append(rec)
    # Each shim configuration against kvikio's compat mode as users run it,
    # and the all-sizes one also against compat mode on the same kvikio path.
    for config, against, metric in (
            ("shim", "compat", "kvikio_shim_over_compat"),
            ("shim-all-sizes", "compat", "kvikio_shim_all_sizes_over_compat"),
            ("shim-all-sizes", "compat-all-sizes", "kvikio_shim_all_sizes_over_compat_all_sizes")):
        for size in sorted({s for _, s in medians}):
            shim, compat = medians.get((config, size)), medians.get((against, size))
            if shim is None or compat is None:
                continue
            out.append({"kind": "summary", "metric": metric, "size": size, "status": "ok",
                        "speedup": compat / shim, "not_slower": shim <= compat})
    return out


def run(ctx) -> list[dict]:
    if ctx.mode != "local":
        raise Unavailable("cufile-costs runs fresh local processes; it does not run in the rig")
    opts = options(ctx)
    shim = os.path.abspath(opts["shim"])
    if not os.path.exists(shim):
        raise ToolError(f"the shim is not built: {shim} (build the phoenix_cufile target)")
    # Absolute: the jobs run in the scratch folder.
    tool = os.path.abspath(ctx.tool("phx-cufile-bench"))
    base = dict(os.environ)
    has_gpu = bool(ctx.machine_info.get("gpus"))
    fake = ctx.build.resolve() / "tests" / "libphx_fakecuda.so"
    driver_note = "cuda"
    if not has_gpu and not base.get("PHX_CUDA_DRIVER"):
        if not fake.exists():
            raise Unavailable("no GPU, and no fake CUDA driver in the build (tests/fakecuda)")
        base.update({"PHX_CUDA_DRIVER": str(fake), "PHX_FAKE_CUDA_DEVICES": "1"})
        driver_note = "fake (tests/fakecuda): the calls' costs, not a GPU's"
    nvidia = opts.get("library") or nvidia_cufile(shim)
    libraries = {"phoenix": shim}
    if nvidia:
        libraries["nvidia"] = nvidia
    configs = [c for c in opts["configs"] if c in CONFIGS]
    sizes = [int(s) for s in opts["sizes"]]
    scratch = pathlib.Path(ctx.scratch_file("cufile-costs"))
    scratch.mkdir(parents=True, exist_ok=True)
    records: list[dict] = [{"kind": "setup", "part": "setup", "status": "ok", "shim": shim,
                            "nvidia_library": nvidia, "cuda_driver": driver_note,
                            "sizes": sizes, "rounds": int(opts["rounds"]), "configs": configs}]
    if not nvidia:
        records.append({"part": "tool", "library_name": "nvidia", "status": "unavailable",
                        "reason": "no NVIDIA libcufile.so.0 found (--cufile-library PATH)"})
    data = scratch / "kvikio.bin"
    if has_gpu and configs:
        write_data(data, max(sizes) + MiB)
        pagecache.prime([data])
    elif configs:
        records.append({"part": "kvikio", "status": "unavailable",
                        "reason": "kvikio reads into GPU memory: no GPU here"})
        configs = []
    budget = float(opts["budget_s"])
    started = time.monotonic()
    for job in plan(int(opts["rounds"]), list(libraries), configs):
        left = budget - (time.monotonic() - started)
        meta = {"part": job["part"], "round": job["round"]}
        if job["part"] == "tool":
            meta["library_name"] = job["library"]
        else:
            meta["config"] = job["config"]
        if left < 5:
            records.append({**meta, "status": "skipped",
                            "error": f"time budget of {budget:.0f} s spent"})
            continue
        if job["part"] == "tool":
            cmd = [tool, *tool_args(opts, libraries[job["library"]],
                                    str(scratch / "tool.bin"))]
            env = environment(base, shim=shim, preload=False)
        else:
            meta["resident_before"] = pagecache.resident_fraction([data])
            work = {"config": job["config"], "round": job["round"], "path": str(data),
                    "sizes": sizes, "min_seconds": 0.3 if not ctx.quick else 0.05}
            cmd = [sys.executable, "-m", "phxrepro.cufile_kvikio", json.dumps(work)]
            env = kvikio_env(base, job["config"], shim)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BENCH),
                                                              env.get("PYTHONPATH")]))
        # cwd: NVIDIA's library writes cufile.log where it runs.
        got = run_process(cmd, env, str(scratch), min(JOB_TIMEOUT_S, left), meta)
        for r in got:
            if r.get("kind") in ("call_overhead", "driver_open", "kvikio"):
                ctx.log(f"r{job['round']} {job.get('library') or job.get('config')} "
                        f"{r['kind']} {r.get('size', '')}: {r.get('status')} "
                        + json.dumps({k: r[k] for k in ("open_us", "overhead_p50_us", "gbps",
                                                        "verified", "error") if k in r})[:200])
        records += got
    for name in ("kvikio.bin", "tool.bin"):
        (scratch / name).unlink(missing_ok=True)
    return records + summarise(records)


def manifest_extra(records: list[dict]) -> dict:
    setup = next((r for r in records if r.get("kind") == "setup"), {})
    libs = {r["library_name"]: {"path": r.get("real_path"), "implementation":
                                r.get("implementation"), "cufile_version":
                                r.get("cufile_version")}
            for r in records if r.get("kind") == "library" and r.get("status") == "ok"}
    return {"libraries": libs, "cuda_driver": setup.get("cuda_driver")}


def plot(records, ctx, png) -> None:
    from ..plotting import engines_of, figure, log2_size_axis, save

    rows = [r for r in records if r.get("kind") == "summary"]
    fig, axes = figure(ctx, TITLE, ncols=3, width=6.0, engines=engines_of(records))
    axes = axes[0] if hasattr(axes[0], "__len__") else axes
    ax = axes[0]
    for lib in ("phoenix", "nvidia"):
        for api in ("cufile", "phx"):
            sel = [r for r in rows if r["metric"] == "buf_register" and r["library_name"] == lib
                   and r["api"] == api and r.get("register_p50_us") is not None]
            if sel and not (api == "phx" and lib == "nvidia"):
                ax.plot([r["size"] for r in sel], [r["register_p50_us"] for r in sel], "o-",
                        label=f"{lib} {api}")
    ax.set_yscale("log")
    log2_size_axis(ax, sorted({r["size"] for r in rows if r["metric"] == "buf_register"}) or [4096])
    ax.set_ylabel("register, us (median)")
    ax.legend(fontsize=6)
    ax = axes[1]
    sel = [r for r in rows if r["metric"] == "call_overhead" and r["library_name"] == "phoenix"]
    for i, r in enumerate(sel):
        ax.bar(i - 0.2, r["cufile_p50_us"] or 0, 0.4, color="#1f77b4",
               label="cuFileRead (shim)" if i == 0 else None)
        ax.bar(i + 0.2, r["phx_p50_us"] or 0, 0.4, color="#aec7e8",
               label="phx::File::read" if i == 0 else None)
    ax.set_xticks(range(len(sel)))
    ax.set_xticklabels([f"{r['size'] // 1024} KiB" for r in sel])
    ax.set_ylabel("us per call (median)")
    if sel:
        ax.legend(fontsize=6)
    ax = axes[2]
    for config in CONFIGS:
        sel = [r for r in rows if r["metric"] == "kvikio_read" and r["config"] == config
               and "gbps" in r]
        if sel:
            ax.plot([r["size"] for r in sel], [r["gbps"] for r in sel], "o-", label=config)
    ax.set_ylabel("kvikio pread GB/s (median round)")
    kv_sizes = sorted({r["size"] for r in rows if r["metric"] == "kvikio_read"})
    log2_size_axis(ax, kv_sizes or [4096])
    if kv_sizes:
        ax.legend(fontsize=6)
    save(fig, png, bottom=0.12)
