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
