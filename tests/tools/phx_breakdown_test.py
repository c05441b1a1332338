#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""phx-breakdown functional test: the host engine's records are complete
and self-consistent; engines this machine lacks and bad arguments exit 2.

Usage: phx_breakdown_test.py PHX_BREAKDOWN"""
import json
import os
import subprocess
import sys

STEPS = ["device_open", "file_open", "buf_register", "first_read", "read", "buf_deregister",
         "file_close", "device_close"]
FIELDS = {"schema", "tool", "version", "engine", "library_engine", "memory", "step", "size",
          "repeat", "count", "first_us", "mean_us", "min_us", "p50_us", "p95_us", "p99_us",
          "max_us", "device"}


def run(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True, check=False, timeout=120)


def main():
    tool = sys.argv[1]
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    r = run(tool, "-x", "host", "-r", "3", "-S", "4K", "-S", "1M", "--json", "--quiet")
    check(r.returncode == 0, f"host run exit {r.returncode}: {r.stderr}")
    records = [json.loads(line) for line in r.stdout.splitlines()]
    got = [(rec["step"], rec["size"]) for rec in records]
    want = [("register", 4096), ("deregister", 4096), ("register", 1 << 20),
            ("deregister", 1 << 20)]
    want += [(s, 65536 if s in ("buf_register", "first_read", "read", "buf_deregister") else 0)
             for s in STEPS]
    check(got == want, f"steps {got}")
    for rec in records:
        check(set(rec) == FIELDS, f"fields {sorted(rec)}")
        check(rec["schema"] == "phx-breakdown/1" and rec["engine"] == "host" and
              rec["library_engine"] == "host" and rec["memory"] == "host", f"record {rec}")
        check(rec["tool"] == "phx-breakdown" and rec["version"], f"head {rec}")
        check(rec["repeat"] == 3 and rec["count"] == 3, f"repeat {rec}")
        check(0 <= rec["min_us"] <= rec["p50_us"] <= rec["p95_us"] <= rec["p99_us"] <=
              rec["max_us"] and
              rec["min_us"] <= rec["mean_us"] <= rec["max_us"] and
              rec["min_us"] <= rec["first_us"] <= rec["max_us"], f"statistics {rec}")
    check(all(rec["mean_us"] > 0 for rec in records if rec["step"] in ("read", "first_read")),
          "reads took no time")

    r = run(tool, "-x", "host", "-r", "2", "-S", "64K")
    check(r.returncode == 0 and "buf_register" in r.stdout and "register" in r.stdout,
          f"table: {r.stdout}")

    if not os.path.exists("/dev/phxfs_dev0"):
        r = run(tool, "-x", "direct")
        check(r.returncode == 2 and "phxfs" in r.stderr, f"direct: {r.returncode} {r.stderr}")
        r = run(tool, "-x", "phoenix")  # the old name of direct
        check(r.returncode == 2 and "direct" in r.stderr, f"phoenix: {r.returncode} {r.stderr}")
    for bad in (["--bogus"], ["-x", "posix"], ["-r", "0"], ["-S", "4Q"], ["-S", "0"]):
        r = run(tool, *bad)
        check(r.returncode == 2 and r.stderr, f"{bad}: exit {r.returncode}")

    for f in failures:
        print("FAIL:", f)
    print(f"phx-breakdown: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
