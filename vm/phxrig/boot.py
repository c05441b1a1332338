"""Running QEMU to the end: readiness and timeouts, and backtraces asked of
a hung guest before it is killed."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from .common import info


@dataclass
class Boot:
    accel: str
    wall_s: float = 0.0
    init_s: float | None = None       # guest uptime when /init was ready
    ready_s: float | None = None      # host seconds from QEMU start to PHX-INIT
    timed_out: bool = False
    stalled: bool = False             # killed because /init never got ready
    qemu_rc: int | None = None
    qemu_out: str = ""


def ask_for_backtraces(monitor: Path) -> None:
    """Before a hung guest is killed: magic SysRq through the emulated
    keyboard (QEMU monitor sendkey) for console loglevel 9, blocked tasks
    (w) and every CPU's backtrace (l), so the console log shows the hang."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sk:
            sk.settimeout(2)
            sk.connect(str(monitor))
            for key in ("9", "w", "l"):
                sk.sendall(f"sendkey alt-sysrq-{key}\n".encode())
                time.sleep(1)
            time.sleep(3)
    except OSError as e:
        info(f"could not ask the hung guest for backtraces: {e}")


def boot(cmd: list[str], work: Path, accel: str, timeout: float, ready_timeout: float,
         monitor: Path | None = None) -> Boot:
    """Runs QEMU to the end; kills it after timeout seconds, or after
    ready_timeout if the guest's /init has not reported PHX-INIT by then."""
    b = Boot(accel)
    report = work / "report.log"
    t0 = time.monotonic()
    with open(work / "qemu.log", "w") as qlog:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=qlog,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            while True:
                try:
                    b.qemu_rc = proc.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic() - t0
                if b.ready_s is None and report.is_file():
                    with open(report, "rb") as f:
                        if re.search(rb"^PHX-INIT(-ERROR)? ", f.read(1 << 16), re.M):
                            b.ready_s = now
                if now > timeout or (b.ready_s is None and now > ready_timeout):
                    b.timed_out = True
                    b.stalled = b.ready_s is None
                    if monitor is not None:
                        ask_for_backtraces(monitor)
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    break
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    b.wall_s = time.monotonic() - t0
    if b.ready_s is None and report.is_file() and \
            re.search(rb"^PHX-INIT(-ERROR)? ", report.read_bytes()[:1 << 16], re.M):
        b.ready_s = b.wall_s  # became ready just before QEMU ended
    b.qemu_out = (work / "qemu.log").read_text(errors="replace")
    return b
