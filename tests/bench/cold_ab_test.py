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

    def test_keep_reuses_the_checkpoint_and_budget_stops_rounds(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            scratch = pathlib.Path(tmp) / "scratch"
            out = pathlib.Path(tmp) / "ab.jsonl"
            first = run(str(out), "--model", "quick", "--rounds", "1", "--keep",
                        scratch=str(scratch))
            self.assertEqual(first.returncode, 0, first.stderr[-2000:])
            self.assertIn(" generated in ", first.stdout)
            model = json.loads(out.read_text().splitlines()[0])["model"]
            shards = sorted((scratch / model).iterdir())
            self.assertTrue(shards, "--keep deleted the checkpoint")
            stamps = [s.stat().st_mtime_ns for s in shards]
            second = run(str(out), "--model", "quick", "--rounds", "5", "--keep",
                         "--budget-s", "0", scratch=str(scratch))
            self.assertEqual(second.returncode, 0, second.stderr[-2000:])
            self.assertIn(" kept in ", second.stdout)
            self.assertEqual([s.stat().st_mtime_ns for s in sorted((scratch / model).iterdir())],
                             stamps, "the kept checkpoint was written again")
            self.assertIn("1 rounds of 5", second.stdout)
            rows = [json.loads(line) for line in out.read_text().splitlines()]
            loads = [r for r in rows if r["kind"] == "load"]
            # one round each run, three methods (default variant, two ceilings)
            self.assertEqual(len(loads), 2 * 3)
            self.assertEqual({r["round"] for r in loads}, {0})
            # without --keep, a kept checkpoint is generated again and deleted
            third = run(str(out), "--model", "quick", "--rounds", "1", scratch=str(scratch))
            self.assertEqual(third.returncode, 0, third.stderr[-2000:])
            self.assertIn(" generated in ", third.stdout)
            self.assertFalse((scratch / model).exists())

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
