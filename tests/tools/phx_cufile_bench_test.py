#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""phx-cufile-bench against the shim on the fake CUDA driver: every record
parses, names the shim as the library measured, every step gave one, and
both data checks passed.  Not timed.  A library that does not load is an
"unavailable" record and exit 2.
Usage: phx_cufile_bench_test.py TOOL SHIM FAKE_CUDA"""

import json
import os
import subprocess
import sys
import tempfile


def run(tool, env, *args):
    proc = subprocess.run([tool, *args], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc, records


def main() -> int:
    tool, shim, fake = sys.argv[1:4]
    env = dict(os.environ, PHX_CUDA_DRIVER=fake, PHX_FAKE_CUDA_DEVICES="1", PHX_ENGINE="auto")
    failures = []
    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        proc, records = run(tool, env, "--cufile-library", shim, "--file",
                            os.path.join(tmp, "f.bin"), "--create", "--file-size", "2M",
                            "--register-sizes", "4K,1M", "--io-sizes", "4K,64K",
                            "--iterations", "50", "--repeat", "2")
        if proc.returncode != 0:
            failures.append(f"exit {proc.returncode}: {proc.stderr[-1000:]}")
        kinds = [(r["kind"], r["api"]) for r in records]
        for want in [("library", "cufile"), ("driver_open", "cufile"), ("device_open", "phx"),
                     ("buf_register", "cufile"), ("buf_register", "phx"), ("call", "cufile"),
                     ("call", "phx"), ("call_overhead", "cufile"), ("driver_close", "cufile")]:
            if want not in kinds:
                failures.append(f"no {want} record")
        for r in records:
            if r.get("schema") != "phx-cufile-bench/1" or r.get("status") != "ok":
                failures.append(f"record not ok: {r}")
            if r["api"] == "cufile" and (r.get("implementation") != "phoenix" or
                                         os.path.realpath(r["library"]) != os.path.realpath(shim)):
                failures.append(f"not the shim: {r.get('library')} {r.get('implementation')}")
            if r["kind"] == "call":
                if r["verify"] != {"ran": True, "ok": True, "file_offset": r["verify"].get(
                        "file_offset")} or r["call"]["count"] != 50:
                    failures.append(f"call record: {r}")
            if r["kind"] == "buf_register" and r["register"]["count"] != 2:
                failures.append(f"buf_register record: {r}")
        sizes = sorted(r["size"] for r in records if r["kind"] == "call_overhead")
        if sizes != [4096, 65536]:
            failures.append(f"call_overhead sizes {sizes}")

        proc, records = run(tool, env, "--cufile-library", os.path.join(tmp, "none.so"),
                            "--steps", "driver_open")
        if proc.returncode != 2 or [r.get("status") for r in records] != ["unavailable"]:
            failures.append(f"missing library: exit {proc.returncode}, records {records}")
    for f in failures:
        print("FAIL:", f)
    print(f"phx-cufile-bench smoke: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
