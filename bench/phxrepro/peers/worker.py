# SPDX-License-Identifier: MIT
"""One job in a fresh process: python -m phxrepro.peers.worker JOB_JSON.

Prints one JSON record per row on stdout (anything the loaders print goes
to stderr).  A "load" job: the CUDA context is created first
(torch.cuda.init() and a one-byte allocation) and the loader's module
imported before the clock; then

  fresh   the user's call from a fresh object, timed (device synchronised
          before the clock stops), its result compared and dropped;
  steady  the same object's next STEADY_CALLS loads, each timed, the last
          compared; the row's seconds are their median.

The reference (safetensors' load onto the host) is read after the first
timed call, when its result is compared, never before it: it reads every
file, and a read just before a cold call warms whatever caches below the
page cache (a virtio disk's host) for that call only.  Cold jobs evict
the files right before every timed call, and nothing reads them between
the eviction and the call; warm jobs read them once before the first.
A loader that cannot run is a record with status "unavailable" and the
reason; an exception in a call is status "error"; a load that differs
from the reference is status "failed"."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import resource
import statistics
import sys
import threading
import time
import traceback

from . import pagecache, verify
from .loaders import LOADERS
from ..records import stdout_emitter

BASE_DISTS = ("torch", "safetensors", "numpy")
# A cold call whose files stayed more resident than this is not reported
# as cold (headers and pages another process maps may stay).
MAX_RESIDENT_COLD = 0.05


def versions(dists) -> dict:
    out = {}
    for d in (*BASE_DISTS, *dists):
        try:
            out[d] = importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            out[d] = None
    return out


def file_bytes(files) -> int:
    return sum(os.path.getsize(f) for f in files)


class Cuda:
    """The process's CUDA context, made before any timing, or why not."""

    def __init__(self, device: str):
        self.torch = None
        self.available = False
        self.reason = ""
        self.init_seconds = None
        try:
            import torch
        except ImportError as exc:
            self.reason = f"torch is not importable ({exc})"
            return
        self.torch = torch
        if not device.startswith("cuda"):
            self.reason = f"device {device}"
            return
        if not torch.cuda.is_available():
            self.reason = "no CUDA device (torch.cuda.is_available() is False)"
            return
        start = time.perf_counter()
        torch.cuda.init()
        torch.empty(1, dtype=torch.uint8, device=device)
        torch.cuda.synchronize()
        self.init_seconds = time.perf_counter() - start
        self.available = True

    def sync(self) -> None:
        if self.available:
            self.torch.cuda.synchronize()

    def empty_cache(self) -> None:
        if self.available:
            self.torch.cuda.empty_cache()


def framework_for(device: str, cuda: Cuda) -> str:
    """The framework the loads return, imported now: a timed call must not
    pay its import (safetensors' peers import it with safetensors.numpy
    before the clock starts; the one-line call paid 50 ms for numpy's)."""
    framework = "numpy" if cuda.torch is None and device == "cpu" else "torch"
    try:
        importlib.import_module(framework)
    except ImportError:
        pass  # the loads say so in their records
    return framework


def reference(files, framework: str) -> dict:
    """safetensors' own load of @files onto the host, in this process's own
    memory.  Not load_file's default: its tensors share the file's mapping,
    and once a comparison has touched them, the pages they map cannot be
    evicted, so every cold call after the first would read a warm file."""
    out = {}
    for f in files:
        if framework == "numpy":
            from safetensors.numpy import load

            with open(f, "rb") as fh:
                out.update(load(fh.read()))
            continue
        from safetensors.torch import load, load_file

        try:
            out.update(load_file(f, device="cpu", backend="pread"))
        except TypeError:  # a safetensors without backends (before 0.8)
            with open(f, "rb") as fh:
                out.update(load(fh.read()))
    return out


def reference_or_why(files, framework: str) -> tuple[dict | None, str]:
    """(reference(), "") or (None, why there is none): a missing
    safetensors makes records that say so, not a worker that dies."""
    try:
        return reference(files, framework), ""
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}"[:300]


def check(peer, result, files, ref, ref_error: str) -> tuple[bool, str]:
    if peer.kind == "tensor":
        if ref is None:
            return False, f"no reference to compare with: {ref_error}"
        return verify.compare_tensors(result, ref)
    return verify.compare_bytes(result.read, files)


