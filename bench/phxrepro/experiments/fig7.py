# SPDX-License-Identifier: MIT
"""Fig 7: latency of a batch of 4 KiB reads against the batch size (paper:
1 - 256): io_uring batches where the engine's memory has a host view,
stream-ordered batches where there is a GPU."""

from __future__ import annotations

from .. import phxbench
from ..plotting import figure, save, series
from ..records import measured

NAME = "fig7"
TITLE = "4 KiB batch latency vs batch size (paper Fig 7)"


def run(ctx) -> list[dict]:
    if ctx.quick:
        length, batches, duration = 64 << 20, [1, 4, 16, 64], "300ms"
    else:
        length, batches, duration = 10 << 30, [1, 2, 4, 8, 16, 32, 64, 128, 256], "2s"
    path = ctx.scratch_file("fig4.bin")
    phxbench.create_file(ctx, path, length)
    records = []
    for engine in phxbench.engines(ctx):
        for mode in phxbench.queued_modes(engine, "batch"):
            for depth in batches:
                records += phxbench.run(ctx, engine, path, meta={"point": depth}, mode=mode,
                                        io_size=4096, depth=depth, pattern="rand",
                                        length=length, duration=ctx.duration(duration), verify=ctx.quick)
    return records


def plot(records, ctx, png) -> None:
    rows = [r for r in measured(records) if "result" in r]
    fig, axes = figure(ctx, TITLE, ncols=2, engines=sorted({r["engine_name"] for r in rows}))
    key = lambda r: f"{r['engine_name']}/{r['mode_name']}"  # noqa: E731
    series(axes[0][0], rows, x=lambda r: r["config"]["depth"],
           y=lambda r: r["result"]["latency_us"]["p50"], key=key)
    series(axes[0][1], rows, x=lambda r: r["config"]["depth"],
           y=lambda r: r["result"]["latency_us"]["p99"], key=key)
    for ax, what in zip(axes[0], ("median", "p99")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch size (4 KiB requests)")
        ax.set_ylabel(f"{what} batch latency (us)")
    save(fig, png)
