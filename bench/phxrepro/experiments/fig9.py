# SPDX-License-Identifier: MIT
"""Fig 9: 4 KiB random sync reads against threads over NVMe over Fabrics
(paper: NVMe-oF over RDMA, ConnectX-5).  Here: a namespace named by
PHX_NVMEOF_DEV (scripts/nvme-of initiator setup prints it; only read); in
the rig NVMe-oF/TCP on loopback exporting the emulated NVMe disk, whose
first 64 MiB get phxbench's pattern so every read is verified."""

from __future__ import annotations

from ..plotting import save
from . import remote_storage
from .fig5 import plot_vs_threads

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
    fig, rows = plot_vs_threads(records, ctx, TITLE)
    if rows:
        fig.axes[0].set_title(rows[0].get("data_path", ""), fontsize=7)
    save(fig, png)
