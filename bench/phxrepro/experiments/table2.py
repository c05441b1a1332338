# SPDX-License-Identifier: MIT
"""Table 2 (and the setting of Table 1): the steps around a 64 KiB sync read
per engine: device (driver) open/close, file open/close, buffer
registration/deregistration, first and later reads."""

from __future__ import annotations

from .. import phxbench
from ..plotting import color, figure, save
from ..records import measured

NAME = "table2"
TITLE = "Driver, file and buffer management around a 64 KiB read (paper Table 2)"


def run(ctx) -> list[dict]:
    records = []
    for engine in phxbench.engines(ctx, phxbench.BREAKDOWN_ENGINES):
        records += phxbench.breakdown(ctx, engine, meta={"point": "steps"},
                                      extra=["-S", "64K", "-r", "10"])
    # The registration sweep at 64 KiB repeats buf_register/buf_deregister.
    return [r for r in records
            if r.get("status") == "unavailable" or r.get("step") not in ("register", "deregister")]


def plot(records, ctx, png) -> None:
    rows = [r for r in measured(records) if "step" in r]
    steps = []
    for r in rows:
        if r["step"] not in steps:
            steps.append(r["step"])
    engines = sorted({r["engine"] for r in rows})
    fig, axes = figure(ctx, TITLE, engines=engines, width=9)
    ax = axes[0][0]
    width = 0.8 / max(1, len(engines))
    for i, engine in enumerate(engines):
        values = {r["step"]: r["p50_us"] for r in rows if r["engine"] == engine}
        xs = [k + i * width for k, s in enumerate(steps) if s in values]
        ys = [max(values[s], 1e-3) for s in steps if s in values]
        ax.bar(xs, ys, width=width, label=engine, color=color(engine))
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(steps))])
    ax.set_xticklabels(steps, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("median time (us, log)")
    ax.legend(fontsize=8)
    save(fig, png)
