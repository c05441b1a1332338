# SPDX-License-Identifier: MIT
"""Fig 10: sync sequential reads against I/O size (4 KiB - 1 MiB) over NFS
(paper: NFS over RDMA).  Here: a file in the folder named by PHX_NFS_DIR
(an NFS mount, e.g. from scripts/nfs client setup); in the rig NFSv4/TCP on
loopback, exported from the emulated ext4 disk.  Every read is verified."""

from __future__ import annotations

from .. import phxbench
from ..plotting import figure, log2_size_axis, save, series
from ..records import measured
from . import remote_storage

NAME = "fig10"
TITLE = "Sync read bandwidth vs I/O size over NFS (paper Fig 10)"
GUEST_FILES = remote_storage.GUEST_FILES
SIZES = "4K,16K,64K,256K,1M"


def run(ctx) -> list[dict]:
    prefix, folder, data_path = remote_storage.storage(
        ctx, "nfs-tcp", "PHX_NFS_DIR", "a writable folder on an NFS mount such as /mnt/nfs")
    length = 64 << 20 if ctx.quick else 4 << 30
    path = f"{folder}/phx-fig10.bin"
    remote_storage.create(ctx, prefix, path, length)
    records = []
    for engine in remote_storage.ENGINES:
        if not ctx.wants(engine):
            continue
        for size in phxbench.sizes(SIZES):
            records += remote_storage.phxbench_read(
                ctx, prefix, engine, path, io_size=size, threads=1, pattern="seq",
                length=length, verify=True,
                meta={"point": size, "transport": "nfs", "data_path": data_path})
    return records


def plot(records, ctx, png) -> None:
    rows = [r for r in measured(records) if "result" in r]
    fig, axes = figure(ctx, TITLE, ncols=1, engines=sorted({r["engine_name"] for r in rows}))
    ax = axes[0][0]
    series(ax, rows, x=lambda r: r["config"]["io_size"], y=phxbench.bandwidth,
           key=lambda r: r["engine_name"])
    log2_size_axis(ax, [r["config"]["io_size"] for r in rows] or [4096])
    ax.set_xlabel("I/O size")
    ax.set_ylabel("GB/s")
    if rows:
        ax.set_title(rows[0].get("data_path", ""), fontsize=7)
    save(fig, png)
