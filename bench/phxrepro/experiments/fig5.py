# SPDX-License-Identifier: MIT
"""Fig 5: 4 KiB sync random reads against threads (paper: 1 - 512)."""

from __future__ import annotations

from .. import phxbench
from ..plotting import figure, save, series
from ..records import measured

NAME = "fig5"
TITLE = "4 KiB sync random read vs threads (paper Fig 5)"


def run(ctx) -> list[dict]:
    if ctx.quick:
        length, threads, duration, warmup = 64 << 20, [1, 2, 4, 8], "300ms", None
    else:
        length, threads, duration, warmup = 10 << 30, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512], \
            "2s", "300ms"
    path = ctx.scratch_file("fig4.bin")
    phxbench.create_file(ctx, path, length)
    records = []
    for engine in phxbench.engines(ctx):
        for t in threads:
            records += phxbench.run(ctx, engine, path, meta={"point": t}, io_size=4096,
                                    threads=t, pattern="rand", length=length,
                                    duration=ctx.duration(duration), warmup=ctx.warmup(warmup), verify=ctx.quick)
    return records


def plot_vs_threads(records, ctx, title: str):
    """GB/s and kIOPS against threads, a line per engine (also fig9's);
    returns the figure and the records drawn."""
    rows = [r for r in measured(records) if "result" in r]
    fig, axes = figure(ctx, title, ncols=2, engines=sorted({r["engine_name"] for r in rows}))
    series(axes[0][0], rows, x=lambda r: r["config"]["threads"], y=phxbench.bandwidth,
           key=lambda r: r["engine_name"])
    series(axes[0][1], rows, x=lambda r: r["config"]["threads"],
           y=lambda r: r["result"]["iops"] / 1e3, key=lambda r: r["engine_name"])
    for ax, ylabel in zip(axes[0], ("GB/s", "kIOPS")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("threads")
        ax.set_ylabel(ylabel)
    return fig, rows


def plot(records, ctx, png) -> None:
    fig, _ = plot_vs_threads(records, ctx, TITLE)
    save(fig, png)
