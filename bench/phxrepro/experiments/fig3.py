# SPDX-License-Identifier: MIT
"""Fig 3: buffer registration and deregistration latency against buffer
size (4 KiB - 16 MiB; full runs add 1 GiB and 4 GiB: no 16 MiB or 1 GiB
limit)."""

from __future__ import annotations

from .. import phxbench
from ..plotting import color, figure, log2_size_axis, save
from ..records import measured

NAME = "fig3"
TITLE = "Buffer registration / deregistration latency vs size (paper Fig 3)"

QUICK_SIZES = "4K,64K,1M,16M"


def run(ctx) -> list[dict]:
    extra = ["-r", "10"]
    if ctx.quick:
        extra += ["-S", *QUICK_SIZES.split(",")]
    else:
        extra.append("--large")
    records = []
    for engine in phxbench.engines(ctx, phxbench.BREAKDOWN_ENGINES):
        records += phxbench.breakdown(ctx, engine, meta={"point": "sweep"}, extra=extra)
    return [r for r in records
            if r.get("status") == "unavailable" or r.get("step") in ("register", "deregister")]


def plot(records, ctx, png) -> None:
    rows = [r for r in measured(records) if r.get("step") in ("register", "deregister")]
    engines = sorted({r["engine"] for r in rows})
    fig, axes = figure(ctx, TITLE, ncols=2, engines=engines)
    for ax, step in zip(axes[0], ("register", "deregister")):
        for engine in engines:
            pts = sorted((r["size"], r["p50_us"]) for r in rows
                         if r["engine"] == engine and r["step"] == step)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=engine,
                        color=color(engine))
        log2_size_axis(ax, [r["size"] for r in rows])
        ax.set_yscale("log")
        ax.set_title(step, fontsize=9)
        ax.set_xlabel("buffer size")
        ax.set_ylabel("median latency (us, log)")
        ax.legend(fontsize=8)
    save(fig, png)
