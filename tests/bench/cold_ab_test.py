#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/fig12/cold-ab on the tiny model (host engine, numpy): every
method once a round, the rounds rotated, each variant's settings in its
records, a summary per method, and malformed variants refused before any
load.  Usage: cold_ab_test.py REPO_ROOT BUILD_DIR"""

import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(sys.argv[1]).resolve()
BUILD = pathlib.Path(sys.argv[2]).resolve()
del sys.argv[1:3]
TOOL = ROOT / "bench" / "fig12" / "cold-ab"


def run(*args, scratch):
    return subprocess.run([sys.executable, str(TOOL), str(BUILD), *args, "--scratch", scratch],
                          capture_output=True, text=True, timeout=600)


class ColdAb(unittest.TestCase):
    def test_rounds_settings_and_summaries(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            out = pathlib.Path(tmp) / "ab.jsonl"
            done = run(str(out), "--model", "quick", "--rounds", "3", "--variant", "plain",
                       "--variant", "small:chunk_size=64K,queue_depth=2,env.PHX_AB_MARK=1",
                       scratch=str(pathlib.Path(tmp) / "scratch"))
            self.assertEqual(done.returncode, 0, done.stderr[-2000:])
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            model = rows[0]["model"]
            self.assertFalse((pathlib.Path(tmp) / "scratch" / model).exists(),
                             "the checkpoint was not deleted")
        loads = [r for r in rows if r["kind"] == "load"]
        methods = ["plain", "small", "ceiling-python", "ceiling-phx-load"]
        self.assertEqual(len(loads), 3 * len(methods))
        for k in range(3):
            in_round = [r["method"] for r in loads if r["round"] == k]
            self.assertEqual(sorted(in_round), sorted(methods))
            self.assertEqual(in_round[0], methods[k % len(methods)], "rounds are not rotated")
        for r in loads:
            self.assertGreater(r["gbps"], 0)
            self.assertEqual(r["cache"], "cold")
        small = [r for r in loads if r["method"] == "small"]
        self.assertTrue(all(r["settings"] == {"chunk_size": 65536, "queue_depth": 2,
                                              "env.PHX_AB_MARK": "1"} for r in small))
        self.assertTrue(all("settings" not in r for r in loads if r["method"] == "plain"))
        summary = {r["method"]: r for r in rows if r["kind"] == "summary"}
        self.assertEqual(set(summary), set(methods))
        for name in ("plain", "small"):
            self.assertEqual(summary[name]["rounds"], 3)
            self.assertEqual(set(summary[name]["over_each_ceiling_paired"]),
                             {"ceiling-python", "ceiling-phx-load"})
            mine = sorted(r["gbps"] for r in loads if r["method"] == name)
            self.assertAlmostEqual(summary[name]["median_gbps"], mine[1])

    def test_malformed_variants_are_refused(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            for spec, says in (("x:depth=4", "unknown setting 'depth'"),
                               ("x:queue_depth", "is not KEY=VALUE"),
                               ("ceiling-x", "not starting with 'ceiling'")):
                done = run(str(pathlib.Path(tmp) / "ab.jsonl"), "--model", "quick",
                           "--variant", spec, scratch=tmp)
                self.assertEqual(done.returncode, 2, spec)
                self.assertIn(says, done.stderr, spec)
                self.assertFalse((pathlib.Path(tmp) / "ab.jsonl").exists(), spec)


if __name__ == "__main__":
    unittest.main()
