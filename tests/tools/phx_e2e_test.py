#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""phx-e2e functional test on the CPU engines (host, posix): every record
validates against docs/phx-e2e-schema.json and its numbers agree with each
other and with the configuration; --verify checks every byte read and
catches a corrupted byte at its offset (exit 3); engines this machine lacks
give "unavailable" records and exit 2; bad flags exit 2 with a message.

Usage: phx_e2e_test.py PHX_E2E SCHEMA"""
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from phxbench_test import SchemaError, validate  # noqa: E402  (the shared validator)

MIB = 1 << 20
STEPS = ["driver_open", "file_open", "buffer_alloc", "buffer_register", "read",
         "buffer_deregister", "buffer_free", "file_close", "driver_close"]
STATS = {"count", "first", "mean", "min", "p50", "p95", "p99", "max"}


class Test:
    def __init__(self, tool, schema):
        self.tool = tool
        self.schema = schema
        self.failures = []

    def check(self, cond, what):
        if not cond:
            self.failures.append(what)
        return cond

    def run(self, *args):
        return subprocess.run([self.tool, *map(str, args)], capture_output=True, text=True,
                              check=False, timeout=300)

    def records(self, *args, expect_rc=0):
        r = self.run(*args, "--json", "--quiet")
        label = " ".join(map(str, args))
        self.check(r.returncode == expect_rc,
                   f"[{label}] exit {r.returncode}, expected {expect_rc}: {r.stderr}")
        recs = []
        for line in r.stdout.splitlines():
            try:
                rec = json.loads(line)
                validate(rec, self.schema)
                recs.append(rec)
            except (json.JSONDecodeError, SchemaError) as e:
                self.check(False, f"[{label}] record {line[:200]}: {e}")
        return recs

    def stats(self, s, count, label):
        if not self.check(isinstance(s, dict) and set(s) == STATS, f"{label}: stats {s}"):
            return
        self.check(s["count"] == count, f"{label}: count {s['count']} != {count}")
        self.check(0 <= s["min"] <= s["p50"] <= s["p95"] <= s["p99"] <= s["max"] and
                   s["min"] <= s["mean"] <= s["max"] and s["min"] <= s["first"] <= s["max"],
                   f"{label}: statistics {s}")

    def close(self, a, b, label):
        self.check(abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b)), f"{label}: {a} != {b}")

    def fig8a(self, rec, engine, size, repeat, warmup, verify):
        label = f"fig8a {engine} {size}"
        self.check(rec["status"] == "ok" and rec["engine"] == engine and rec["size"] == size and
                   rec["repeat"] == repeat, f"{label}: {rec}")
        registers = engine != "posix"
        self.check(rec["registers"] is registers, f"{label}: registers {rec['registers']}")
        for key in ("total_us", "pure_read_us", "read_us") + (
                ("register_us", "deregister_us") if registers else ()):
            self.stats(rec[key], repeat, f"{label} {key}")
        if not registers:
            self.check(rec["register_us"] is None and rec["deregister_us"] is None and
                       rec["registration_vs_read"] is None, f"{label}: posix registration")
            self.close(rec["total_us"]["mean"], rec["read_us"]["mean"], f"{label} total=read")
        else:
            parts = rec["register_us"]["mean"] + rec["read_us"]["mean"] + \
                rec["deregister_us"]["mean"]
            self.close(rec["total_us"]["mean"], parts, f"{label} total=reg+read+dereg")
            self.close(rec["registration_vs_read"],
                       (rec["register_us"]["mean"] + rec["deregister_us"]["mean"]) /
                       rec["pure_read_us"]["mean"], f"{label} registration_vs_read")
        total, pure = rec["total_us"]["mean"], rec["pure_read_us"]["mean"]
        self.close(rec["software_share"], (total - pure) / total, f"{label} software_share")
        self.check(pure > 0 and rec["read_us"]["min"] > 0, f"{label}: reads took no time")
        v = rec["verify"]
        if verify:
            # Warm-up requests are checked too: (warmup + repeat) of each kind.
            self.check(v["ran"] and v["ok"] is True and
                       v["bytes_checked"] == 2 * (warmup + repeat) * size and
                       v["mismatched_reads"] == 0 and v["first_mismatch_offset"] is None,
                       f"{label}: verify {v}")
        else:
            self.check(not v["ran"] and v["ok"] is None and v["bytes_checked"] == 0,
                       f"{label}: verify {v}")

    def fig8b(self, rec, engine, file_size, loops, threads, chunk, verify):
        label = f"fig8b {engine} {file_size}"
        self.check(rec["status"] == "ok" and rec["engine"] == engine and
                   rec["file_size"] == file_size and rec["loops"] == loops and
                   rec["threads"] == threads and rec["chunk"] == chunk, f"{label}: {rec}")
        steps = rec["steps_us"]
        self.check(list(steps) == STEPS, f"{label}: steps {list(steps)}")
        absent = {"driver_open", "buffer_register", "buffer_deregister", "driver_close"} \
            if engine == "posix" else set()
        total = 0.0
        for name in STEPS:
            if name in absent:
                self.check(steps[name] is None, f"{label}: {name} should be null for posix")
            else:
                self.stats(steps[name], loops, f"{label} {name}")
                total += steps[name]["mean"]
        self.stats(rec["total_us"], loops, f"{label} total")
        self.close(rec["total_us"]["mean"], total, f"{label} total=sum of steps")
        read = steps["read"]["mean"]
        self.close(rec["software_share"], (total - read) / total, f"{label} software_share")
        self.close(rec["read_gbps"], file_size / read / 1e3, f"{label} read_gbps")
        self.close(rec["end_to_end_gbps"], file_size / total / 1e3, f"{label} end_to_end_gbps")
        v = rec["verify"]
        if verify:
            self.check(v["ran"] and v["ok"] is True and v["bytes_checked"] == loops * file_size,
                       f"{label}: verify {v}")


def main():
    tool, schema_path = sys.argv[1], sys.argv[2]
    with open(schema_path, encoding="utf-8") as f:
        t = Test(tool, json.load(f))
    with tempfile.TemporaryDirectory(dir="/var/tmp") as scratch:
        # Every step and size of both experiments, verified.
        common = ["--dir", scratch, "-S", "4K", "-S", "64K", "-r", 5, "-w", 2,
                  "-F", "4M", "-F", "6M", "-l", 2, "-c", "1M", "-t", 3, "--verify"]
        for engine in ("host", "posix"):
            recs = t.records("-x", engine, *common)
            got = [(r["figure"], r.get("size", r.get("file_size"))) for r in recs]
            t.check(got == [("fig8a", 4096), ("fig8a", 65536), ("fig8b", 4 * MIB),
                            ("fig8b", 6 * MIB)], f"{engine} records {got}")
            for rec in recs:
                t.check(rec["config"]["dir"] == scratch and rec["config"]["verify"] is True and
                        rec["config"]["sizes"] == [4096, 65536] and
                        rec["config"]["file_sizes"] == [4 * MIB, 6 * MIB],
                        f"{engine} config {rec['config']}")
                memories = ("host",) if engine == "host" else ("host", "gpu")
                t.check(rec["memory"] in memories and
                        rec["library_engine"] == ("host" if engine == "host" else "none"),
                        f"{engine} memory {rec['memory']} {rec['library_engine']}")
                if rec["figure"] == "fig8a":
                    t.fig8a(rec, engine, rec["size"], 5, 2, True)
                else:
                    t.fig8b(rec, engine, rec["file_size"], 2, 3, MIB, True)
        t.check(sorted(os.listdir(scratch)) == [], f"data files left: {os.listdir(scratch)}")

        # One experiment alone, without verification, and --quick defaults.
        recs = t.records("-x", "host", "--figure", "fig8a", "-S", "8K", "-r", 3, "--dir", scratch)
        t.check(len(recs) == 1 and recs and recs[0]["figure"] == "fig8a", f"fig8a only {recs}")
        for rec in recs:
            t.fig8a(rec, "host", 8192, 3, 3, False)
        recs = t.records("-x", "host", "--figure", "fig8b", "--quick", "-F", "8M", "--dir", scratch)
        for rec in recs:
            t.check(rec["config"]["quick"] and rec["config"]["loops"] == 3 and
                    rec["config"]["chunk"] == 4 * MIB, f"--quick config {rec['config']}")
            t.fig8b(rec, "host", 8 * MIB, 3, 4, 4 * MIB, False)

        # The human summary.
        r = t.run("-x", "host", "-S", "4K", "-r", 2, "-F", "4M", "-l", 1, "--dir", scratch)
        t.check(r.returncode == 0 and "fig8a host" in r.stdout and "fig8b host" in r.stdout and
                "software" in r.stdout and "buffer_register" in r.stdout,
                f"summary: {r.returncode} {r.stdout} {r.stderr}")

        # Corrupted bytes: --reuse-files keeps the files, so flip a byte in each.
        args = ["-x", "host", "-S", "4K", "-r", 4, "-w", 0, "-F", "4M", "-l", 2, "-c", "1M",
                "--dir", scratch, "--reuse-files"]
        recs = t.records(*args)
        files = sorted(os.listdir(scratch))
        t.check(files == ["phx-e2e-fig8a.dat", f"phx-e2e-fig8b-{4 * MIB}.dat"], f"kept {files}")
        bad_a, bad_b = 100, 3 * MIB + 12345
        for name, bad in (("phx-e2e-fig8a.dat", bad_a), (f"phx-e2e-fig8b-{4 * MIB}.dat", bad_b)):
            with open(os.path.join(scratch, name), "r+b") as f:
                f.seek(bad)
                byte = f.read(1)
                f.seek(bad)
                f.write(bytes([byte[0] ^ 0x20]))
        recs = t.records(*args, "--verify", expect_rc=3)
        by_exp = {r["figure"]: r["verify"] for r in recs}
        # fig8a: only the first pre-registered read covers offset 100.
        t.check(by_exp.get("fig8a") == {"ran": True, "ok": False, "bytes_checked": 8 * 4096,
                                        "mismatched_reads": 1, "first_mismatch_offset": bad_a},
                f"corrupted fig8a: {by_exp.get('fig8a')}")
        t.check(by_exp.get("fig8b") == {"ran": True, "ok": False, "bytes_checked": 2 * 4 * MIB,
                                        "mismatched_reads": 2, "first_mismatch_offset": bad_b},
                f"corrupted fig8b: {by_exp.get('fig8b')}")
        r = t.run(*args)
        t.check(r.returncode == 0, "without --verify a corrupted file is just data")
        r = t.run(*args, "--verify")
        t.check(r.returncode == 3 and "VERIFY FAILED" in r.stdout, f"summary: {r.stdout}")

        # Engines this machine lacks: a record saying why, and exit 2.
        if not os.path.exists("/dev/phxfs_dev0"):
            recs = t.records("-x", "direct", "--dir", scratch, expect_rc=2)
            t.check([(r["figure"], r["status"]) for r in recs] ==
                    [("fig8a", "unavailable"), ("fig8b", "unavailable")] and
                    all("phxfs" in r["reason"] for r in recs), f"direct: {recs}")
            recs = t.records("-x", "direct", "--figure", "fig8b", "--device-addr", "0xc000000",
                             "--dir", scratch, expect_rc=2)
            t.check(len(recs) == 1 and recs[0]["status"] == "unavailable" and
                    recs[0]["config"]["device_addr"] == 0xc000000, f"--device-addr: {recs}")
            # An unavailable engine next to one that runs: exit 0.  "phoenix" is
            # the old name of direct: the record says direct.
            recs = t.records("-x", "phoenix", "-x", "host", "--figure", "fig8a", "-S", "4K", "-r", 1,
                             "--dir", scratch)
            t.check([(r["engine"], r["status"]) for r in recs] ==
                    [("direct", "unavailable"), ("host", "ok")], f"mixed: {recs}")

        # --help documents every flag.
        r = t.run("--help")
        for flag in ("--engine", "--figure", "--device", "--sizes", "--repeat", "--warmup",
                     "--file-sizes", "--loops", "--chunk", "--threads", "--device-addr", "--dir",
                     "--reuse-files", "--quick", "--verify", "--json", "--quiet", "--version"):
            t.check(r.returncode == 0 and flag in r.stdout, f"--help lacks {flag}")

        # Bad arguments: exit 2 and a message naming the problem.
        for args, needle in (
                (["--bogus"], "--bogus"),
                (["-x", "nope"], "nope"),
                (["--figure", "fig9"], "fig9"),
                (["-S", "4Q"], "4Q"),
                (["-S", "0"], "4 KiB"),
                (["-S", "1000"], "1000"),
                (["-F", "5000"], "5000"),
                (["-c", "3K"], "3K"),
                (["-r", "0"], "repeat"),
                (["-l", "0"], "loops"),
                (["-t", "0"], "threads"),
                (["-d", "64"], "device"),
                (["--device-addr", "0xzz"], "0xzz"),
                (["--device-addr", "0x1000", "-x", "host"], "direct"),
                (["--dir", os.path.join(scratch, "missing")], "missing"),
        ):
            r = t.run(*args)
            t.check(r.returncode == 2 and needle in r.stderr,
                    f"{args}: exit {r.returncode}, stderr {r.stderr!r}")

    for f in t.failures:
        print("FAIL:", f)
    print(f"phx-e2e: {len(t.failures)} failures")
    return 1 if t.failures else 0


if __name__ == "__main__":
    sys.exit(main())
