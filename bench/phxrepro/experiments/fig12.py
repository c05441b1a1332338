# SPDX-License-Identifier: MIT
"""Fig 12: loading safetensors checkpoints into GPU memory.

For each model (real tensor names, shapes and dtypes from the published
configs, random weights written by the real `safetensors` writer, sharded
at 5 GB with an index as Hugging Face does), smallest first, one at a time
(generated, measured, deleted): load time warm (page cache) and cold
(evicted) for
  native       mmap + a pageable cudaMemcpy per tensor (torch.frombuffer().to())
  safetensors  safetensors.torch.load_file(device="cuda:0") per shard
  cufile       phoenix's cufile engine (NVIDIA GDS), or why it cannot run
  phoenix      phoenix_gds.Loader (engine auto: direct with the module, else compat)
and the ceilings in the same run: parallel reads into pinned host memory
(warm) and O_DIRECT reads into pinned memory (cold), each the better of a
Python thread pool and phx-load's host engine.  Every tensor loaded by
native, cufile and phoenix is compared bit for bit with load_file's, and
phx-load --verify checks the checkpoint against plain CPU reads.

A warm load is timed WARM_REPEATS times back to back (the median counts).
A cold load reads the disk, whose speed drifts over the seconds one load
takes (a virtual disk on the H200: 1.4 to 2.2 GB/s from one load to the
next), so the methods the cold goal compares (phoenix, cufile and the two
ceilings) run in COLD_ROUNDS rounds, each round in a rotated order, and
the ratios take each method's median round; the ceiling is the better of
the two ceilings' medians, not the best single load of either.  Beside
that ratio, for reading only, cold_over_direct_paired compares phoenix
with the better ceiling round by round (geometric mean): the drift
between rounds cancels there.

Environment: PHX_FIG12_MODELS (comma list, default all), PHX_FIG12_BUDGET_S
(models that would not finish in time are recorded as skipped; default
420), PHX_FIG12_COLD_ROUNDS (default 3), PHX_FIG12_CACHES ("warm,cold";
"cold" alone skips the warm pass and phx-load --verify, so that more cold
rounds of a large model fit one 10-minute command; --quick runs both).
--quick: a 2-layer Llama-shaped model on the CPU (host engine, numpy), so
CI machines without a GPU or torch run the same pipeline in seconds."""

from __future__ import annotations

import concurrent.futures
import json
import mmap
import os
import pathlib
import shutil
import statistics
import struct
import sys
import time

from ..context import Unavailable
from ..plotting import color, engines_of, figure, save
from . import fig12_models as models

NAME = "fig12"
TITLE = "Model loading: safetensors checkpoints into GPU memory (paper Fig 12)"

CHUNK = 16 << 20
THREADS = 16
DEFAULT_BUDGET_S = 420
# Warm loads measured this many times (the median counts).
WARM_REPEATS = 3
# Rounds of the cold loads the goal compares (the median round counts;
# PHX_FIG12_COLD_ROUNDS), and in --quick runs.
COLD_ROUNDS = 3
QUICK_COLD_ROUNDS = 2
# Rough rates for the budget check: generating, and the cold and warm passes.
GEN_GBPS, COLD_GBPS, WARM_GBPS, VERIFY_GBPS = 0.8, 1.2, 4.0, 2.0
GOALS = {"warm_over_safetensors": 5.0, "warm_over_pinned": 0.9, "cold_over_direct": 0.95}


# -- checkpoint files ------------------------------------------------------------------------

