"""The rig's error type, its progress lines and running host commands."""

from __future__ import annotations

import shlex
import shutil
import subprocess


class RigError(Exception):
    """A problem with the rig or its inputs (not a test verdict)."""


def info(msg: str) -> None:
    print(f"vm: {msg}", flush=True)


def run_cmd(cmd, *, cwd=None, env=None, quiet=True, what=None) -> str:
    """Runs cmd; on failure raises RigError with its output."""
    proc = subprocess.run(
        cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE if quiet else None,
        stderr=subprocess.STDOUT if quiet else None, text=True)
    if proc.returncode != 0:
        out = (proc.stdout or "").strip()
        tail = "\n".join(out.splitlines()[-40:])
        raise RigError(f"{what or shlex.join(map(str, cmd))} failed (exit {proc.returncode})"
                       + (f":\n{tail}" if tail else ""))
    return proc.stdout or ""


def need_tools(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise RigError(f"missing tools: {' '.join(missing)} (run scripts/setup)")
