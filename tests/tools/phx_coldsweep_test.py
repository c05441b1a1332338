#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""phx-coldsweep functional test: the blocks it cuts (from --start, aligned
or widened) are the ones a loader would read, its record counts them, and
bad arguments exit non-zero.

Usage: phx_coldsweep_test.py PHX_COLDSWEEP"""
import json
import os
import subprocess
import sys
import tempfile

PAGE = 4096


def run(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True, check=False, timeout=120)


def expected(size, block, start, widen):
    """(bytes, requested, reads) of one file as the tool should cut it."""
    first = start if widen else start // PAGE * PAGE
    requested = reads = 0
    for off in range(first, size, block):
        begin = off // PAGE * PAGE
        end = min(off + block, size)
        requested += (end - begin + PAGE - 1) // PAGE * PAGE
        reads += 1
    return size - first, requested, reads


def main():
    tool = sys.argv[1]
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as d:
        sizes = [(3 << 20) + 1234, 5 << 20]
        files = []
        for i, size in enumerate(sizes):
            path = os.path.join(d, f"f{i}.bin")
            with open(path, "wb") as f:
                f.write(os.urandom(size))
            files.append(path)
        block = 1 << 20
        for start, widen in [(0, False), (5000, False), (5000, True), (8192, True)]:
            for order in ("file", "ranges"):
                args = ["--buffered", "--threads", "3", "--block", "1M", "--order", order,
                        "--start", str(start)] + (["--widen"] if widen else []) + files
                r = run(tool, *args)
                what = f"start {start} widen {widen} order {order}"
                check(r.returncode == 0, f"{what}: exit {r.returncode}: {r.stderr}")
                if r.returncode != 0:
                    continue
                rec = json.loads(r.stdout)
                want = [expected(s, block, start, widen) for s in sizes]
                check(rec["status"] == "ok" and rec["start"] == str(start) and rec["widen"] == widen,
                      f"{what}: record {rec}")
                check(rec["bytes"] == sum(w[0] for w in want), f"{what}: bytes {rec['bytes']}")
                check(rec["requested_bytes"] == sum(w[1] for w in want),
                      f"{what}: requested {rec['requested_bytes']}")
                check(rec["reads"] == sum(w[2] for w in want), f"{what}: reads {rec['reads']}")
        # A widened unaligned start: neighbouring reads share a page, so the
        # reads ask for more than the blocks hold; aligned ones never do.
        r = run(tool, "--buffered", "--block", "1M", "--start", "5000", "--widen", files[1])
        rec = json.loads(r.stdout) if r.returncode == 0 else {}
        check(rec.get("requested_bytes", 0) > rec.get("bytes", 0), f"widened overlap: {rec}")
        r = run(tool, "--buffered", "--block", "1M", "--start", "8192", files[1])
        rec = json.loads(r.stdout) if r.returncode == 0 else {}
        check(rec.get("requested_bytes") == rec.get("bytes"), f"aligned: {rec}")

        # --start data: each file's blocks from its own safetensors data offset.
        shards = []
        for i, header in enumerate((b'{"a":1}', b'{"b":"' + b"x" * 5000 + b'"}')):
            path = os.path.join(d, f"s{i}.safetensors")
            with open(path, "wb") as f:
                f.write(len(header).to_bytes(8, "little") + header + os.urandom(2 << 20))
            shards.append((path, 8 + len(header), os.path.getsize(path)))
        for widen in (False, True):
            r = run(tool, "--buffered", "--block", "1M", "--start", "data",
                    *(["--widen"] if widen else []), *(p for p, _, _ in shards))
            rec = json.loads(r.stdout) if r.returncode == 0 else {}
            want = [expected(size, block, off, widen) for _, off, size in shards]
            check(rec.get("bytes") == sum(w[0] for w in want) and
                  rec.get("requested_bytes") == sum(w[1] for w in want) and
                  rec.get("reads") == sum(w[2] for w in want), f"data widen {widen}: {rec}")
        r = run(tool, "--buffered", "--start", "data", os.path.join(d, "f0.bin"))
        check(r.returncode != 0 and "header" in r.stderr, f"data of a file with no header: {r}")

        for bad in (["--block", "1000"], ["--method", "mmap"], ["--order", "random"]):
            r = run(tool, *bad, files[0])
            check(r.returncode != 0, f"{bad} accepted")
        r = run(tool, "--buffered", os.path.join(d, "missing.bin"))
        check(r.returncode != 0 and "missing.bin" in r.stderr, f"missing file: {r.stderr}")

    for f in failures:
        print("FAIL:", f)
    print(f"phx-coldsweep: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
