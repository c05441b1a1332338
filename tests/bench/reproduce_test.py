#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/reproduce all --quick on this machine: every experiment must give
records, a CSV and a plot, and every measured record that verified data
must have found it right.  Usage: reproduce_test.py REPO BUILD_DIR"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile

REMOTE_ENV = {"fig9": "PHX_NVMEOF_DEV", "fig10": "PHX_NFS_DIR"}


def main() -> int:
    repo, build = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    failures = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        out = pathlib.Path(tmp) / "out"
        proc = subprocess.run(
            [sys.executable, repo / "bench" / "reproduce", "all", "--quick", "--build", build,
             "--out", out, "--scratch", pathlib.Path(tmp) / "scratch"],
            capture_output=True, text=True, timeout=1200, check=False)
        if proc.returncode != 0:
            print(proc.stderr[-4000:])
            failures.append(f"reproduce exited {proc.returncode}")
        manifest = json.loads((out / "manifest.json").read_text())
        listed = subprocess.run([sys.executable, repo / "bench" / "reproduce", "--list"],
                                capture_output=True, text=True, check=True).stdout.split()
        for name, status in manifest["experiments"].items():
            # A results set names the commit and the command that made it.
            if not status.get("git") or not status.get("command", "").startswith("bench/reproduce all"):
                failures.append(f"{name}: the manifest does not name its revision and command")
            # Remote storage (fig9 NVMe-oF, fig10 NFS) is only here when set
            # up and named (docs/remote-storage.md); otherwise they must say so.
            if name in REMOTE_ENV and status.get("status") == "unavailable" and \
                    not os.environ.get(REMOTE_ENV[name]):
                if REMOTE_ENV[name] not in status.get("reason", ""):
                    failures.append(f"{name}: unavailable without naming {REMOTE_ENV[name]}")
                continue
            if status.get("status") != "ok":
                failures.append(f"{name}: {status}")
                continue
            for suffix in ("jsonl", "csv", "png"):
                path = out / f"{name}.{suffix}"
                if not path.exists() or path.stat().st_size == 0:
                    failures.append(f"{name}: no {path.name}")
            records = [json.loads(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
            measured = [r for r in records if r.get("status") != "unavailable"]
            if not measured:
                failures.append(f"{name}: no measured record (all engines unavailable?)")
            for r in measured:
                verify = r.get("verify")
                if isinstance(verify, dict) and verify.get("ran") and verify.get("ok") is not True:
                    failures.append(f"{name}: a verified run found wrong bytes: {r.get('config')}")
        missing = [n for n in listed if n in ("table2", "fig3", "fig4", "fig5", "fig6", "fig7",
                                              "fig8", "fig11", "fig12")
                   and n not in manifest["experiments"]]
        if missing:
            failures.append(f"experiments not run: {missing}")
    for f in failures:
        print("FAIL:", f)
    print(f"reproduce quick: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
