#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fig12's goal arithmetic on hand-made records: the median-based cold
ratio, the round-by-round view beside it, the main method of a cold-only
run, and PHX_FIG12_CACHES.  Usage: fig12_ratios_test.py REPO_ROOT"""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "bench"))
from phxrepro.system_python import ensure_matplotlib  # noqa: E402

ensure_matplotlib("fig12_ratios_test")  # fig12 imports the plotting module
del sys.argv[1:2]
from phxrepro.experiments import fig12  # noqa: E402


def load(method, gbps, rnd, cache="cold", model="m"):
    return {"kind": "load", "model": model, "method": method, "cache": cache,
            "status": "ok", "gbps": gbps, "round": rnd}


class Ratios(unittest.TestCase):
    def test_cold_only_run_names_phoenix_and_pairs_rounds(self):
        # Round 0: phoenix 1.8 against the better ceiling 2.0; round 1: 2.2 against 2.0.
        records = [load("phoenix", 1.8, 0), load("ceiling-python", 2.0, 0),
                   load("ceiling-phx-load", 1.5, 0),
                   load("phoenix", 2.2, 1), load("ceiling-python", 1.9, 1),
                   load("ceiling-phx-load", 2.0, 1),
                   load("safetensors", 1.0, 0)]
        (r,) = fig12.ratios(records)
        self.assertEqual(r["method"], "phoenix")
        self.assertEqual(r["cold_rounds"], 2)
        self.assertEqual(r["cold_rounds_slower"], 1)
        self.assertAlmostEqual(r["cold_over_direct_paired"], (0.9 * 1.1) ** 0.5)
        each = r["cold_over_each_ceiling_paired"]
        self.assertEqual(set(each), {"ceiling-python", "ceiling-phx-load"})
        self.assertAlmostEqual(each["ceiling-python"], (1.8 / 2.0 * 2.2 / 1.9) ** 0.5)
        self.assertAlmostEqual(each["ceiling-phx-load"], (1.8 / 1.5 * 2.2 / 2.0) ** 0.5)
        # The goal's ratio: phoenix's median (2.0) over the better ceiling median (1.95 vs 1.75).
        self.assertAlmostEqual(r["cold_over_direct"], 2.0 / 1.95)
        self.assertIsNone(r["warm_over_pinned"])
        self.assertFalse(r["goal_met"])  # the warm goals were not measured

    def test_rounds_without_a_ceiling_do_not_count(self):
        records = [load("phoenix", 1.8, 0), load("phoenix", 1.7, 1),
                   load("ceiling-python", 2.0, 1)]
        (r,) = fig12.ratios(records)
        self.assertEqual(r["cold_rounds"], 1)
        self.assertAlmostEqual(r["cold_over_direct_paired"], 1.7 / 2.0)
        self.assertEqual(r["cold_over_each_ceiling_paired"], {"ceiling-python": 1.7 / 2.0})

    def test_no_cold_rounds(self):
        (r,) = fig12.ratios([load("phoenix", 40.0, 0, cache="warm"),
                             load("ceiling-python", 40.0, 0, cache="warm")])
        self.assertIsNone(r["cold_over_direct_paired"])
        self.assertEqual(r["cold_over_each_ceiling_paired"], {})
        self.assertEqual(r["cold_rounds"], 0)


class Caches(unittest.TestCase):
    def tearDown(self):
        os.environ.pop("PHX_FIG12_CACHES", None)

    def test_default_and_choices(self):
        os.environ.pop("PHX_FIG12_CACHES", None)
        self.assertEqual(fig12.caches(), {"warm", "cold"})
        os.environ["PHX_FIG12_CACHES"] = " cold "
        self.assertEqual(fig12.caches(), {"cold"})

    def test_bad_values_are_refused(self):
        for bad in ("", ",", "hot", "warm,hot"):
            os.environ["PHX_FIG12_CACHES"] = bad
            with self.assertRaisesRegex(ValueError, "PHX_FIG12_CACHES"):
                fig12.caches()


if __name__ == "__main__":
    unittest.main()
