# SPDX-License-Identifier: MIT
"""Fig 6: asynchronous reads against I/O size, one thread, 16 in flight:
io_uring (async) where the engine's memory has a host view, and CUDA
stream-ordered I/O (stream) where there is a GPU (paper: 20 GiB file)."""

from __future__ import annotations

from .. import phxbench
from ..plotting import figure, log2_size_axis, save, series
from ..records import measured

NAME = "fig6"
TITLE = "Async read bandwidth vs I/O size, 1 thread, 16 in flight (paper Fig 6)"
DEPTH = 16


def run(ctx) -> list[dict]:
    if ctx.quick:
        length, io_sizes, duration, warmup = 64 << 20, phxbench.sizes("4K,64K,1M"), "300ms", None
    else:
        length = 10 << 30
        io_sizes = phxbench.sizes("4K,16K,64K,256K,1M,4M,16M,64M")
        duration, warmup = "2s", "500ms"
    path = ctx.scratch_file("fig4.bin")
    phxbench.create_file(ctx, path, length)
    records = []
    for engine in phxbench.engines(ctx):
        for mode in phxbench.queued_modes(engine, "async"):
            for size in io_sizes:
                records += phxbench.run(ctx, engine, path, meta={"point": size}, mode=mode,
                                        io_size=size, depth=DEPTH, length=length,
                                        duration=ctx.duration(duration), warmup=ctx.warmup(warmup), verify=ctx.quick)
    return records


def plot(records, ctx, png) -> None:
    rows = [r for r in measured(records) if "result" in r]
    fig, axes = figure(ctx, TITLE, engines=sorted({r["engine_name"] for r in rows}), width=8)
    ax = axes[0][0]
    series(ax, rows, x=lambda r: r["config"]["io_size"], y=phxbench.bandwidth,
           key=lambda r: f"{r['engine_name']}/{r['mode_name']}")
    log2_size_axis(ax, [r["config"]["io_size"] for r in rows] or [4096])
    ax.set_xlabel("I/O size")
    ax.set_ylabel("GB/s")
    save(fig, png)
