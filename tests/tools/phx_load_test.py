#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""phx-load end to end with the host engine: the JSON records, --verify,
--json-out, the plain-text output and the exit statuses.

Usage: phx_load_test.py PATH/TO/phx-load"""

import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

PHX_LOAD = None


def write_safetensors(path, tensors, gap=0):
    """tensors: [(name, dtype, shape, bytes)], written byte for byte."""
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        data += b"\x5a" * gap
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def run(*args):
    return subprocess.run([PHX_LOAD, *args], capture_output=True, text=True, timeout=120,
                          check=False)


class PhxLoadTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp"))
        self.dir = self.tmp.name
        write_safetensors(f"{self.dir}/a.safetensors",
                          [("w", "F32", [3000], os.urandom(12000)),
                           ("b", "BF16", [7], os.urandom(14))], gap=3)
        write_safetensors(f"{self.dir}/b.safetensors", [("u", "U8", [5, 5], os.urandom(25))])

    def tearDown(self):
        self.tmp.cleanup()

    def test_json_verify_and_json_out(self):
        out = f"{self.dir}/records.jsonl"
        p = run(self.dir, "--engine", "host", "--verify", "--json", "--repeat", "2",
                "--json-out", out, "--drop-cache")
        self.assertEqual(p.returncode, 0, p.stderr)
        records = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual(len(records), 2)
        for i, r in enumerate(records):
            self.assertEqual(r["status"], "ok")
            self.assertEqual(r["run"], i)
            self.assertEqual(r["files"], 2)
            self.assertEqual(r["tensors"], 3)
            self.assertEqual(r["tensor_bytes"], 12000 + 14 + 25)
            self.assertGreaterEqual(r["bytes_read"], r["tensor_bytes"])
            self.assertEqual(r["engines"], {"0": "host"})
            self.assertTrue(r["verify"]["ok"])
            self.assertEqual(r["verify"]["tensors"], 3)
            self.assertGreater(r["seconds"], 0)
            # How each file was read and why: dropped from the page cache
            # before each run, both are read O_DIRECT (where the file
            # system takes it) by the host engine's io_uring queue.
            files = r["per_file"]
            self.assertEqual([os.path.basename(f["path"]) for f in files],
                             ["a.safetensors", "b.safetensors"])
            self.assertEqual([f["bytes"] for f in files], [12000 + 14, 25])
            for f in files:
                self.assertEqual(f["path_taken"], "queue")
                self.assertIn(f["mode"], ("direct", "buffered"))
                self.assertGreaterEqual(f["threads"], 1)
                self.assertGreater(f["request_bytes"], 0)
                self.assertIsNotNone(f["resident"])
                self.assertLess(f["resident"], 0.5)
                self.assertIn("resident", f["why"])
        with open(out, encoding="utf-8") as f:
            self.assertEqual([json.loads(line) for line in f], records)

    def test_text_output_without_json(self):
        p = run(f"{self.dir}/a.safetensors", "--engine", "host", "--verify")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("1 file(s), 2 tensors", p.stdout)
        self.assertIn("all equal", p.stdout)
        self.assertNotIn("{", p.stdout)

    def test_malformed_file_fails_with_a_record(self):
        bad = f"{self.dir}/bad.safetensors"
        header = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}'
        with open(bad, "wb") as f:
            f.write(struct.pack("<Q", len(header)) + header + bytes(8))
        p = run(bad, "--json")
        self.assertEqual(p.returncode, 1)
        r = json.loads(p.stdout.splitlines()[-1])
        self.assertEqual(r["status"], "error")
        self.assertEqual(r["errno"], 22)
        self.assertIn("bad.safetensors", r["error"])
        self.assertIn("\"w\"", r["error"])

    def test_missing_path_and_usage(self):
        self.assertEqual(run(f"{self.dir}/absent", "--json").returncode, 1)
        self.assertEqual(run(self.dir, "--cache", "sometimes").returncode, 64)
        self.assertEqual(run().returncode, 64)

    def test_unavailable_engine_exits_2_with_reason(self):
        if os.path.exists("/dev/nvidia0"):
            self.skipTest("a GPU machine may serve cufile")
        p = run(self.dir, "--engine", "cufile", "--json")
        self.assertEqual(p.returncode, 2, p.stderr)
        r = json.loads(p.stdout.splitlines()[-1])
        self.assertEqual(r["status"], "unavailable")
        self.assertTrue(r["error"])


if __name__ == "__main__":
    PHX_LOAD = sys.argv.pop(1)
    unittest.main()
