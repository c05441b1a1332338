# SPDX-License-Identifier: MIT
"""Fig 8: end to end.  (a) a small request that registers its buffer,
reads and deregisters, against the read alone on a buffer registered
before (4 KiB - 1 MiB); (b) loading a 1/2/4 GiB file into device memory
with the driver, file and buffer steps around the read (10 loops).  Both
from phx-e2e, with the software share of the time."""

from __future__ import annotations

import os

from .. import phxbench
from ..plotting import color, figure, log2_size_axis, save, size_label
from ..records import measured, unavailable

NAME = "fig8"
TITLE = "End to end: per-request registration (Fig 8a) and large-file load (Fig 8b)"

E2E_ENGINES = ("direct", "compat", "cufile", "host", "posix")
# fig8b's steps other than the read, in the order they run.
OVERHEAD_STEPS = ("driver_open", "file_open", "buffer_alloc", "buffer_register",
                  "buffer_deregister", "buffer_free", "file_close", "driver_close")


def run(ctx) -> list[dict]:
    # phx-e2e writes its data files (the verification pattern) in --dir;
    # --reuse-files keeps them for the next engine (and the next run).
    data_dir = os.path.dirname(ctx.scratch_file("phx-e2e"))
    records = []
    for engine in phxbench.engines(ctx, E2E_ENGINES):
        cmd = [ctx.tool("phx-e2e"), "-x", engine, "--dir", data_dir, "--reuse-files", "--verify",
               "--json", "--quiet"]
        if ctx.quick:
            cmd.append("--quick")
        elif ctx.point_seconds is not None:
            # A run on a time budget (--point-seconds): 3 loads per file
            # size instead of the paper's 10, every byte still verified.
            cmd += ["--loops", "3"]
        cmd += ctx.engine_args(engine)
        records += ctx.run_json(cmd, timeout=3600,
                                meta={"experiment": ctx.experiment, "engine_name": engine})
    return records


def _fig8a(ax_latency, ax_share, rows) -> None:
    engines = sorted({r["engine"] for r in rows})
    for engine in engines:
        pts = sorted((r["size"], r["total_us"]["p50"], r["pure_read_us"]["p50"],
                      100 * r["software_share_p50"]) for r in rows if r["engine"] == engine)
        sizes = [p[0] for p in pts]
        request = "read (no registration)" if engine == "posix" else "register + read + deregister"
        ax_latency.plot(sizes, [p[1] for p in pts], marker="o", markersize=3, color=color(engine),
                        label=f"{engine}: {request}")
        ax_latency.plot(sizes, [p[2] for p in pts], marker="x", markersize=3, linestyle="--",
                        color=color(engine), label=f"{engine}: read alone")
        ax_share.plot(sizes, [p[3] for p in pts], marker="o", markersize=3, color=color(engine),
                      label=engine)
    all_sizes = [r["size"] for r in rows]
    for ax in (ax_latency, ax_share):
        log2_size_axis(ax, all_sizes)
        ax.set_xlabel("request size")
    ax_latency.set_yscale("log")
    ax_latency.set_ylabel("median latency (us, log)")
    ax_latency.set_title("Fig 8a: per-request registration", fontsize=9)
    ax_share.set_ylabel("software share of the request (%, medians)")
    ax_share.set_title("Fig 8a: (total - read alone) / total", fontsize=9)
    ax_share.axhline(0, color="black", linewidth=0.5)
    if engines:
        ax_latency.legend(fontsize=6)
        ax_share.legend(fontsize=7)


def _fig8b(ax, rows) -> None:
    rows = sorted(rows, key=lambda r: (r["file_size"], r["engine"]))
    labels = [f"{r['engine']}\n{size_label(r['file_size'])}" for r in rows]
    xs = range(len(rows))
    overhead = [sum((r["steps_us"][s] or {}).get("mean", 0) for s in OVERHEAD_STEPS) / 1e3
                for r in rows]
    read = [r["steps_us"]["read"]["mean"] / 1e3 for r in rows]
    ax.bar(xs, read, color=[color(r["engine"]) for r in rows], label="read")
    ax.bar(xs, overhead, bottom=read, color="#ffbb78", hatch="//", edgecolor="#444444",
           label="driver, file and buffer steps")
    for x, r, top in zip(xs, rows, (a + b for a, b in zip(read, overhead))):
        ax.annotate(f"{100 * r['software_share']:.0f}%", (x, top), ha="center", va="bottom",
                    fontsize=6)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=6)
    ax.set_ylabel("mean time per load (ms); label: software share")
    ax.set_title("Fig 8b: whole-file load into device memory", fontsize=9)
    if rows:
        ax.legend(fontsize=7)


def plot(records, ctx, png) -> None:
    rows = measured(records)
    a = [r for r in rows if r.get("figure") == "fig8a"]
    b = [r for r in rows if r.get("figure") == "fig8b"]
    engines = sorted({r["engine"] for r in a + b})
    fig, axes = figure(ctx, TITLE, ncols=3, engines=engines, width=5.6)
    _fig8a(axes[0][0], axes[0][1], a)
    _fig8b(axes[0][2], b)
    missing = sorted({(r.get("engine") or r.get("engine_name"), r.get("reason", ""))
                      for r in unavailable(records)})
    if missing:
        fig.text(0.01, 0.01, "not run here: " + "; ".join(
            f"{engine} ({reason[:70]})" for engine, reason in missing), fontsize=6)
    save(fig, png)
