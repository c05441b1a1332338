# SPDX-License-Identifier: MIT
"""What fig9 (NVMe over Fabrics) and fig10 (NFS) share: where the remote
storage is and how a phxbench call reaches it.

Here (mode "local") the storage must already be set up (scripts/nvme-of,
scripts/nfs; docs/remote-storage.md) and named by an environment variable;
without it the experiment is unavailable.  In the rig every phxbench call
is wrapped by the guest's remote-bench.sh, which sets up NVMe-oF or NFS on
loopback over TCP, puts the device or mount in place of @REMOTE@ and tears
it down afterwards.  Over TCP (and Soft-RoCE) the kernel copies the received
bytes into device memory with the CPU: the records say so (data_path)."""

from __future__ import annotations

import os
import pathlib

from .. import phxbench
from ..context import Unavailable

GUEST_WRAPPER = "/phx/remote-bench.sh"
PLACEHOLDER = "@REMOTE@"
GUEST_FILES = {"remote-bench.sh": pathlib.Path(__file__).resolve().parents[3] / "tests" / "vm"
               / "remote" / "remote-bench.sh"}
ENGINES = ("direct", "posix", "host")
RIG_DATA_PATH = ("TCP over loopback in the rig: the kernel copies received data into device "
                 "memory with the CPU (not P2P)")


def storage(ctx, kind: str, env: str, how: str) -> tuple[list[str], str, str]:
    """(command prefix, path of the storage, data path label); kind is the
    rig's (remote-bench.sh's) name for it."""
    if ctx.mode == "local":
        path = os.environ.get(env)
        if not path:
            raise Unavailable(f"no remote storage named here: set {env} to {how} "
                              "(docs/remote-storage.md)")
        label = os.environ.get("PHX_REMOTE_DATA_PATH",
                               "as set up on this machine (RDMA NIC DMA is P2P; TCP is a CPU copy)")
        return [], path, label
    return [GUEST_WRAPPER, kind], PLACEHOLDER, RIG_DATA_PATH


def phxbench_read(ctx, prefix: list[str], engine: str, path: str, *, meta: dict, io_size: int,
                  threads: int, pattern: str, length: int, verify: bool) -> list[dict]:
    """One sync-read phxbench point through prefix; an engine that is
    unavailable once is not asked again here (the rig replays a fixed plan)."""
    key = ("remote", engine)
    if ctx.mode == "local" and key in ctx.unavailable:
        return []
    cmd = [*prefix, ctx.tool("phxbench"), "-f", path, "-x", engine, "-m", "sync", "-i", "read",
           "-a", pattern, "-s", phxbench.size_arg(io_size), "-t", str(threads), "-q", "1",
           "-l", phxbench.size_arg(length), "--duration", ctx.duration("2s"), "--json",
           "--quiet", *(["--verify"] if verify else []), *ctx.engine_args(engine)]
    records = ctx.run_json(cmd, timeout=900, meta={
        "experiment": ctx.experiment, "engine_name": engine, "mode_name": "sync",
        "io_name": "read", **meta})
    if any(r.get("status") == "unavailable" for r in records):
        ctx.unavailable.add(key)
    return records


def create(ctx, prefix: list[str], path: str, length: int) -> list[dict]:
    """Writes phxbench's verification pattern over [0, length) of path."""
    cmd = [*prefix, ctx.tool("phxbench"), "-f", path, "-x", "host", "-l",
           phxbench.size_arg(length), "--create", "-s", "1M", "-i", "read", "--json", "--quiet"]
    ctx.run_json(cmd, timeout=3600, meta={"experiment": ctx.experiment, "step": "create"})
    return []