def header(path: pathlib.Path) -> tuple[int, dict]:
    """(data section offset, header JSON) of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        return 8 + n, json.loads(f.read(n))


def shard_files(folder: pathlib.Path) -> list[pathlib.Path]:
    return sorted(folder.glob("*.safetensors"))


def write_index(folder: pathlib.Path, shards: list[list], total: int) -> None:
    count = len(shards)
    weight_map = {}
    for i, shard in enumerate(shards):
        for name, _, _ in shard:
            weight_map[name] = f"model-{i + 1:05d}-of-{count:05d}.safetensors"
    with open(folder / "model.safetensors.index.json", "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def generate_torch(folder: pathlib.Path, cfg: dict, torch, save_file) -> None:
    dtypes = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32}
    shards = models.shards(cfg)
    for i, shard in enumerate(shards):
        tensors = {}
        for name, shape, dt in shard:
            # Random on the GPU (fast), then host tensors for the writer.
            tensors[name] = torch.randn(shape, dtype=dtypes[dt], device="cuda").cpu()
        save_file(tensors, str(folder / f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"),
                  metadata={"format": "pt"})
        del tensors
    write_index(folder, shards, models.total_bytes(cfg))


def generate_bytes(folder: pathlib.Path, cfg: dict) -> None:
    """Without torch: numpy's writer when safetensors is installed, else the
    format written out directly (8-byte length, JSON, data)."""
    shards = models.shards(cfg, max_shard=600_000)  # several shards even for the tiny model
    try:
        import numpy
        from safetensors.numpy import save_file
    except ImportError:
        save_file = None
    for i, shard in enumerate(shards):
        path = folder / f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        blobs = {name: os.urandom(models.nbytes(shape, dt)) for name, shape, dt in shard}
        if save_file is not None:
            save_file({name: numpy.frombuffer(blobs[name], dtype=numpy.float16).reshape(shape)
                       for name, shape, _ in shard}, str(path), metadata={"format": "np"})
            continue
        head, offset = {"__metadata__": {"format": "np"}}, 0
        for name, shape, dt in shard:
            size = len(blobs[name])
            head[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + size]}
            offset += size
        text = json.dumps(head).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for name, _, _ in shard:
                f.write(blobs[name])
    write_index(folder, shards, models.total_bytes(cfg))


# -- cache state ----------------------------------------------------------------------------

def drop_cache(files: list[pathlib.Path], whole: bool) -> str:
    """Evicts the files (and, when @whole and allowed, the page cache);
    returns how."""
    os.sync()
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    if not whole:
        return "posix_fadvise"
    try:
        with open("/proc/sys/vm/drop_caches", "w", encoding="ascii") as f:
            f.write("1\n")
        return "posix_fadvise+drop_caches"
    except OSError:
        return "posix_fadvise"


def prime_cache(files: list[pathlib.Path]) -> None:
    for path in files:
        with open(path, "rb") as f:
            while f.read(64 << 20):
                pass


# -- the ceilings: reads into (pinned) host memory --------------------------------------------

def parallel_read(files: list[pathlib.Path], buffer: memoryview, direct: bool) -> int:
    """Reads every file into buffer (file after file, each padded to CHUNK)
    with THREADS threads of CHUNK-sized preadv; returns the bytes read."""
    jobs, at = [], 0
    for path in files:
        size = path.stat().st_size
        for off in range(0, size, CHUNK):
            jobs.append((path, off, min(CHUNK, size - off), at + off))
        at += -(-size // CHUNK) * CHUNK
    flags = os.O_RDONLY | (os.O_DIRECT if direct else 0)
    fds = {p: os.open(p, flags) for p in files}

    def one(job):
        path, off, size, dst = job
        end = dst + (-(-size // 4096) * 4096 if direct else size)  # O_DIRECT: aligned lengths
        done = 0
        while done < size:
            n = os.preadv(fds[path], [buffer[dst + done:end]], off + done)
            if n <= 0:
                raise OSError(f"short read of {path} at {off + done}")
            done += n
        return size

    try:
        with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
            return sum(pool.map(one, jobs))
    finally:
        for fd in fds.values():
            os.close(fd)


def padded_size(files: list[pathlib.Path]) -> int:
    return sum(-(-p.stat().st_size // CHUNK) * CHUNK for p in files)


# -- measuring --------------------------------------------------------------------------------

class Run:
    """Collects the records of one model."""

    def __init__(self, ctx, model: str, files: list[pathlib.Path], total: int):
        self.ctx, self.model, self.files, self.total = ctx, model, files, total
        self.records: list[dict] = []

    def measure(self, method: str, cache: str, fn, **extra) -> object:
        how = drop_cache(self.files, not self.ctx.quick) if cache == "cold" else None
        rec = {"kind": "load", "model": self.model, "method": method, "cache": cache,
               "tensor_bytes": self.total, **extra}
        if cache == "cold":
            rec.setdefault("round", 0)
        if how:
            rec["evicted_by"] = how
        result = None
        try:
            # Warm loads take a fraction of a second, where one run is at the
            # mercy of the machine: the median of WARM_REPEATS (each run's
            # result dropped before the next, so memory does not pile up).
            runs = []
            for _ in range(WARM_REPEATS if cache == "warm" and not self.ctx.quick else 1):
                result = None
                start = time.perf_counter()
                result = fn()
                runs.append(time.perf_counter() - start)
            rec["seconds"] = sorted(runs)[(len(runs) - 1) // 2]
            if len(runs) > 1:
                rec["runs_seconds"] = runs
            if isinstance(result, dict) and result.get("tool") == "phx-load":
                # The tool's own load time: no process start, device open or
                # warm-up; for a ceiling, the reads alone (pinned memory is
                # slow to allocate, and the Python ceiling allocates it beforehand).
                rec["wall_seconds"] = rec["seconds"]
                rec["seconds"] = result["read_seconds" if method.startswith("ceiling") else "seconds"]
                rec["allocate_seconds"] = result.get("allocate_seconds")
                rec["engines"] = result.get("engines")
            rec["gbps"] = self.total / rec["seconds"] / 1e9
            rec["status"] = "ok"
        except Exception as exc:  # noqa: BLE001 - an engine that cannot run is a result
            rec["status"] = "unavailable" if isinstance(exc, OSError) else "error"
            rec["error"] = f"{type(exc).__name__}: {exc}"[:500]
            result = None
        self.ctx.log(f"{self.model} {cache} {method}: " +
                     (f"{rec['gbps']:.2f} GB/s" if rec["status"] == "ok" else rec["error"][:200]))
        self.records.append(rec)
        return result

    def mark_verified(self, method: str, cache: str, ok: bool, detail: str = "") -> None:
        """Marks the newest record of (method, cache): the load just compared."""
        for r in reversed(self.records):
            if r.get("method") == method and r.get("cache") == cache:
                r["verified"] = ok
                if detail:
                    r["verify_detail"] = detail
                return


def cold_rounds() -> int:
    return max(1, int(os.environ.get("PHX_FIG12_COLD_ROUNDS", COLD_ROUNDS)))


def caches() -> set[str]:
    """The passes PHX_FIG12_CACHES asks for (warm, cold or both)."""
    wanted = {c.strip() for c in os.environ.get("PHX_FIG12_CACHES", "warm,cold").split(",")}
    wanted.discard("")
    if not wanted or not wanted <= {"warm", "cold"}:
        raise ValueError(f"PHX_FIG12_CACHES={os.environ['PHX_FIG12_CACHES']!r}: "
                         "name warm, cold or both")
    return wanted


def extra_round(cache: str, k: int) -> dict:
    return {"round": k} if cache == "cold" else {}


def rotated(items: list, by: int) -> list:
    """items rotated left by @by: round k of the cold loads starts elsewhere."""
    k = by % len(items) if items else 0
    return items[k:] + items[:k]


def phx_load(ctx, files: list[pathlib.Path], folder: pathlib.Path, extra: list[str]) -> dict:
    recs = ctx.run_json([ctx.tool("phx-load"), str(folder), "--json", "--quiet", *extra],
                        timeout=900)
    if not recs:
        raise OSError("phx-load printed no record")
    rec = recs[-1]
    if rec.get("status") != "ok":
        raise OSError(rec.get("error", rec.get("reason", "phx-load failed")))
    return rec


def cli_verify(ctx, run: "Run", folder: pathlib.Path) -> None:
    """phx-load --verify: every tensor against plain CPU reads (engine auto)."""
    start = time.perf_counter()
    try:
        rec = phx_load(ctx, run.files, folder, ["--verify"])
        run.records.append({"kind": "cli_verify", "model": run.model, "status": "ok",
                            "verified": rec.get("verify", {}).get("ok"),
                            "engines": rec.get("engines"), "gbps": rec.get("gbps"),
                            "wall_seconds": time.perf_counter() - start})
    except Exception as exc:  # noqa: BLE001 - recorded, and all_verified turns false
        run.records.append({"kind": "cli_verify", "model": run.model, "status": "error",
                            "verified": False, "error": str(exc)[:500]})


def import_phoenix(ctx):
    sys.path.insert(0, str(ctx.build / "python"))
    try:
        import phoenix_gds as phoenix
        return phoenix
    except ImportError as exc:
        ctx.log(f"phoenix_gds Python module not importable from {ctx.build / 'python'} ({exc})")
        return None


# -- GPU: the real experiment -----------------------------------------------------------------

def run_gpu_model(ctx, model: str, torch, phoenix, st, passes: set[str]) -> list[dict]:
    cfg = models.MODELS[model]
    folder = pathlib.Path(ctx.scratch_file(f"fig12-{model}"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    start = time.perf_counter()
    generate_torch(folder, cfg, torch, st.save_file)
    os.sync()
    files = shard_files(folder)
    total = models.total_bytes(cfg)
    run = Run(ctx, model, files, total)
    run.records.append({"kind": "checkpoint", "model": model, "files": len(files),
                        "tensors": len(models.tensors(cfg)), "tensor_bytes": total,
                        "file_bytes": sum(p.stat().st_size for p in files),
                        "generate_seconds": time.perf_counter() - start, "status": "ok"})
    dtypes = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32}

    def sync(result):
        torch.cuda.synchronize()
        return result

    def load_safetensors():
        out = {}
        for f in files:
            out.update(st.load_file(str(f), device="cuda:0"))
        return sync(out)

    def load_native():
        out = {}
        for f in files:
            base, head = header(f)
            with open(f, "rb") as fh:
                mm = mmap.mmap(fh.fileno(), 0, flags=mmap.MAP_PRIVATE,
                               prot=mmap.PROT_READ | mmap.PROT_WRITE)
            for name, t in head.items():
                if name == "__metadata__":
                    continue
                begin, end = t["data_offsets"]
                host = torch.frombuffer(mm, dtype=torch.uint8, count=end - begin,
                                        offset=base + begin)
                out[name] = host.to("cuda:0").view(dtypes[t["dtype"]]).reshape(t["shape"])
                del host
            del mm
        return sync(out)

    def bits(t):
        return t.reshape(-1).view(torch.uint8)

    def compare(got, ref) -> tuple[bool, str]:
        if got is None:
            return False, "nothing loaded"
        if set(got) != set(ref):
            return False, f"tensor names differ ({len(got)} vs {len(ref)})"
        for name, r in ref.items():
            g = got[name]
            if g.dtype != r.dtype or tuple(g.shape) != tuple(r.shape) or not torch.equal(bits(g), bits(r)):
                return False, f"{name} differs"
        return True, ""

    loader = phoenix.Loader("cuda:0")
    loader.warm_up(folder)
    cufile = None
    try:
        cufile = phoenix.Loader("cuda:0", engine="cufile")
        cufile.warm_up(folder)
    except OSError as exc:
        for cache in sorted(passes):  # only the passes this run makes
            run.records.append({"kind": "load", "model": model, "method": "cufile",
                                "cache": cache, "status": "unavailable",
                                "error": str(exc)[:500], "tensor_bytes": total})
        cufile = None
    pinned = torch.empty(padded_size(files), dtype=torch.uint8, pin_memory=True)
    view = memoryview(pinned.numpy()).cast("B")

    def load_phoenix():
        return sync(loader.load(folder, framework="torch"))

    def measure_compared(method: str, cache: str, ref, fn, **extra) -> None:
        """One load of @method, compared with @ref, then dropped."""
        got = run.measure(method, cache, fn, **extra)
        if method == "phoenix" and got is not None:
            run.records[-1]["engines"] = {str(k): v for k, v in loader.stats["engines"].items()}
            run.records[-1]["files_direct"] = loader.stats["files_direct"]
            run.records[-1]["files_streamed"] = loader.stats.get("files_streamed")
            # Where the time went inside the library (the rest of
            # "seconds" is Python: tensors made from DLPack capsules).
            run.records[-1]["library_seconds"] = loader.stats["seconds"]
            run.records[-1]["allocate_seconds"] = loader.stats.get("allocate_seconds")
        if got is not None:
            run.mark_verified(method, cache, *compare(got, ref))
        del got
        torch.cuda.empty_cache()

    # The ceilings: the same files into pinned host memory.
    def ceilings(cache: str):
        direct = cache == "cold"
        return {
            "ceiling-python": lambda: parallel_read(files, view, direct),
            "ceiling-phx-load": lambda: phx_load(
                ctx, files, folder, ["--engine", "host", "--pinned", "--cache",
                                     "direct" if direct else "buffered"])}

    gpu_methods = {"phoenix": load_phoenix,
                   "cufile": (lambda: sync(cufile.load(folder, framework="torch")))
                   if cufile else None}

    # Warm: loads leave the files cached, so priming once is enough.
    if "warm" in passes:
        prime_cache(files)
        cli_verify(ctx, run, folder)
        ref = run.measure("safetensors", "warm", load_safetensors)
        if ref is None:
            raise RuntimeError(f"{model}: safetensors.torch.load_file failed; nothing to compare")
        measure_compared("native", "warm", ref, load_native)
        for method, fn in gpu_methods.items():
            if fn is not None:
                measure_compared(method, "warm", ref, fn)
        del ref
        torch.cuda.empty_cache()
        for method, fn in ceilings("warm").items():
            run.measure(method, "warm", fn)
    if "cold" not in passes:
        shutil.rmtree(folder, ignore_errors=True)
        return run.records

    # Cold: the reference loads once; the compared methods in rotated rounds.
    ref = run.measure("safetensors", "cold", load_safetensors)
    if ref is None:
        raise RuntimeError(f"{model}: safetensors.torch.load_file failed; nothing to compare")
    measure_compared("native", "cold", ref, load_native)
    compared = [(m, fn) for m, fn in {**gpu_methods, **ceilings("cold")}.items() if fn is not None]
    for k in range(cold_rounds()):
        for method, fn in rotated(compared, k):
            if method.startswith("ceiling"):
                run.measure(method, "cold", fn, round=k)
            else:
                measure_compared(method, "cold", ref, fn, round=k)
    del ref
    torch.cuda.empty_cache()
    shutil.rmtree(folder, ignore_errors=True)
    return run.records


# -- CPU: --quick ---------------------------------------------------------------------------

def run_cpu_model(ctx, phoenix) -> list[dict]:
    model = models.QUICK_MODEL
    cfg = models.QUICK
    folder = pathlib.Path(ctx.scratch_file(f"fig12-{model}"))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    generate_bytes(folder, cfg)
    files = shard_files(folder)
    total = models.total_bytes(cfg)
    run = Run(ctx, model, files, total)
    run.records.append({"kind": "checkpoint", "model": model, "files": len(files),
                        "tensors": len(models.tensors(cfg)), "tensor_bytes": total,
                        "status": "ok"})

    def load_native():  # the CPU analogue: one read per tensor
        out = {}
        for f in files:
            base, head = header(f)
            with open(f, "rb") as fh:
                for name, t in head.items():
                    if name != "__metadata__":
                        begin, end = t["data_offsets"]
                        fh.seek(base + begin)
                        out[name] = fh.read(end - begin)
        return out

    def cli(cache: str, k: int) -> None:
        rec = run.measure("phoenix-cli", cache, lambda: phx_load(
            ctx, files, folder, ["--engine", "host", "--verify"]), **extra_round(cache, k))
        if rec is not None:
            run.mark_verified("phoenix-cli", cache, bool(rec.get("verify", {}).get("ok")))

    def module(cache: str, k: int, ref: dict) -> None:
        try:
            import numpy  # noqa: F401 - the module's numpy path
        except ImportError:
            return
        got = run.measure("phoenix", cache, lambda: phoenix.load_safetensors(
            folder, device="cpu", framework="numpy"), **extra_round(cache, k))
        ok = got is not None and set(got) == set(ref) and all(
            got[n].tobytes() == ref[n] for n in ref)
        run.mark_verified("phoenix", cache, ok)

    def ceiling(cache: str, k: int, _ref: dict) -> None:
        run.measure("ceiling-python", cache, lambda: parallel_read(files, buffer, False),
                    **extra_round(cache, k))

    buffer = memoryview(bytearray(padded_size(files)))
    steps = [lambda cache, k, _ref: cli(cache, k), ceiling]
    if phoenix is not None:
        steps.insert(1, module)
    prime_cache(files)
    ref = run.measure("native", "warm", load_native)
    for step in steps:
        step("warm", 0, ref)
    # The GPU run's cold rounds, in miniature: the same code decides the ratios.
    ref = run.measure("native", "cold", load_native)
    for k in range(QUICK_COLD_ROUNDS):
        for step in rotated(steps, k):
            step("cold", k, ref)
    shutil.rmtree(folder, ignore_errors=True)
    return run.records


# -- the experiment -------------------------------------------------------------------------

def paired_cold(records: list[dict], model: str, main: str) -> dict:
    """The cold comparison round by round, for reading beside the goal's
    ratio: a round's methods run back to back, so the disk's drift from one
    round to the next cancels in @main's load over the better ceiling of
    the same round.  Geometric mean over the rounds that have both, and in
    how many @main was the slower.  The same against each ceiling alone:
    the better of two noisy readers of one disk beats a third reader of
    that disk by itself, so the per-ceiling means show how much of the gap
    is that choice."""
    per_round: dict = {}
    for r in records:
        if (r.get("kind") == "load" and r["model"] == model and r.get("cache") == "cold"
                and r.get("status") == "ok" and "round" in r):
            slot = per_round.setdefault(r["round"], {"ceilings": {}})
            if r["method"] == main:
                slot["main"] = r["gbps"]
            elif r["method"].startswith("ceiling"):
                slot["ceilings"][r["method"]] = r["gbps"]
    pairs = [s["main"] / max(s["ceilings"].values()) for s in per_round.values()
             if s.get("main") and s["ceilings"]]
    each: dict = {}
    for s in per_round.values():
        for name, gbps in s["ceilings"].items():
            if s.get("main"):
                each.setdefault(name, []).append(s["main"] / gbps)
    if not pairs:
        return {"cold_over_direct_paired": None, "cold_over_each_ceiling_paired": {},
                "cold_rounds": 0, "cold_rounds_slower": 0}
    return {"cold_over_direct_paired": statistics.geometric_mean(pairs),
            "cold_over_each_ceiling_paired": {name: statistics.geometric_mean(v)
                                              for name, v in sorted(each.items())},
            "cold_rounds": len(pairs), "cold_rounds_slower": sum(x < 1 for x in pairs)}


def ratios(records: list[dict]) -> list[dict]:
    out = []
    for model in dict.fromkeys(r["model"] for r in records if r.get("kind") == "load"):
        # Each method's median load (cold: its median round; warm records are
        # already medians), never its luckiest.
        rounds: dict = {}
        for r in records:
            if r.get("kind") == "load" and r["model"] == model and r.get("status") == "ok":
                rounds.setdefault((r["method"], r["cache"]), []).append(r["gbps"])
        best = {key: statistics.median(vals) for key, vals in rounds.items()}

        def get(method, cache):
            return best.get((method, cache))

        def ceiling(cache):
            vals = [v for (m, c), v in best.items() if c == cache and m.startswith("ceiling")]
            return max(vals) if vals else None

        def ratio(a, b):
            return a / b if a and b else None

        main = "phoenix" if get("phoenix", "warm") or get("phoenix", "cold") else "phoenix-cli"
        rec = {"kind": "ratios", "model": model, "method": main, "status": "ok",
               "warm_over_safetensors": ratio(get(main, "warm"), get("safetensors", "warm")),
               "warm_over_native": ratio(get(main, "warm"), get("native", "warm")),
               "warm_over_pinned": ratio(get(main, "warm"), ceiling("warm")),
               "cold_over_direct": ratio(get(main, "cold"), ceiling("cold")),
               **paired_cold(records, model, main),
               "gbps": {f"{m}/{c}": v for (m, c), v in sorted(best.items())}}
        rec["goal_met"] = all(rec[k] is not None and rec[k] >= g for k, g in GOALS.items()
                              if not (k == "warm_over_safetensors" and
                                      get("safetensors", "warm") is None))
        verified = [r.get("verified") for r in records
                    if r.get("model") == model and "verified" in r]
        rec["all_verified"] = bool(verified) and all(v is True for v in verified)
        out.append(rec)
    return out


def run(ctx) -> list[dict]:
    if ctx.mode != "local":
        raise Unavailable("fig12 loads in-process with torch; it does not run in the rig")
    phoenix = import_phoenix(ctx)
    if ctx.quick:
        records = run_cpu_model(ctx, phoenix)
        return records + ratios(records)
    try:
        import torch
        from safetensors import torch as st
    except ImportError as exc:
        raise Unavailable(f"fig12 needs torch and safetensors ({exc}); --quick runs on the CPU")
    if not torch.cuda.is_available():
        raise Unavailable("fig12 needs a CUDA GPU; --quick runs on the CPU")
    if phoenix is None:
        raise Unavailable(f"fig12 needs the phoenix_gds Python module under {ctx.build / 'python'} "
                          "(configure with -DPHX_BUILD_PYTHON=ON)")
    wanted = os.environ.get("PHX_FIG12_MODELS")
    names = [m for m in models.by_size() if not wanted or m in wanted.split(",")]
    budget = float(os.environ.get("PHX_FIG12_BUDGET_S", DEFAULT_BUDGET_S))
    passes = caches()
    started = time.monotonic()
    records: list[dict] = []
    for model in names:
        gb = models.total_bytes(models.MODELS[model]) / 1e9
        # Cold: safetensors and native once, phoenix and two ceilings a round.
        estimate = gb / GEN_GBPS
        if "cold" in passes:
            estimate += (2 + 3 * cold_rounds()) * gb / COLD_GBPS
        if "warm" in passes:
            estimate += 3 * WARM_REPEATS * gb / WARM_GBPS + gb / VERIFY_GBPS
        left = budget - (time.monotonic() - started)
        if estimate > left:
            ctx.log(f"{model}: skipped (needs about {estimate:.0f} s, {left:.0f} s left)")
            records.append({"kind": "skipped", "model": model, "status": "skipped",
                            "reason": f"time budget: about {estimate:.0f} s needed, "
                                      f"{left:.0f} s of {budget:.0f} left"})
            continue
        records += run_gpu_model(ctx, model, torch, phoenix, st, passes)
    return records + ratios(records)


def plot(records, ctx, png) -> None:
    rows = [r for r in records if r.get("kind") == "load" and r.get("status") == "ok"]
    model_names = list(dict.fromkeys(r["model"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, axes = figure(ctx, TITLE, ncols=2, width=7.5, engines=engines_of(rows))
    width = 0.8 / max(1, len(methods))
    for ax, cache in zip(axes[0], ("warm", "cold")):
        for i, method in enumerate(methods):
            xs, ys = [], []
            for j, model in enumerate(model_names):
                vals = [r["seconds"] for r in rows
                        if r["model"] == model and r["method"] == method and r["cache"] == cache]
                if vals:
                    xs.append(j + (i - (len(methods) - 1) / 2) * width)
                    ys.append(statistics.median(vals))  # the median round
            engine = {"phoenix": "phoenix", "cufile": "gds", "native": "posix",
                      "safetensors": "host"}.get(method, "ceiling" if "ceiling" in method else method)
            ceiling = "ceiling" in method
            ax.bar(xs, ys, width, label=method, color="white" if ceiling else color(engine),
                   edgecolor=color(engine), hatch="//" if method.endswith("python") else
                   ("xx" if ceiling else None))
        ax.set_xticks(range(len(model_names)))
        ax.set_xticklabels(model_names, rotation=30, fontsize=7)
        ax.set_ylabel("load time (s)")
        ax.set_title(f"{cache} page cache", fontsize=9)
        ax.legend(fontsize=6)
    notes = []
    unavailable: dict = {}
    for r in records:
        if r.get("kind") == "ratios":
            parts = [f"{k}={r[k]:.2f}" for k in GOALS if r.get(k) is not None]
            notes.append(f"{r['model']}: " + ", ".join(parts) +
                         f"; goal {'met' if r['goal_met'] else 'NOT met'}; "
                         f"verified={r['all_verified']}")
        elif r.get("kind") == "skipped":
            notes.append(f"{r['model']}: skipped ({r['reason']})")
        elif r.get("status") == "unavailable" and r.get("cache") == "warm":
            # One line per method and reason, whatever the number of models.
            error = r.get("error", "")
            reason = error[error.find("cuFile"):] if "cuFile" in error else error
            unavailable.setdefault((r["method"], reason[:90]), []).append(r["model"])
    for (method, reason), names in unavailable.items():
        notes.append(f"{method} unavailable ({', '.join(names)}): {reason}")
    notes = notes[:14]
    fig.text(0.01, 0.01, "\n".join(notes), fontsize=6, va="bottom")
    # About 0.11 inch a line of 6-point text, in figure-height units.
    save(fig, png, bottom=min(0.5, 0.03 + 0.11 * len(notes) / fig.get_figheight()))
