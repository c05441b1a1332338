# SPDX-License-Identifier: MIT
"""Running phxbench and phx-breakdown from experiments."""

from __future__ import annotations

PHXBENCH_ENGINES = ("direct", "compat", "cufile", "posix", "host")
BREAKDOWN_ENGINES = ("direct", "compat", "cufile", "host")
# Engines whose registrations have a host view, so io_uring can target them.
RING_ENGINES = ("direct", "posix", "host")
# Engines that need a CUDA GPU (stream mode needs one for every engine).
GPU_ENGINES = ("direct", "compat", "cufile")


def sizes(spec: str) -> list[int]:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    out = []
    for item in spec.split(","):
        item = item.strip()
        out.append(int(item[:-1]) * units[item[-1]] if item[-1] in units else int(item))
    return out


def size_arg(n: int) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def engines(ctx, table=PHXBENCH_ENGINES) -> list[str]:
    return [e for e in table if ctx.wants(e)]


def queued_modes(engine: str, ring_mode: str) -> list[str]:
    """The modes that keep several requests in flight for an engine: its
    io_uring mode (async or batch) where its memory has a host view, and
    stream-ordered I/O where it needs a GPU."""
    modes = [ring_mode] if engine in RING_ENGINES else []
    if engine in GPU_ENGINES:
        modes.append("stream")
    return modes


def create_file(ctx, path: str, length: int) -> None:
    """Writes phxbench's verification pattern over [0, length) with the host
    engine (the pattern is a function of the offset, so every engine can
    verify against it).  Once per file and length in one reproduce run."""
    if (path, length) in ctx.created:
        return
    ctx.created.add((path, length))
    ctx.run_json([ctx.tool("phxbench"), "-f", path, "-x", "host", "-l", size_arg(length),
                  "--create", "-s", "1M", "-i", "read", "--json", "--quiet"],
                 timeout=3600, meta={"experiment": ctx.experiment, "step": "create"})


def run(ctx, engine: str, path: str, *, meta: dict, io: str = "read", mode: str = "sync",
        io_size: int = 4096, threads: int = 1, depth: int = 1, pattern: str = "seq",
        length: int | None = None, duration: str | None = None, total: int | None = None,
        warmup: str | None = None, verify: bool = False, timeout: float = 900) -> list[dict]:
    # An engine or mode that cannot run here stays so for the other points
    # (only skipped when running locally: the rig replays a fixed plan).
    key = ("phxbench", engine, mode, io)
    if ctx.mode == "local" and key in ctx.unavailable:
        return []
    cmd = [ctx.tool("phxbench"), "-f", path, "-x", engine, "-m", mode, "-i", io, "-a", pattern,
           "-s", size_arg(io_size), "-t", str(threads), "-q", str(depth), "--json", "--quiet"]
    if length is not None:
        cmd += ["-l", size_arg(length)]
    if duration is not None:
        cmd += ["--duration", duration]
    if total is not None:
        cmd += ["--total", size_arg(total)]
    if warmup is not None:
        cmd += ["--warmup", warmup]
    if verify:
        cmd.append("--verify")
    cmd += ctx.engine_args(engine)
    full_meta = {"experiment": ctx.experiment, "engine_name": engine, "mode_name": mode,
                 "io_name": io, **meta}
    records = ctx.run_json(cmd, timeout=timeout, meta=full_meta)
    if any(r.get("status") == "unavailable" for r in records):
        ctx.unavailable.add(key)
    return records


def breakdown(ctx, engine: str, *, meta: dict, extra: list[str],
              timeout: float = 1800) -> list[dict]:
    cmd = [ctx.tool("phx-breakdown"), "-x", engine, "--json", "--quiet", *extra,
           *ctx.engine_args(engine)]
    return ctx.run_json(cmd, timeout=timeout,
                        meta={"experiment": ctx.experiment, "engine_name": engine, **meta})


def bandwidth(rec: dict) -> float:
    return rec["result"]["bandwidth_gbps"]
