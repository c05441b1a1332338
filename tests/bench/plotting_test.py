#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The engines a figure's caption names: those of its successful records,
not every engine the harness knows.  Usage: plotting_test.py REPO_ROOT"""

import os
import pathlib
import sys
import unittest

sys.path.insert(0, os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "bench"))
from phxrepro.system_python import ensure_matplotlib  # noqa: E402

ensure_matplotlib("plotting_test")
del sys.argv[1:2]
from phxrepro.context import Context  # noqa: E402
from phxrepro.plotting import engines_of  # noqa: E402


def context(engines):
    here = pathlib.Path(".")
    return Context(build=here, out=here, scratch=here, quick=True, engines=engines,
                   emulated=False, label="a machine", machine={})


class Engines(unittest.TestCase):
    def test_every_way_a_record_names_its_engine(self):
        records = [{"engine_name": "posix", "status": "ok"},
                   {"engine": {"name": "compat", "library_engine": "compat"}},
                   {"engine": "host"},
                   {"engines": {"0": "direct", "1": "compat"}, "status": "ok"}]
        self.assertEqual(engines_of(records), ["compat", "direct", "host", "posix"])

    def test_failed_and_skipped_records_name_nothing(self):
        records = [{"engine_name": "gds", "status": "error", "error": "5027"},
                   {"engines": {"0": "cufile"}, "status": "skipped"},
                   {"engine_name": "compat", "status": "ok"}]
        self.assertEqual(engines_of(records), ["compat"])

    def test_the_caption_says_when_no_record_names_one(self):
        ctx = context(["direct", "compat", "cufile"])
        self.assertIn("engines: none recorded", ctx.label(engines_of([{"kind": "concurrent"}])))
        self.assertIn("engines: compat;", ctx.label(["compat"]))
        self.assertIn("engines: direct, compat, cufile;", ctx.label())


if __name__ == "__main__":
    unittest.main()
