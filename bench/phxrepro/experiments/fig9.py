# SPDX-License-Identifier: MIT
"""Fig 9: 4 KiB random sync reads against threads over NVMe over Fabrics
(paper: NVMe-oF over RDMA, ConnectX-5).  Here: a namespace named by
PHX_NVMEOF_DEV (scripts/nvme-of initiator setup prints it; only read); in
the rig NVMe-oF/TCP on loopback exporting the emulated NVMe disk, whose
first 64 MiB get phxbench's pattern so every read is verified."""

from __future__ import annotations

from .. import phxbench
from ..plotting import figure, save, series
from ..records import measured
from . import remote_storage

NAME = "fig9"
TITLE = "4 KiB sync random read vs threads over NVMe-oF (paper Fig 9)"
GUEST_FILES = remote_storage.GUEST_FILES


def run(ctx) -> list[dict]:
    prefix, dev, data_path = remote_storage.storage(
        ctx, "nvmeof-tcp", "PHX_NVMEOF_DEV",
        "a connected NVMe-oF namespace such as /dev/nvme2n1 (only read)")
    if ctx.quick:
        length, threads = 64 << 20, [1, 2, 4]
    else:
        length, threads = 10 << 30, [1, 2, 4, 8, 16, 32, 64]
    # Only in the rig is the remote disk ours to overwrite.
    verify = ctx.mode != "local"
    if verify:
        remote_storage.create(ctx, prefix, dev, length)
    records = []
    for engine in remote_storage.ENGINES:
        if not ctx.wants(engine):
            continue
        for t in threads:
            records += remote_storage.phxbench_read(
                ctx, prefix, engine, dev, io_size=4096, threads=t, pattern="rand",
                length=length, verify=verify,
                meta={"point": t, "transport": "nvmeof", "data_path": data_path})
    return records


def plot(records, ctx, png) -> None:
    rows = [r for r in measured(records) if "result" in r]
    fig, axes = figure(ctx, TITLE, ncols=2, engines=sorted({r["engine_name"] for r in rows}))
    series(axes[0][0], rows, x=lambda r: r["config"]["threads"], y=phxbench.bandwidth,
           key=lambda r: r["engine_name"])
    series(axes[0][1], rows, x=lambda r: r["config"]["threads"],
           y=lambda r: r["result"]["iops"] / 1e3, key=lambda r: r["engine_name"])
    for ax, ylabel in zip(axes[0], ("GB/s", "kIOPS")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("threads")
        ax.set_ylabel(ylabel)
    if rows:
        axes[0][0].set_title(rows[0].get("data_path", ""), fontsize=7)
    save(fig, png)