def cpu_seconds() -> float:
    """User + system seconds of this whole process (every thread) so far."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def evict_cold(files, job: dict) -> dict:
    """Evicts @files; with job["zero_resident"], until mincore finds none of
    their pages (pagecache.evict_to_zero: drop_caches only where fadvise
    left some)."""
    drop = job.get("drop_caches", True)
    if job.get("zero_resident"):
        return pagecache.evict_to_zero(files, drop_caches=drop)
    state = pagecache.evict(files, drop_caches=drop)
    state["evict_tries"] = 1
    return state


def run_load(job: dict, emit) -> None:
    name, files, cache = job["loader"], job["files"], job["cache"]
    device = job.get("device", "cuda:0")
    cls = LOADERS[name]
    base = {"kind": "load", "method": name, "loader_kind": cls.kind, "cache": cache,
            "round": job.get("round", 0), "slot": job.get("slot", 0),
            "fileset": job.get("fileset", ""), "files": len(files),
            "bytes": file_bytes(files), "device": device, "pid": os.getpid(),
            "versions": versions(cls.dists)}
    steady_calls = int(job.get("steady_calls", 2))

    def fail_all(status: str, reason: str) -> None:
        emit({**base, "call": "fresh", "status": status, "error": reason})
        if steady_calls:
            emit({**base, "call": "steady", "status": status, "error": reason})

    cuda = Cuda(device)
    base["cuda_init_seconds"] = cuda.init_seconds
    if device.startswith("cuda") and not cuda.available and cls.kind != "ceiling":
        return fail_all("unavailable", cuda.reason)
    if device == "cpu" and cls.needs_cuda:
        return fail_all("unavailable", f"{name} loads onto a CUDA device only")
    framework = framework_for(device, cuda)
    options = {**job.get("options", {}), "framework": framework}
    peer = cls(files, device, options)
    start = time.perf_counter()
    try:
        peer.load_module()
    except Exception as exc:  # noqa: BLE001 - an import that fails is a result
        return fail_all("unavailable", f"import: {type(exc).__name__}: {exc}"[:600])
    base["import_seconds"] = time.perf_counter() - start
    base["framework"] = framework
    try:
        base.update(peer.setup())
    except Exception as exc:  # noqa: BLE001
        return fail_all("error", f"setup: {type(exc).__name__}: {exc}"[:600])

    # The reference is read once, after the first timed call, when the
    # first comparison needs it (see the docstring: not before the clock).
    refs: list = []

    def reference_now() -> tuple[dict | None, str]:
        if not refs:
            refs.append((None, "") if peer.kind != "tensor"
                        else reference_or_why(files, framework))
        return refs[0]

    if cache == "warm":
        pagecache.prime(files)
        base["resident_before"] = pagecache.resident_fraction(files)

    def timed(call):
        state = evict_cold(files, job) if cache == "cold" else {}
        cpu = cpu_seconds()
        start = time.perf_counter()
        result = call()
        cuda.sync()
        seconds = time.perf_counter() - start
        cpu_timed.append(cpu_seconds() - cpu)
        return result, seconds, state

    cpu_timed: list = []  # the process's CPU seconds (user + system) of each timed call

    def row(call: str, seconds: float, result, evictions: list, **more) -> dict:
        rec = {**base, "call": call, "seconds": seconds, "gbps": base["bytes"] / seconds / 1e9,
               "steady_how": peer.steady_how if call == "steady" else "fresh object",
               **more}
        if cpu_timed:
            cpu = cpu_timed[0] if call == "fresh" else statistics.median(cpu_timed)
            rec["cpu_seconds"] = cpu
            rec["cpu_s_per_gb"] = cpu / (base["bytes"] / 1e9)
        if evictions:
            rec["evicted_by"] = evictions[0]["evicted_by"]
            rec["resident_after_evict"] = [e["resident_after_evict"] for e in evictions]
        left = max((r for r in rec.get("resident_after_evict", []) if r is not None), default=0)
        try:
            rec.update(peer.extra())
        except Exception as exc:  # noqa: BLE001
            rec["extra_error"] = str(exc)[:200]
        if job.get("verify", True):
            ok, detail = check(peer, result, files, *reference_now())
            rec["verified"] = ok
            if detail:
                rec["verify_detail"] = detail
            rec["status"] = "ok" if ok else "failed"
        else:
            rec["verified"] = None
            rec["status"] = "ok"
        if left > MAX_RESIDENT_COLD and rec["status"] == "ok":
            rec["status"] = "error"
            rec["error"] = (f"not a cold read: {left:.0%} of the files stayed in the page "
                            "cache after eviction")
        return rec

    result = None
    try:
        result, seconds, state = timed(peer.fresh)
        emit(row("fresh", seconds, result, [state] if state else []))
    except Exception as exc:  # noqa: BLE001
        emit({**base, "call": "fresh", "status": "error",
              "error": f"{type(exc).__name__}: {exc}"[:600],
              "traceback": traceback.format_exc()[-1500:]})
        if steady_calls:
            emit({**base, "call": "steady", "status": "error",
                  "error": "the fresh call failed; no object to reuse"})
        peer.close()
        return
    cuda.empty_cache()  # the comparison's temporaries, not the result's memory
    peer.release(result)
    result = None
    if steady_calls:
        cpu_timed.clear()
        try:
            times, states = [], []
            for i in range(steady_calls):
                if result is not None:
                    peer.release(result)
                    result = None
                result, seconds, state = timed(peer.again)
                times.append(seconds)
                if state:
                    states.append(state)
            emit(row("steady", statistics.median(times), result, states, calls_seconds=times))
        except Exception as exc:  # noqa: BLE001
            emit({**base, "call": "steady", "status": "error",
                  "error": f"{type(exc).__name__}: {exc}"[:600],
                  "traceback": traceback.format_exc()[-1500:]})
        if result is not None:
            peer.release(result)
    peer.close()


def engines_field(peers) -> dict:
    """{"engines": {device: engine}} that @peers' loads used, where they say."""
    engines: dict = {}
    for peer in peers:
        try:
            engines.update(peer.extra().get("engines") or {})
        except Exception:  # noqa: BLE001 - a record without engines, not a lost one
            pass
    return {"engines": engines} if engines else {}


