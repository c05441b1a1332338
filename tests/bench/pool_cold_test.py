#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/fig12/pool-cold on hand-made records: a cold-only run's rounds
are numbered on from the model's last, say where they were measured, stay
with their model, and the ratios are fig12's on the pooled records; an
unavailable method's note is replaced, not repeated; warm runs, unknown
models and unnumbered rounds are refused with the results untouched.
Usage: pool_cold_test.py REPO_ROOT"""

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
TOOL = ROOT / "bench" / "fig12" / "pool-cold"
sys.path.insert(0, str(ROOT / "bench"))
from phxrepro.system_python import ensure_matplotlib  # noqa: E402

ensure_matplotlib("pool_cold_test")  # may run this script again, with sys.argv as it is
del sys.argv[1:2]
from phxrepro.experiments import fig12  # noqa: E402


def load(model, method, gbps, rnd=None, cache="cold", **extra):
    rec = {"kind": "load", "model": model, "method": method, "cache": cache,
           "status": "ok", "gbps": gbps, **extra}
    if rnd is not None:
        rec["round"] = rnd
    return rec


def unavailable(model, method, where):
    return {"kind": "load", "model": model, "method": method, "cache": "cold",
            "status": "unavailable", "error": "cuFile error 5027", "measured_in": where}


def cold_round(model, rnd, phoenix, python, phx_load):
    return [load(model, "phoenix", phoenix, rnd, verified=True),
            load(model, "ceiling-python", python, rnd),
            load(model, "ceiling-phx-load", phx_load, rnd)]


def results():
    recs = [{"kind": "checkpoint", "model": "A", "status": "ok"},
            load("A", "phoenix", 40.0, cache="warm", verified=True),
            load("A", "ceiling-python", 38.0, cache="warm"),
            load("A", "safetensors", 5.0, cache="warm"),
            unavailable("A", "cufile", "old run"),
            *cold_round("A", 0, 1.8, 2.0, 1.9), *cold_round("A", 1, 2.0, 1.9, 2.1),
            {"kind": "checkpoint", "model": "B", "status": "ok"},
            load("B", "phoenix", 30.0, cache="warm", verified=True),
            *cold_round("B", 0, 1.0, 1.0, 1.0)]
    return recs + fig12.ratios(recs)


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def read(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class PoolCold(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()  # pylint: disable=consider-using-with
        self.dir = pathlib.Path(self.tmp.name)
        write(self.dir / "fig12.jsonl", results())
        self.before = (self.dir / "fig12.jsonl").read_text()

    def tearDown(self):
        self.tmp.cleanup()

    def run_tool(self, *runs, dry=False):
        args = [sys.executable, str(TOOL), str(self.dir)]
        for i, records in enumerate(runs):
            path = self.dir / f"run{i}.jsonl"
            write(path, records)
            args += ["--run", str(path), f"run {i}"]
        if dry:
            args.append("--dry-run")
        return subprocess.run(args, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})

    def test_rounds_numbered_on_labelled_and_ratios_recomputed(self):
        run0 = [{"kind": "checkpoint", "model": "A", "status": "ok"},
                unavailable("A", "cufile", "new run"),
                load("A", "safetensors", 1.2, 0),
                *cold_round("A", 0, 2.2, 2.0, 2.0), *cold_round("A", 1, 1.5, 2.0, 1.6)]
        run1 = [*cold_round("A", 0, 2.4, 2.2, 2.3)]
        done = self.run_tool(run0, run1)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("A: ", done.stdout)
        self.assertIn("over 2 rounds -> ", done.stdout)
        self.assertIn("over 5 rounds", done.stdout)
        got = read(self.dir / "fig12.jsonl")
        a_cold = [r for r in got if r.get("model") == "A" and r.get("cache") == "cold"
                  and r.get("status") == "ok"]
        self.assertEqual(sorted({r["round"] for r in a_cold}), [0, 1, 2, 3, 4])
        self.assertEqual([r["gbps"] for r in a_cold if r["round"] == 4 and
                          r["method"] == "phoenix"], [2.4])
        self.assertEqual({r["measured_in"] for r in a_cold if r["round"] in (2, 3)}, {"run 0"})
        self.assertEqual({r["measured_in"] for r in a_cold if r["round"] == 4}, {"run 1"})
        self.assertNotIn("measured_in", a_cold[0], "an old record was relabelled")
        notes = [r for r in got if r.get("model") == "A" and r.get("status") == "unavailable"]
        self.assertEqual([n["measured_in"] for n in notes], ["run 0"])
        self.assertEqual(sum(r.get("kind") == "checkpoint" for r in got), 2,
                         "a run's checkpoint record was pooled")
        # A's records stay together, before B's; the ratios come last, one per model.
        models = [r["model"] for r in got if r.get("kind") != "ratios"]
        self.assertEqual(models, sorted(models))
        ratios = [r for r in got if r.get("kind") == "ratios"]
        self.assertEqual([r["model"] for r in ratios], ["A", "B"])
        self.assertEqual(ratios, fig12.ratios([r for r in got if r.get("kind") != "ratios"]))
        a = ratios[0]
        self.assertEqual(a["cold_rounds"], 5)
        self.assertEqual(a["cold_rounds_slower"], 3)  # rounds 0 (1.8/2.0), 1 (2.0/2.1), 3 (1.5/2.0)
        self.assertAlmostEqual(a["gbps"]["phoenix/cold"], 2.0)  # median of 1.8 2.0 2.2 1.5 2.4
        self.assertAlmostEqual(a["gbps"]["ceiling-phx-load/cold"], 2.0)
        self.assertAlmostEqual(a["cold_over_direct"], 1.0)
        self.assertEqual(ratios[1], fig12.ratios(results())[1], "B's ratios changed")
        csv = (self.dir / "fig12.csv").read_text().splitlines()
        self.assertEqual(len(csv), 1 + len(got))

    def test_dry_run_writes_nothing(self):
        done = self.run_tool(cold_round("B", 0, 2.0, 1.0, 1.0), dry=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("B: cold/O_DIRECT=1.000", done.stdout)
        self.assertIn("-> cold/O_DIRECT=1.500", done.stdout)
        self.assertEqual((self.dir / "fig12.jsonl").read_text(), self.before)
        self.assertFalse((self.dir / "fig12.csv").exists())

    def test_refusals_leave_results_untouched(self):
        cases = {
            "warm load": [load("A", "phoenix", 40.0, cache="warm"), *cold_round("A", 0, 2, 2, 2)],
            "has no records in the results": cold_round("C", 0, 2.0, 2.0, 2.0),
            "without a round number": [load("A", "phoenix", 2.0)],
        }
        for message, run in cases.items():
            with self.subTest(message):
                done = self.run_tool(run)
                self.assertEqual(done.returncode, 1)
                self.assertIn(message, done.stderr)
                self.assertEqual((self.dir / "fig12.jsonl").read_text(), self.before)
        done = self.run_tool([])
        self.assertEqual(done.returncode, 1)
        self.assertIn("no cold loads", done.stderr)


if __name__ == "__main__":
    unittest.main()
