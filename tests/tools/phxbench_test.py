#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""phxbench functional test: runs the CPU engines (host, posix) in every
CPU mode, both directions and both patterns with --verify on a small file,
validates each JSON record against docs/phxbench-schema.json and checks
that the numbers agree with the configuration; then a corrupted file must
fail --verify (exit 3) at the corrupted offset, and bad arguments must exit
2 with a message.

Usage: phxbench_test.py PHXBENCH SCHEMA"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

LENGTH = 8 << 20


class SchemaError(Exception):
    pass


# The JSON Schema keywords the schema uses; anything else is an error, so a
# keyword this validator does not know cannot pass unchecked.
ANNOTATIONS = {"$schema", "$id", "title", "description"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
}


def validate(value, schema, path="$"):
    for key in schema:
        if key not in ANNOTATIONS | {"type", "const", "enum", "minimum", "maximum", "pattern",
                                     "properties", "required", "additionalProperties"}:
            raise SchemaError(f"{path}: schema keyword {key!r} is not supported by this validator")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(TYPES[t](value) for t in types):
            raise SchemaError(f"{path}: {value!r} is not of type {types}")
    if "const" in schema and value != schema["const"]:
        raise SchemaError(f"{path}: {value!r} != {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(f"{path}: {value!r} not in {schema['enum']}")
    numeric = TYPES["number"](value)
    if numeric and "minimum" in schema and value < schema["minimum"]:
        raise SchemaError(f"{path}: {value} < minimum {schema['minimum']}")
    if numeric and "maximum" in schema and value > schema["maximum"]:
        raise SchemaError(f"{path}: {value} > maximum {schema['maximum']}")
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        raise SchemaError(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                raise SchemaError(f"{path}: missing {name!r}")
        if schema.get("additionalProperties", True) is False:
            extra = set(value) - set(props)
            if extra:
                raise SchemaError(f"{path}: unexpected {sorted(extra)}")
        for name, sub in props.items():
            if name in value:
                validate(value[name], sub, f"{path}.{name}")


class Test:
    def __init__(self, tool, schema):
        self.tool = tool
        self.schema = schema
        self.failures = []
        self.runs = 0

    def check(self, cond, what):
        if not cond:
            self.failures.append(what)
        return cond

    def run(self, *args):
        self.runs += 1
        return subprocess.run([self.tool, *map(str, args)], capture_output=True, text=True,
                              check=False, timeout=60)

    def record(self, *args, expect_rc=0):
        """Runs with --json --quiet; returns the validated record or None."""
        r = self.run(*args, "--json", "--quiet")
        label = " ".join(map(str, args))
        if not self.check(r.returncode == expect_rc,
                          f"[{label}] exit {r.returncode}, expected {expect_rc}: {r.stderr}"):
            return None
        lines = r.stdout.splitlines()
        if not self.check(len(lines) == 1, f"[{label}] {len(lines)} lines on stdout"):
            return None
        rec = json.loads(lines[0])
        try:
            validate(rec, self.schema)
        except SchemaError as e:
            self.check(False, f"[{label}] schema: {e}")
            return None
        return rec

    def consistent(self, rec, label, engine, mode, io, pattern, io_size, threads, depth):
        cfg, res, lat = rec["config"], rec["result"], rec["result"]["latency_us"]
        for key, want in (("engine", engine), ("mode", mode), ("io", io), ("pattern", pattern),
                          ("io_size", io_size), ("threads", threads), ("depth", depth),
                          ("length", LENGTH)):
            self.check(cfg[key] == want, f"[{label}] config.{key} {cfg[key]} != {want}")
        self.check(rec["engine"]["name"] == engine, f"[{label}] engine {rec['engine']}")
        if engine == "host":
            self.check(rec["engine"]["library_engine"] == "host" and
                       rec["engine"]["memory"] == "host", f"[{label}] {rec['engine']}")
        if engine == "posix":
            self.check(rec["engine"]["library_engine"] == "none", f"[{label}] {rec['engine']}")
        ops = LENGTH // io_size
        self.check(res["ops"] == ops, f"[{label}] ops {res['ops']} != {ops}")
        self.check(res["bytes"] == ops * io_size, f"[{label}] bytes {res['bytes']}")
        self.check(res["seconds"] > 0, f"[{label}] seconds {res['seconds']}")
        gbps = res["bytes"] / res["seconds"] / 1e9
        self.check(abs(res["bandwidth_gbps"] - gbps) <= 1e-6 * gbps, f"[{label}] GB/s")
        self.check(abs(res["bandwidth_gibps"] * 2**30 - gbps * 1e9) <= 1e-3 * gbps * 1e9,
                   f"[{label}] GiB/s")
        self.check(abs(res["iops"] - res["ops"] / res["seconds"]) <= 1e-6 * res["iops"],
                   f"[{label}] iops")
        if mode in ("sync", "async"):
            self.check(lat["of"] == "io" and lat["count"] == ops, f"[{label}] latency {lat}")
        else:
            per_thread = ops // threads
            batches = threads * -(-per_thread // depth)
            self.check(lat["of"] == "batch" and lat["count"] == batches,
                       f"[{label}] latency count {lat['count']} != {batches} batches")
        self.check(0 <= lat["min"] <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["p99_9"]
                   <= lat["max"], f"[{label}] percentiles out of order: {lat}")
        self.check(lat["min"] <= lat["mean"] <= lat["max"], f"[{label}] mean {lat}")
        # Every latency sample lies inside the run.
        self.check(lat["max"] <= res["seconds"] * 1e6 * (1 + lat["max_relative_error"]),
                   f"[{label}] max latency {lat['max']} us > run {res['seconds']} s")
        self.check(res["cpu"]["user_s"] + res["cpu"]["sys_s"] > 0, f"[{label}] no CPU time")
        v = rec["verify"]
        self.check(v["ran"] and v["ok"] is True and v["mismatched_ios"] == 0 and
                   v["first_mismatch_offset"] is None, f"[{label}] verify {v}")
        if io == "read":
            self.check(v["bytes_checked"] == res["bytes"], f"[{label}] checked {v}")
        elif pattern == "seq":
            self.check(v["bytes_checked"] == LENGTH, f"[{label}] read back {v}")
        else:
            self.check(0 < v["bytes_checked"] <= LENGTH, f"[{label}] read back {v}")


def main():
    tool, schema_path = sys.argv[1], sys.argv[2]
    with open(schema_path, encoding="utf-8") as f:
        t = Test(tool, json.load(f))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir="/var/tmp") as scratch:
        path = os.path.join(scratch, "data")

        rec = t.record("-f", path, "-l", LENGTH, "--create", "-x", "host", "-s", "1M", "--verify")
        if rec:
            t.check(os.path.getsize(path) == LENGTH, "--create size")
            t.check(rec["config"]["create"] and rec["target"]["kind"] == "file", "create record")
            t.check(rec["target"]["direct_io"] is True, f"O_DIRECT on /var/tmp: {rec['target']}")

        # Writes first: they rewrite the pattern, so the reads after them
        # also check that the writes put every byte in its place.
        for io in ("write", "read"):
            for engine in ("host", "posix"):
                for mode, depth, threads in (("sync", 1, 1), ("async", 8, 2), ("batch", 16, 1)):
                    for pattern in ("seq", "rand"):
                        io_size = 16384 if pattern == "rand" else 65536
                        args = ["-f", path, "-x", engine, "-m", mode, "-i", io, "-a", pattern,
                                "-s", io_size, "-t", threads, "--verify"]
                        if mode != "sync":
                            args += ["-q", depth]
                        label = " ".join(map(str, args))
                        rec = t.record(*args)
                        if rec:
                            t.consistent(rec, label, engine, mode, io, pattern, io_size, threads,
                                         depth)

        # The library stages what O_DIRECT cannot take: odd sizes still verify.
        rec = t.record("-f", path, "-x", "host", "-s", 5000, "-a", "rand", "--verify")
        if rec:
            t.check(rec["verify"]["ok"] is True and rec["result"]["bytes"] == LENGTH // 5000 * 5000,
                    f"unaligned host read: {rec['verify']} {rec['result']['bytes']}")
        rec = t.record("-f", path, "-x", "posix", "--no-direct", "-s", 5000, "--verify")
        if rec:
            t.check(rec["target"]["direct_io"] is False and rec["verify"]["ok"] is True,
                    "buffered posix read")

        # Bounds: size, time, warm-up.
        rec = t.record("-f", path, "-x", "posix", "-s", 4096, "--total", "1M")
        if rec:
            t.check(rec["result"]["bytes"] == 1 << 20 and rec["verify"]["ran"] is False and
                    rec["verify"]["ok"] is None, f"--total: {rec['result']['bytes']}")
            t.check(rec["result"]["enqueue_seconds"] is None,
                    f"enqueue_seconds outside stream mode: {rec['result']['enqueue_seconds']}")
        rec = t.record("-f", path, "-x", "host", "-m", "async", "-q", 4, "--duration", "0.3")
        if rec:
            t.check(0.29 <= rec["result"]["seconds"] < 5 and rec["result"]["bytes"] > 0,
                    f"--duration 0.3: {rec['result']['seconds']} s")
        rec = t.record("-f", path, "-x", "host", "-s", "64K", "--warmup", "1M", "--verify")
        if rec:
            t.check(rec["result"]["warmup"]["bytes"] == 1 << 20 and
                    rec["result"]["bytes"] == LENGTH and
                    rec["verify"]["bytes_checked"] == LENGTH + (1 << 20),
                    f"--warmup 1M: {rec['result']} {rec['verify']}")

        # The human summary.
        r = t.run("-f", path, "-x", "posix", "-s", "1M")
        t.check(r.returncode == 0 and "IoType: READ" in r.stdout and "Throughput:" in r.stdout,
                f"summary: {r.stdout} {r.stderr}")

        # A corrupted byte fails --verify, at its offset, for both engines.
        bad = 3 * 65536 + 1234
        with open(path, "r+b") as f:
            f.seek(bad)
            byte = f.read(1)
            f.seek(bad)
            f.write(bytes([byte[0] ^ 0x40]))
        for engine, mode in (("host", "sync"), ("posix", "async"), ("host", "batch")):
            args = ["-f", path, "-x", engine, "-m", mode, "-s", "64K", "--verify"]
            if mode != "sync":
                args += ["-q", 4]
            rec = t.record(*args, expect_rc=3)
            if rec:
                v = rec["verify"]
                t.check(v["ok"] is False and v["first_mismatch_offset"] == bad and
                        v["mismatched_ios"] == 1, f"corrupted {engine} {mode}: {v}")
        r = t.run("-f", path, "-x", "host", "-s", "64K")
        t.check(r.returncode == 0, "without --verify a corrupted file is just data")

        # Bad arguments: exit 2 and a message naming the problem.
        for args, needle in (
                (["--bogus"], "--bogus"),
                (["-x", "nope"], "nope"),
                (["-s", "4Q"], "4Q"),
                (["-s", "0"], "io-size"),
                (["-m", "sync", "-q", "4"], "depth"),
                (["-t", "0"], "threads"),
                (["-i", "sideways"], "sideways"),
                (["-a", "zigzag"], "zigzag"),
                (["--duration", "-1"], "-1"),
                (["--warmup", "3parsecs"], "3parsecs"),
                (["-l", "1G"], "--length"),
                (["-l", "1000", "-s", "4K"], "smaller than one I/O"),
                (["-s", "1M", "-t", "9"], "threads"),
                (["-x", "host", "--device-addr", "0x1000"], "direct"),
                (["-x", "direct", "--device-addr", "0xzz"], "0xzz"),
        ):
            r = t.run("-f", path, *args)
            t.check(r.returncode == 2 and needle in r.stderr,
                    f"{args}: exit {r.returncode}, stderr {r.stderr!r}")
        r = t.run("-x", "host")
        t.check(r.returncode == 2 and "--file" in r.stderr, f"no -f: {r.returncode} {r.stderr}")
        r = t.run("-f", os.path.join(scratch, "new"), "--create")
        t.check(r.returncode == 2 and "--length" in r.stderr, f"--create without -l: {r.stderr}")

        # Engines this machine cannot run say so and exit 2.
        if not os.path.exists("/dev/phxfs_dev0"):
            r = t.run("-f", path, "-x", "direct")
            t.check(r.returncode == 2 and "phxfs" in r.stderr, f"direct: {r.stderr}")
            # "phoenix" is the old name of direct, still accepted.
            r = t.run("-f", path, "-x", "phoenix", "--device-addr", "0xc000000")
            t.check(r.returncode == 2 and "phxfs" in r.stderr, f"phoenix --device-addr: {r.stderr}")
        if not os.path.exists("/dev/nvidia0"):
            for engine in ("compat", "cufile"):
                r = t.run("-f", path, "-x", engine)
                t.check(r.returncode == 2 and engine in r.stderr, f"{engine}: {r.stderr}")
            r = t.run("-f", path, "-x", "host", "-m", "stream", "-q", 2)
            t.check(r.returncode == 2 and "stream" in r.stderr, f"stream: {r.stderr}")

    r = t.run("--help")
    for flag in ("--file", "--engine", "--mode", "--io", "--pattern", "--io-size", "--length",
                 "--threads", "--depth", "--device", "--duration", "--total", "--warmup",
                 "--create", "--verify", "--direct", "--no-direct", "--seed", "--json", "--quiet"):
        t.check(flag in r.stdout, f"--help does not mention {flag}")
    t.check(r.returncode == 0, "--help exit")

    for f in t.failures:
        print("FAIL:", f)
    print(f"phxbench: {t.runs} runs, {len(t.failures)} failures, "
          f"{time.monotonic() - start:.1f} s")
    return 1 if t.failures else 0


if __name__ == "__main__":
    sys.exit(main())