def run_concurrent(job: dict, emit) -> None:
    """N loads of the one-line call in one fresh process: one after another
    ("sequential") or from N threads released together ("threads")."""
    name, files, n, how = job["loader"], job["files"], int(job["n"]), job["how"]
    device = job.get("device", "cuda:0")
    cls = LOADERS[name]
    base = {"kind": "concurrent", "method": name, "how": how, "n": n, "files": len(files),
            "bytes_each": file_bytes(files), "device": device, "cache": "warm",
            "versions": versions(cls.dists), "fileset": job.get("fileset", "")}
    cuda = Cuda(device)
    if device.startswith("cuda") and not cuda.available:
        return emit({**base, "status": "unavailable", "error": cuda.reason})
    if device == "cpu" and cls.needs_cuda:
        return emit({**base, "status": "unavailable", "error": f"{name} loads onto CUDA only"})
    framework = framework_for(device, cuda)
    peers = [cls(files, device, {"framework": framework}) for _ in range(n)]
    try:
        for p in peers:
            p.load_module()
    except Exception as exc:  # noqa: BLE001
        return emit({**base, "status": "unavailable", "error": f"import: {exc}"[:600]})
    pagecache.prime(files)
    results: list = [None] * n
    spans: list = [None] * n
    errors: list = []

    def one(i: int, gate: threading.Barrier | None) -> None:
        if gate is not None:
            gate.wait()
        start = time.perf_counter()
        try:
            results[i] = peers[i].fresh()
            cuda.sync()
        except Exception as exc:  # noqa: BLE001
            errors.append(f"load {i}: {type(exc).__name__}: {exc}"[:300])
        spans[i] = (start, time.perf_counter())

    start = time.perf_counter()
    if how == "threads":
        gate = threading.Barrier(n + 1)
        threads = [threading.Thread(target=one, args=(i, gate)) for i in range(n)]
        for t in threads:
            t.start()
        gate.wait()
        start = time.perf_counter()
        for t in threads:
            t.join()
    else:
        for i in range(n):
            one(i, None)
    wall = time.perf_counter() - start
    ref, ref_error = reference_or_why(files, framework)  # after the clock, as run_load's
    checks = [check(p, r, files, ref, ref_error) if r is not None else (False, "no result")
              for p, r in zip(peers, results)]
    bad = [f"load {i}: {d}" for i, (ok, d) in enumerate(checks) if not ok]
    rec = {**base, "wall_seconds": wall,
           "load_seconds": [None if s is None else s[1] - s[0] for s in spans],
           "aggregate_gbps": n * base["bytes_each"] / wall / 1e9,
           "verified": not bad and not errors, "cuda_init_seconds": cuda.init_seconds,
           **engines_field(peers)}
    if errors:
        rec.update(status="error", error="; ".join(errors)[:600])
    elif bad:
        rec.update(status="failed", verify_detail="; ".join(bad)[:600])
    else:
        rec["status"] = "ok"
    emit(rec)


def run_member(job: dict, emit) -> None:
    """One of N processes loading at once: gets ready (CUDA, import), says
    so, loads when told "go", reports its span on the monotonic clock
    (shared by the machine's processes), then reads the reference and
    verifies."""
    name, files = job["loader"], job["files"]
    device = job.get("device", "cuda:0")
    cls = LOADERS[name]
    cuda = Cuda(device)
    if device.startswith("cuda") and not cuda.available:
        emit({"ready": False, "status": "unavailable", "error": cuda.reason})
        return
    framework = framework_for(device, cuda)
    peer = cls(files, device, {"framework": framework})
    try:
        peer.load_module()
    except Exception as exc:  # noqa: BLE001
        emit({"ready": False, "status": "unavailable", "error": f"import: {exc}"[:600]})
        return
    emit({"ready": True})
    if sys.stdin.readline().strip() != "go":
        return
    start = time.monotonic()
    try:
        result = peer.fresh()
        cuda.sync()
        end = time.monotonic()
    except Exception as exc:  # noqa: BLE001
        emit({"status": "error", "error": f"{type(exc).__name__}: {exc}"[:600],
              "start": start, "end": time.monotonic()})
        return
    ok, detail = check(peer, result, files, *reference_or_why(files, framework))
    emit({"status": "ok" if ok else "failed", "verified": ok, "verify_detail": detail,
          "start": start, "end": end, "pid": os.getpid(), **engines_field([peer])})


def main() -> int:
    job = json.loads(sys.argv[1])
    emit = stdout_emitter()

    mode = job.get("mode", "load")
    {"load": run_load, "concurrent": run_concurrent, "member": run_member}[mode](job, emit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
