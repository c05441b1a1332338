# SPDX-License-Identifier: MIT
"""One kvikio configuration of bench/reproduce cufile-costs, in a process
of its own (the environment decides which library serves kvikio's cuFile
calls, once, when libkvikio loads): reads each size from a warm file into
a GPU buffer with CuFile.pread, then checks one read byte for byte against
os.pread of the same range.

  python -m phxrepro.cufile_kvikio '{"config": "shim", "path": ..., "sizes": [...], ...}'

One JSON record per size on stdout; an import or setup failure is one
record with status "error"."""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

PAGE = 4096


def offsets(size: int, length: int, count: int) -> list[int]:
    """Page-aligned offsets that move through the file, each leaving room
    for @size bytes (offset 0 only when the file has no more room)."""
    room = max(0, length - size) // PAGE
    return [((i * 7) % (room + 1)) * PAGE for i in range(count)]


def loaded_cufile() -> list[str]:
    """The libcufile files mapped into this process."""
    found = []
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if "libcufile" in path and path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


def kvikio_setting(kvikio, name: str):
    """A kvikio setting by name: kvikio.defaults.get(name) in the releases
    that have it, the older per-setting getter otherwise, None if neither."""
    try:
        return kvikio.defaults.get(name)
    except Exception:  # noqa: BLE001  (older kvikio: no get(), or another name)
        getter = getattr(kvikio.defaults, name, None)
        try:
            return getter() if callable(getter) else None
        except Exception:  # noqa: BLE001
            return None


def emit(rec: dict) -> None:
    print(json.dumps(rec), flush=True)


def main(job: dict) -> int:
    base = {"kind": "kvikio", "config": job["config"], "round": job.get("round", 0)}
    try:
        import torch
        import kvikio
        import kvikio.defaults
    except Exception as exc:  # noqa: BLE001  (libkvikio failing to load cuFile shows here)
        emit({**base, "status": "error", "error": f"import: {exc!r}"})
        return 0
    if not torch.cuda.is_available():
        emit({**base, "status": "unavailable", "error": "no CUDA GPU"})
        return 0
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the context exists before anything is timed
    preferred = getattr(kvikio.defaults, "is_compat_mode_preferred", None)
    settings = {"kvikio": getattr(kvikio, "__version__", "?"), "torch": torch.__version__,
                "compat_mode_preferred": preferred() if preferred else None,
                "nthreads": kvikio_setting(kvikio, "num_threads"),
                "task_size": kvikio_setting(kvikio, "task_size"),
                # Reads below it take kvikio's POSIX path without calling cuFile.
                "gds_threshold": kvikio_setting(kvikio, "gds_threshold")}
    path = job["path"]
    length = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        f = kvikio.CuFile(path, "r")
    except Exception as exc:  # noqa: BLE001
        emit({**base, **settings, "status": "error", "error": f"CuFile({path}): {exc!r}",
              "libcufile": loaded_cufile()})
        return 0
    try:
        for size in job["sizes"]:
            rec = {**base, **settings, "size": size, "path": path}
            try:
                buf = torch.empty(size, dtype=torch.uint8, device="cuda")
                spots = offsets(size, length, int(job.get("max_reps", 1000)) + 2)
                for off in spots[:2]:  # first calls: buffer registration, thread start
                    f.pread(buf, size, off).get()
                torch.cuda.synchronize()
                times = []
                spent = 0.0
                for off in spots[2:]:
                    t = time.perf_counter()
                    n = f.pread(buf, size, off).get()
                    torch.cuda.synchronize()
                    dt = time.perf_counter() - t
                    if n != size:
                        raise RuntimeError(f"pread returned {n} of {size} bytes at {off}")
                    times.append(dt)
                    spent += dt
                    if len(times) >= int(job.get("min_reps", 3)) and \
                            spent >= float(job.get("min_seconds", 0.3)):
                        break
                # The check: a buffer filled with another value, one read, and
                # the host's own read of the same range.
                off = spots[len(spots) // 2]
                buf.fill_(0xA5)
                n = f.pread(buf, size, off).get()
                torch.cuda.synchronize()
                want = os.pread(fd, size, off)
                got = buf.cpu()
                ref = torch.frombuffer(bytearray(want), dtype=torch.uint8)
                verified = n == size and len(want) == size and bool(torch.equal(got, ref))
                seconds = statistics.median(times)
                rec.update({"status": "ok" if verified else "failed", "reps": len(times),
                            "seconds": seconds, "gbps": size / seconds / 1e9,
                            "min_seconds": min(times), "verified": verified,
                            "verify_offset": off})
                del buf, got, ref
            except Exception as exc:  # noqa: BLE001  (one size failing is a record)
                rec.update({"status": "error", "error": repr(exc)[:800]})
            rec["libcufile"] = loaded_cufile()
            emit(rec)
    finally:
        f.close()
        os.close(fd)
    return 0


if __name__ == "__main__":
    sys.exit(main(json.loads(sys.argv[1])))
