# SPDX-License-Identifier: MIT
"""Fig 4: sync read and write bandwidth against I/O size, one thread, queue
depth 1 (paper: 4 KiB - 1 GiB on a 10 GiB file)."""

from __future__ import annotations

from .. import phxbench
from ..plotting import figure, log2_size_axis, save, series
from ..records import measured

NAME = "fig4"
TITLE = "Sync read/write bandwidth vs I/O size, 1 thread, QD1 (paper Fig 4)"


def plan(ctx):
    if ctx.quick:
        return 64 << 20, phxbench.sizes("4K,64K,1M,16M"), "300ms", None
    return 10 << 30, phxbench.sizes("4K,16K,64K,256K,1M,4M,16M,64M,256M,1G"), "2s", "500ms"


def run(ctx) -> list[dict]:
    length, io_sizes, duration, warmup = plan(ctx)
    path = ctx.scratch_file("fig4.bin")
    phxbench.create_file(ctx, path, length)
    records = []
    for engine in phxbench.engines(ctx):
        for io in ("read", "write"):
            for size in io_sizes:
                records += phxbench.run(ctx, engine, path, meta={"point": size}, io=io,
                                        io_size=size, length=length, duration=ctx.duration(duration),
                                        warmup=ctx.warmup(warmup), verify=ctx.quick)
    return records


def plot(records, ctx, png) -> None:
    rows = [r for r in measured(records) if "result" in r]
    fig, axes = figure(ctx, TITLE, ncols=2, engines=sorted({r["engine_name"] for r in rows}))
    for ax, io in zip(axes[0], ("read", "write")):
        part = [r for r in rows if r["io_name"] == io]
        series(ax, part, x=lambda r: r["config"]["io_size"], y=phxbench.bandwidth,
               key=lambda r: r["engine_name"])
        log2_size_axis(ax, [r["config"]["io_size"] for r in part] or [4096])
        ax.set_title(io, fontsize=9)
        ax.set_xlabel("I/O size")
        ax.set_ylabel("GB/s")
    save(fig, png)
