# SPDX-License-Identifier: MIT
"""Shared figure conventions: every plot names the machine, the engines and
whether the storage was emulated (the context's label)."""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

# One colour per engine across every figure.
ENGINE_COLORS = {
    "direct": "#d62728",
    "phoenix": "#d62728",  # fig12's method, and records from before the rename
    "compat": "#1f77b4",
    "cufile": "#2ca02c",
    "gds": "#2ca02c",  # records from before the rename
    "posix": "#7f7f7f",
    "host": "#9467bd",
    "ceiling": "#000000",
}


def color(engine: str) -> str:
    return ENGINE_COLORS.get(engine, "#17becf")


def engines_of(records) -> list[str]:
    """The engines named by successful @records: an engine's name or
    record, or a loader's engine per device."""
    found: set[str] = set()
    for r in records:
        if r.get("status", "ok") != "ok":
            continue
        for key in ("engine_name", "engine"):
            v = r.get(key)
            if isinstance(v, dict):
                v = v.get("name")
            if isinstance(v, str):
                found.add(v)
        if isinstance(r.get("engines"), dict):
            found.update(str(v) for v in r["engines"].values())
    return sorted(found)


def figure(ctx, title: str, *, ncols: int = 1, nrows: int = 1, engines=None,
           width: float = 6.4):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, 4.2 * nrows), squeeze=False)
    caption = "\n".join(textwrap.wrap(ctx.label(engines), 110))
    fig.suptitle(f"{title}\n{caption}", fontsize=9)
    return fig, axes


def size_label(n: float) -> str:
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{int(n // scale)}{unit}"
    return str(int(n))


def log2_size_axis(ax, sizes) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(sizes))
    ax.set_xticks(ticks)
    ax.set_xticklabels([size_label(s) for s in ticks], rotation=45, fontsize=7)


def save(fig, png, bottom: float = 0.0) -> None:
    """bottom: the share of the figure's height kept free below the axes
    (for notes drawn there with fig.text)."""
    fig.tight_layout(rect=(0, bottom, 1, 0.9))
    fig.savefig(png, dpi=110)
    plt.close(fig)


def series(ax, rows, *, x, y, key, label=None) -> None:
    """One line per key(row) (e.g. the engine), points sorted by x(row)."""
    groups: dict = {}
    for row in rows:
        groups.setdefault(key(row), []).append((x(row), y(row)))
    for name in sorted(groups):
        pts = sorted(groups[name])
        engine = name.split("/")[0] if isinstance(name, str) else str(name)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", markersize=3,
                label=label(name) if label else name, color=color(engine),
                linestyle="--" if isinstance(name, str) and "/" in name else "-")
    if groups:
        ax.legend(fontsize=7)
