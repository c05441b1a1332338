# SPDX-License-Identifier: MIT
"""JSON lines and CSV files of an experiment's records."""

from __future__ import annotations

import csv
import json
import os
import pathlib
import subprocess
import sys


def source_rev(root: pathlib.Path) -> str:
    """The commit a results set comes from.  A copied tree may carry no .git
    (or another one): PHX_SOURCE_REV, where set, names the commit measured."""
    if rev := os.environ.get("PHX_SOURCE_REV", "").strip():
        return rev
    try:
        return subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def flatten(record: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, name + "."))
        elif isinstance(value, list):
            flat[name] = json.dumps(value)
        else:
            flat[name] = value
    return flat


def write_jsonl(path: pathlib.Path, records: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for rec in records:
            out.write(json.dumps(rec, sort_keys=False) + "\n")


def read_jsonl(path: pathlib.Path) -> list[dict]:
    with open(path, encoding="utf-8") as src:
        return [json.loads(line) for line in src if line.strip()]


def write_csv(path: pathlib.Path, records: list[dict]) -> None:
    rows = [flatten(r) for r in records]
    columns: list[str] = []
    for row in rows:
        for key in row:
            if key not in columns:
                columns.append(key)
    with open(path, "w", encoding="utf-8", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def measured(records: list[dict]) -> list[dict]:
    """The records that carry a measurement (not 'unavailable' notes)."""
    return [r for r in records if r.get("status") != "unavailable"]


def unavailable(records: list[dict]) -> list[dict]:
    return [r for r in records if r.get("status") == "unavailable"]


def stdout_emitter():
    """For a worker process whose stdout carries JSON records: keeps a
    private copy of stdout for the records and points file descriptor 1
    and sys.stdout at stderr, so whatever the libraries print cannot
    interleave with them.  Returns emit(record), one flushed line each."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def emit(rec: dict) -> None:
        out.write(json.dumps(rec, default=str) + "\n")
        out.flush()

    return emit


def run_worker(script: str, job: dict, *, kind: str, timeout_s: float,
               env: dict | None = None) -> list[dict]:
    """Runs `python SCRIPT worker JOB` in a fresh process; the JSON records
    it printed, or one record of @kind saying why there are none (an error
    with the end of its stderr, or a timeout)."""
    try:
        done = subprocess.run([sys.executable, script, "worker", json.dumps(job)], env=env,
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return [{"kind": kind, **job, "status": "timeout"}]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return [{"kind": kind, **job, "status": "error", "error": done.stderr[-800:]}]
    return [json.loads(ln) for ln in lines]


def goal_ratio(goal: str, medians: dict, numerator, denominator, at_least: float) -> dict | None:
    """A goal's record: medians[numerator] / medians[denominator] against
    @at_least; None when either side was not measured."""
    if numerator not in medians or denominator not in medians:
        return None
    value = medians[numerator] / medians[denominator]
    return {"kind": "ratio", "goal": goal, "numerator": list(numerator),
            "denominator": list(denominator), "ratio": value, "at_least": at_least,
            "met": value >= at_least}


def manifest_header(schema: str, root: pathlib.Path, packages) -> dict:
    """What every results set's manifest starts with: its schema, the
    commit measured, when, the command, the machine (kernel, CPUs, GPUs by
    nvidia-smi) and the versions of @packages (None: not installed)."""
    import datetime
    import importlib.metadata

    versions = {}
    for name in packages:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    try:
        gpus = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, check=False).stdout.split("\n")
    except OSError:
        gpus = []
    return {"schema": schema, "git": source_rev(root),
            "started_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"),
            "command": " ".join([pathlib.Path(sys.argv[0]).name, *sys.argv[1:]]),
            "machine": {"kernel": os.uname().release, "cpus": os.cpu_count(),
                        "gpus": [g for g in gpus if g.strip()]},
            "versions": versions}


def add_round_arguments(parser) -> None:
    """The options every rotated-rounds run takes, with one set of defaults:
    a whole run stays inside one bounded GPU-machine command."""
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--caches", default="warm,cold")
    parser.add_argument("--budget-s", type=float, default=420)
    parser.add_argument("--job-timeout-s", type=float, default=120)
