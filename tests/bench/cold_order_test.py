#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/cold/cold.py's order and arithmetic without a GPU: the goal
pair alternates, a variant timed beside it takes every place, the paired
records and the summary's goal fields.  Usage: cold_order_test.py [REPO_ROOT]."""

import contextlib
import importlib.util
import io
import itertools
import json
import pathlib
import sys
import tempfile
import unittest

from bench_args import folders

REPO, _ = folders()
_spec = importlib.util.spec_from_file_location("cold", REPO / "bench" / "cold" / "cold.py")
cold = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cold)

OURS, PEER, FILE_ORDER = cold.OURS, cold.PEER, "ours-file-order"


def load(method, rnd, order, gbps, fileset="llama-16l"):
    return {"kind": "load", "block": "pair", "status": "ok", "fileset": fileset, "cache": "cold",
            "round": rnd, "method": method, "order": order, "gbps": gbps, "cpu_s_per_gb": 0.1}


class PairOrder(unittest.TestCase):
    def test_the_pair_alternates(self):
        self.assertEqual([cold.pair_order(r) for r in range(4)],
                         [[OURS, PEER], [PEER, OURS], [OURS, PEER], [PEER, OURS]])

    def test_one_variant_takes_all_six_orders_in_six_rounds(self):
        orders = [tuple(cold.pair_order(r, (FILE_ORDER,))) for r in range(6)]
        self.assertEqual(set(orders), set(itertools.permutations([OURS, PEER, FILE_ORDER])))
        for r, order in enumerate(orders):  # the pair's own alternation is kept
            self.assertEqual([m for m in order if m != FILE_ORDER], cold.pair_order(r))

    def test_every_variant_is_known(self):
        self.assertIn(FILE_ORDER, cold.VARIANTS)


class Summary(unittest.TestCase):
    def records(self):
        recs = []
        for rnd in range(2):
            order = cold.pair_order(rnd, (FILE_ORDER,))
            speed = {OURS: 2.0 + rnd, PEER: 2.5, FILE_ORDER: 3.0}
            for i, m in enumerate(order):
                rec = load(m, rnd, i, speed[m])
                if m == FILE_ORDER:
                    rec["phase"] = "variants"
                recs.append(rec)
        return recs

    def test_paired_records_keep_the_variant_apart(self):
        out = cold.paired(self.records())
        pairs = [p for p in out if p["kind"] == "paired"]
        self.assertEqual([round(p["ratio"], 6) for p in pairs], [0.8, 1.2])
        self.assertEqual([p["first"] for p in pairs], [OURS, PEER])
        variants = [p for p in out if p["kind"] == "paired_variant"]
        self.assertEqual([(p["method"], round(p["ratio"], 6)) for p in variants],
                         [(FILE_ORDER, 1.5), (FILE_ORDER, 1.0)])
        self.assertEqual([p["variant_first"] for p in variants], [True, True])

    def test_the_goal_ratio_comes_from_the_pair_alone(self):
        out = cold.summarise(self.records())
        goal = next(r for r in out if r.get("kind") == "ratio"
                    and "fastsafetensors" in r.get("goal", ""))
        self.assertAlmostEqual(goal["ratio"], 2.5 / 2.5)
        self.assertEqual(goal["paired_rounds"], 2)
        self.assertAlmostEqual(goal["median_paired_ratio"], 1.0)
        self.assertAlmostEqual(goal["order_balanced_ratio"], (0.8 * 1.2) ** 0.5)
        variant = next(r for r in out if r.get("kind") == "summary"
                       and r["method"] == FILE_ORDER)
        self.assertEqual(variant["phase"], "variants")
        self.assertEqual(variant["rounds"], 2)


