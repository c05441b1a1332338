#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""phx-kvcache functional test.

1. The trace parser reproduces the statistics table of the traces' README
   (read from the README itself) for every trace file.
2. Replays with the host engine and --verify: synthetic traces whose
   answers are known, and a real trace; records carry consistent numbers.
3. A corrupted block fails --verify (exit 1) naming that block; the file is
   reused when intact; engines that cannot run here print an "unavailable"
   record and exit 2; malformed input exits 1 or 64 with a message.

Usage: phx_kvcache_test.py PHX_KVCACHE TRACES_DIR"""
import json
import os
import re
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]
TRACES = sys.argv[2]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def run(*args, expect=0):
    p = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True, timeout=300)
    if p.returncode != expect:
        failures.append(f"{args}: exit {p.returncode}, expected {expect}\n{p.stderr}{p.stdout}")
        print("FAIL:", failures[-1])
    records = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return p, records


def readme_table():
    rows = {}
    with open(os.path.join(TRACES, "README.md")) as f:
        for line in f:
            m = re.match(r"\|\s*([\w.-]+\.txt)\s*\|\s*([\d,]+)\s*\|\s*([\d,]+)\s*\|\s*([\d,]+)\s*\|", line)
            if m:
                rows[m.group(1)] = tuple(int(g.replace(",", "")) for g in m.groups()[1:])
    return rows


def test_parser_matches_readme():
    table = readme_table()
    check(len(table) == 4, f"README table has 4 traces, found {sorted(table)}")
    for name, (sequences, blocks, largest) in table.items():
        _, recs = run("--trace", os.path.join(TRACES, name), "--block-size", "16K", "--stats")
        check(len(recs) == 1, f"{name}: one stats record")
        if recs:
            r = recs[0]
            got = (r["sequences"], r["blocks"], r["largest_block"])
            check(got == (sequences, blocks, largest), f"{name}: parsed {got}, README says "
                  f"{(sequences, blocks, largest)}")
            check(r["file_bytes_needed"] == (largest + 1) * 16384, f"{name}: file bytes needed")


def write_trace(path, sequences):
    with open(path, "w") as f:
        for i, rounds in enumerate(sequences):
            f.write(f"Seq{i + 1} (conversation id: conv_{i}):\n")
            for j, ids in enumerate(rounds):
                f.write(f"Round {j + 1}-{'human' if j % 2 == 0 else 'gpt'}: [{', '.join(map(str, ids))}]\n")
            f.write("\n")


def check_record(r, name, sequences, blocks, bs):
    check(r["status"] == "ok", f"{name}: status {r.get('status')} {r.get('error', '')}")
    if r["status"] != "ok":
        return
    check(r["sequences"] == sequences, f"{name}: sequences {r['sequences']} != {sequences}")
    check(r["blocks"] == blocks, f"{name}: blocks {r['blocks']} != {blocks}")
    check(r["bytes"] == blocks * bs, f"{name}: bytes")
    check(r["block_size"] == bs, f"{name}: block size echoed")
    check(r["verified"] is True and r["blocks_checked"] == blocks and r["mismatches"] == 0,
          f"{name}: verified every block")
    check(1 <= r["requests"] <= blocks, f"{name}: {r['requests']} requests for {blocks} blocks")
    lat = r["latency_ms"]
    check(0 <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"], f"{name}: percentiles {lat}")
    check(0 < r["io_s"] <= r["e2e_s"], f"{name}: io_s {r['io_s']} within e2e_s {r['e2e_s']}")
    check(abs(r["bandwidth_GBps"] - r["bytes"] / r["io_s"] / 1e9) < 1e-6 * r["bandwidth_GBps"] + 1e-9,
          f"{name}: bandwidth is bytes / io_s")


def test_synthetic_replays(tmp):
    trace = os.path.join(tmp, "synthetic.txt")
    # Sequence 0: one contiguous run (merges); 1: scattered, reversed; 2: one block;
    # 3: more blocks than a ring of 8 holds, repeated ids.
    seqs = [[[0, 1, 2, 3], [4, 5, 6, 7]], [[40, 30, 20, 10]], [[99]],
            [list(range(50, 90)), [3, 3, 7]]]
    write_trace(trace, seqs)
    blocks = sum(len(r) for s in seqs for r in s)
    kv = os.path.join(tmp, "kv.bin")
    for bs, extra in ((8192, []), (16384, ["--queue-depth", "8"]), (65536, ["--max-request", "128K"])):
        _, recs = run("--trace", trace, "--block-size", bs, "--engine", "host", "--verify",
                      "--file", kv, *extra)
        check(len(recs) == 1, f"{bs}: one record")
        if recs:
            check_record(recs[0], f"synthetic {bs}", len(seqs), blocks, bs)
            check(os.path.getsize(kv) >= 100 * bs, f"{bs}: file covers block 99")
    # Without merging every block is a request; with merging fewer.
    _, merged = run("--trace", trace, "--block-size", "8K", "--engine", "host", "--file", kv)
    _, single = run("--trace", trace, "--block-size", "8K", "--engine", "host", "--file", kv,
                    "--no-merge")
    if merged and single:
        check(single[0]["requests"] == blocks, f"--no-merge: {single[0]['requests']} requests")
        check(merged[0]["requests"] < blocks, f"merging: {merged[0]['requests']} requests")
        check(merged[0]["verified"] is None, "no --verify: verified is null")
    # An intact file is reused, not rewritten.
    before = os.stat(kv).st_mtime_ns
    run("--trace", trace, "--block-size", "8K", "--engine", "host", "--file", kv)
    check(os.stat(kv).st_mtime_ns == before, "intact file was rewritten")
    # Corrupt block 30 at 8 KiB (the middle of the file: the reuse check does not look there).
    with open(kv, "r+b") as f:
        f.seek(30 * 8192 + 4096)
        f.write(b"\x00" * 8)
    p, recs = run("--trace", trace, "--block-size", "8K", "--engine", "host", "--verify",
                  "--file", kv, expect=1)
    check(bool(recs) and recs[0]["verified"] is False and recs[0]["mismatches"] == 1,
          f"corruption: {recs}")
    if recs:
        check(recs[0].get("first_mismatch", "").startswith("block 30 "),
              f"corruption names block 30: {recs[0].get('first_mismatch')}")
    # A pool too small for a sequence fails clearly.
    p, recs = run("--trace", trace, "--block-size", "8K", "--engine", "host", "--file", kv,
                  "--pool-blocks", "4", expect=1)
    check(bool(recs) and recs[0]["status"] == "failed" and "--pool-blocks" in recs[0]["error"],
          f"small pool: {recs}")


def test_real_trace(tmp):
    kv = os.path.join(tmp, "real.bin")
    _, recs = run("--trace", os.path.join(TRACES, "quality.txt"), "--block-size", "8K",
                  "--engine", "host", "--verify", "--file", kv)
    table = readme_table()
    if recs:
        check_record(recs[0], "quality.txt", table["quality.txt"][0], table["quality.txt"][1], 8192)


def test_unavailable_and_usage(tmp):
    trace = os.path.join(tmp, "tiny.txt")
    write_trace(trace, [[[0, 1]]])
    kv = os.path.join(tmp, "tiny.bin")
    # Without a GPU (or CUDA build) cufile cannot run: a record saying why, exit 2;
    # host in the same call still runs.  "gds" is the old name of cufile: the
    # record says cufile.
    p = subprocess.run([TOOL, "--trace", trace, "--engine", "host,gds", "--file", kv],
                       capture_output=True, text=True, timeout=60)
    recs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    gds = [r for r in recs if r["engine"] == "cufile"]
    host = [r for r in recs if r["engine"] == "host"]
    check(len(host) == 1 and host[0]["status"] == "ok", f"host next to gds: {recs}")
    if len(gds) == 1 and gds[0]["status"] == "unavailable":
        check(p.returncode == 2 and gds[0]["error"], f"unavailable gds: exit {p.returncode}")
    else:
        check(len(gds) == 1 and gds[0]["status"] == "ok" and p.returncode == 0,
              f"gds either runs or says why not: {recs}")
    # --device-addr is the direct engine's: host in the same call keeps its own pool.
    p = subprocess.run([TOOL, "--trace", trace, "--engine", "host", "--device-addr", "0x100000",
                        "--verify", "--file", kv], capture_output=True, text=True, timeout=60)
    recs = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    check(p.returncode == 0 and recs and recs[0]["verified"] is True
          and recs[0]["config"]["pool_memory"] == "host", f"host ignores --device-addr: {recs}")
    p, _ = run("--trace", trace, "--engine", "nosuch", "--file", kv, expect=64)
    check("unknown engine" in p.stderr, f"unknown engine message: {p.stderr}")
    p, _ = run("--trace", trace, "--block-size", "1000", "--file", kv, expect=64)
    check("4096" in p.stderr, f"bad block size message: {p.stderr}")
    bad = os.path.join(tmp, "bad.txt")
    with open(bad, "w") as f:
        f.write("Round 1-human: [1, 2]\n")
    p, _ = run("--trace", bad, "--file", kv, expect=1)
    check("bad.txt:1" in p.stderr and "before any Seq" in p.stderr, f"malformed trace: {p.stderr}")
    with open(bad, "w") as f:
        f.write("Seq1 (conversation id: x):\nRound 1-human: [1, x2]\n")
    p, _ = run("--trace", bad, "--file", kv, expect=1)
    check("bad.txt:2" in p.stderr, f"bad id names line 2: {p.stderr}")
    p, _ = run("--help")
    for option in ("--trace", "--block-size", "--engine", "--verify", "--file", "--device-addr",
                   "--pool-blocks", "--stats", "pinned"):
        check(option in p.stdout, f"--help lists {option}")


def main():
    test_parser_matches_readme()
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp")) as tmp:
        test_synthetic_replays(tmp)
        test_real_trace(tmp)
        test_unavailable_and_usage(tmp)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("phx-kvcache: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
