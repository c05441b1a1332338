#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""phxfs-check smoke test: the JSON report is complete and tells the truth
about this machine; bad arguments exit 2."""
import json
import os
import subprocess
import sys
import tempfile


def run(tool, *args, env=None):
    return subprocess.run([tool, *args], capture_output=True, text=True, env=env, check=False)


def main():
    tool = sys.argv[1]
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory(dir="/var/tmp") as scratch:
        r = run(tool, "--json", "--path", scratch, "--path", "/nonexistent/phx")
        check(r.returncode == 0, f"--json exit {r.returncode}: {r.stderr}")
        report = json.loads(r.stdout)
        for key in ("tool_version", "library_version", "kernel", "kernel_config",
                    "phxfs_module", "iommu", "paths", "cuda", "nvidia", "engine"):
            check(key in report, f"missing key {key}")
        check(report["kernel"]["release"] == os.uname().release, "kernel release differs from uname")
        loaded = os.path.exists("/sys/module/phxfs")
        check(report["phxfs_module"]["loaded"] == loaded, "module state wrong")
        paths = {p["path"]: p for p in report["paths"]}
        check(paths[scratch]["o_direct"] is True, f"O_DIRECT on {scratch}: {paths[scratch]}")
        check(paths["/nonexistent/phx"]["error"], "missing path reported no error")
        # auto: the module's node, else a CUDA GPU (compat), else host memory.
        if os.path.exists("/dev/phxfs_dev0"):
            expected = "direct"
        elif report["cuda"]["available"] and report["cuda"]["devices"]:
            expected = "compat"
        else:
            expected = "host"
        check(report["engine"]["engine"] == expected, f"engine {report['engine']}")

    env = dict(os.environ, PHX_ENGINE="host")
    r = run(tool, "--json", env=env)
    engine = json.loads(r.stdout)["engine"]
    check(engine["engine"] == "host" and "PHX_ENGINE=host" in engine["reason"], f"env: {engine}")

    r = run(tool)
    check(r.returncode == 0 and "auto engine" in r.stdout, "human report")
    for bad in (["--device", "99"], ["--device", "x"], ["--bogus"]):
        r = run(tool, *bad)
        check(r.returncode == 2, f"{bad} exit {r.returncode}")

    for f in failures:
        print("FAIL:", f)
    print(f"phxfs-check report: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