class Blocks(unittest.TestCase):
    """cold.py run with its loaders, sweep and concurrent jobs stubbed:
    which blocks run, in which order, and what they record."""

    def run_cold(self, *argv):
        calls = []

        def fake_loader(args, name, files, fileset, cache, rnd, verify, **job):
            label = (job.get("options") or {}).get("loader")
            calls.append((fileset, cache, rnd, name, json.dumps(label, sort_keys=True)))
            return [{"kind": "load", "method": name, "fileset": fileset, "cache": cache,
                     "round": rnd, "status": "ok", "gbps": 2.0, "cpu_s_per_gb": 0.1}]

        def fake_sweep(args, name, extra, files, fileset, rnd):
            calls.append((fileset, "sweep", rnd, name, ""))
            return [{"kind": "load", "method": name, "fileset": fileset, "cache": "cold",
                     "round": rnd, "status": "ok", "gbps": 1.0}]

        def fake_concurrent(args, files, fileset, how):
            calls.append((fileset, "concurrent", 0, how, ""))
            return [{"kind": "concurrent", "how": how, "fileset": fileset, "status": "ok",
                     "wall_seconds": 1.0}]

        saved = cold.run_loader, cold.run_sweep, cold.concurrent
        cold.run_loader, cold.run_sweep, cold.concurrent = fake_loader, fake_sweep, fake_concurrent
        try:
            with tempfile.TemporaryDirectory() as tmp:
                scratch = pathlib.Path(tmp)
                for folder, name in (("llama-16l-scale1-bf16", "model.safetensors"),
                                     ("single", "model-scale1-bf16.safetensors")):
                    (scratch / folder).mkdir()
                    (scratch / folder / name).write_bytes(b"\0" * 4096)
                argv = ["cold.py", "run", "--scratch", tmp, "--out", f"{tmp}/out", "--sweep",
                        "/bin/false", "--rounds", "2", "--budget-s", "600", *argv]
                old_argv, sys.argv = sys.argv, argv
                try:
                    with contextlib.redirect_stdout(io.StringIO()):
                        self.assertEqual(cold.main(), 0)
                finally:
                    sys.argv = old_argv
                manifest = json.loads((scratch / "out" / "manifest.json").read_text())
                records = [json.loads(line) for line in
                           (scratch / "out" / "cold.jsonl").read_text().splitlines()]
        finally:
            cold.run_loader, cold.run_sweep, cold.concurrent = saved
        return calls, manifest, records

    def test_pair_and_sweep_only(self):
        calls, manifest, records = self.run_cold("--blocks", "pair,sweep",
                                                 "--pair-variants", FILE_ORDER)
        self.assertEqual(manifest["blocks"], ["pair", "sweep"])
        self.assertEqual({c[1] for c in calls}, {"cold", "sweep"})
        pair_calls = [c for c in calls if c[1] == "cold"]
        self.assertEqual(len(pair_calls), 2 * 2 * 3)  # rounds x file sets x (pair + variant)
        variant = [c for c in pair_calls if "threads" in c[4]]
        self.assertEqual(len(variant), 4)
        self.assertTrue(all(c[3] == OURS for c in variant))  # ours, in a forced shape
        methods = {r["method"] for r in records if r.get("kind") == "load"
                   and r.get("block") == "pair"}
        self.assertEqual(methods, {OURS, PEER, FILE_ORDER})

    def test_the_rest_in_a_second_command(self):
        calls, manifest, _ = self.run_cold("--blocks", "warm,concurrent,variants",
                                           "--variant-rounds", "1")
        self.assertEqual(manifest["blocks"], ["warm", "concurrent", "variants"])
        kinds = [c[1] for c in calls]
        self.assertNotIn("sweep", kinds)
        self.assertEqual(kinds[:kinds.index("concurrent")], ["warm"] * 3 * 3)
        self.assertEqual(len([k for k in kinds if k == "cold"]), 1 + len(cold.VARIANTS))

    def test_an_unknown_block_is_refused(self):
        with self.assertRaises(SystemExit):
            self.run_cold("--blocks", "pairs")


if __name__ == "__main__":
    unittest.main()
