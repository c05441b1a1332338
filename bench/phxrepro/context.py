# SPDX-License-Identifier: MIT
"""What an experiment sees of the machine: its tools, scratch space, engines
and how commands run (here, or planned for the rig's guest and replayed)."""

from __future__ import annotations

import json
import os
import pathlib
import platform
import shlex
import socket
import subprocess
import sys
import time

# phxbench, phx-breakdown and the other tools exit 2 when an engine or mode
# cannot run on this machine or build: that is a result, not a failure.
EXIT_UNAVAILABLE = 2

ALL_ENGINES = ("direct", "compat", "cufile", "posix", "host")
# Peers an experiment runs only when --engines names them (fig11's kvikio
# row): never part of the default list.
OPT_IN_ENGINES = ("kvikio",)


class ToolError(RuntimeError):
    """A tool failed (exit status other than 0 and 2) or is missing."""


class Unavailable(RuntimeError):
    """The experiment cannot run here at all (e.g. no GPU for a GPU-only one)."""


def _machine_summary() -> dict:
    info = {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "arch": platform.machine(),
        "cpus": os.cpu_count(),
    }
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        gpus = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True).stdout.split("\n")
        info["gpus"] = [g.strip() for g in gpus if g.strip()]
    except (OSError, subprocess.SubprocessError):
        info["gpus"] = []
    return info


class Context:
    """Passed to every experiment's run() and plot().

    mode "local" runs commands now.  mode "plan" (the rig, first pass)
    records each command and returns no records; mode "replay" (the rig,
    second pass) returns the records the guest produced for the same
    command, in the same order, so run() needs no rig-specific code."""

    def __init__(self, *, build: pathlib.Path, out: pathlib.Path, scratch: pathlib.Path,
                 quick: bool, engines: list[str], emulated: bool, label: str | None,
                 mode: str = "local", tool_dir: str | None = None,
                 replay: list[dict] | None = None, machine: dict | None = None,
                 engine_args: dict[str, list[str]] | None = None, verbose: bool = False,
                 point_seconds: float | None = None, options: dict | None = None):
        self.build = build
        self.out = out
        self.scratch = scratch
        self.quick = quick
        self.engines = list(engines)
        self.emulated = emulated
        self.mode = mode
        self.verbose = verbose
        self.point_seconds = point_seconds
        # Settings of one experiment's own (--peers, --files...), by name.
        self.options = dict(options or {})
        self.machine_info = machine if machine is not None else _machine_summary()
        self._label = label
        self._tool_dir = tool_dir
        # Rig outputs per experiment, so a failing experiment cannot put the
        # next one out of step.
        self._replay: dict[str, list[dict]] = {}
        for done in replay or []:
            self._replay.setdefault(done["experiment"], []).append(done)
        self._engine_args = dict(engine_args or {})
        self.planned: list[dict] = []
        self.created: set = set()
        self.unavailable: set = set()
        self.experiment = ""

    # -- description -------------------------------------------------------
    @property
    def machine(self) -> str:
        m = self.machine_info
        gpus = ", ".join(m.get("gpus") or []) or "no GPU"
        return f"{m.get('hostname', '?')} ({m.get('cpus', '?')} cores, {gpus})"

    def label(self, engines: list[str] | None = None) -> str:
        parts = [self._label or self.machine]
        shown = engines if engines is not None else self.engines
        parts.append("engines: " + (", ".join(shown) if shown else "none recorded"))
        parts.append("EMULATED storage (QEMU TCG): relative numbers only" if self.emulated
                     else "storage: this machine's own disk")
        if self.quick:
            parts.append("quick sizes")
        return "; ".join(parts)

    def log(self, message: str) -> None:
        print(f"reproduce[{self.experiment}]: {message}", file=sys.stderr, flush=True)

    def duration(self, full: str) -> str:
        """How long one measured point runs: --point-seconds, else short
        with --quick, else the experiment's own choice."""
        if self.point_seconds is not None:
            return f"{max(1, int(self.point_seconds * 1000))}ms"
        return "300ms" if self.quick else full

    def warmup(self, full: str | None) -> str | None:
        if self.quick or full is None:
            return None
        if self.point_seconds is not None:
            return f"{max(1, int(self.point_seconds * 250))}ms"
        return full

    def wants(self, engine: str) -> bool:
        return engine in self.engines

    # -- tools ---------------------------------------------------------------
    def tool(self, name: str) -> str:
        if self._tool_dir is not None:
            return f"{self._tool_dir}/{name}"
        for candidate in (self.build / "tools" / name / name, self.build / name,
                          self.build / "bin" / name):
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
        raise ToolError(f"{name} is not built under {self.build} (build it, or pass --build DIR)")

    def engine_args(self, engine: str) -> list[str]:
        """Extra tool arguments for an engine here (in the rig: the
        phoenix engine's device memory is a BAR range, --device-addr)."""
        return list(self._engine_args.get(engine, []))

    def scratch_file(self, name: str) -> str:
        if self.mode == "local":
            self.scratch.mkdir(parents=True, exist_ok=True)
        return str(self.scratch / name)

    # -- running -----------------------------------------------------------
    def run_json(self, cmd: list[str], *, timeout: float | None = None,
                 meta: dict | None = None) -> list[dict]:
        """Runs a tool that prints JSON lines; returns them, each with
        meta merged in.  Exit 2 gives one {"status": "unavailable"} record
        with the tool's reason; other failures raise ToolError."""
        cmd = [str(c) for c in cmd]
        meta = dict(meta or {})
        if self.mode == "plan":
            self.planned.append({"experiment": self.experiment, "cmd": cmd, "timeout": timeout})
            return []
        if self.mode == "replay":
            queue = self._replay.get(self.experiment, [])
            if not queue:
                raise ToolError(f"no rig output left for {shlex.join(cmd)}")
            done = queue.pop(0)
            if done["cmd"] != cmd:
                raise ToolError("rig output out of step: planned "
                                f"{shlex.join(done['cmd'])}, now {shlex.join(cmd)}")
            return self._records(cmd, done["rc"], done["stdout"], done["stderr"], meta)
        if self.verbose:
            self.log("$ " + shlex.join(cmd))
        started = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired as exc:
            raise ToolError(f"{shlex.join(cmd)}: no result within {timeout} s") from exc
        if self.verbose:
            self.log(f"  exit {proc.returncode} after {time.monotonic() - started:.1f} s")
        return self._records(cmd, proc.returncode, proc.stdout, proc.stderr, meta)

    def _records(self, cmd: list[str], rc: int, stdout: str, stderr: str,
                 meta: dict) -> list[dict]:
        records = []
        for line in stdout.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                self.log(f"ignored a line that is not JSON: {line[:120]}")
                continue
            rec.update(meta)
            records.append(rec)
        if rc == EXIT_UNAVAILABLE:
            reason = (stderr.strip().splitlines() or ["(no reason printed)"])[-1]
            if not any(r.get("status") == "unavailable" for r in records):
                records.append({**meta, "status": "unavailable", "reason": reason,
                                "cmd": shlex.join(cmd)})
            return records
        if rc != 0:
            tail = "\n".join(stderr.strip().splitlines()[-5:])
            raise ToolError(f"{shlex.join(cmd)} exited {rc}:\n{tail}")
        return records
