#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/reproduce cufile-costs without a GPU: the run order, each
configuration's environment, the offsets kvikio reads, and the medians and
goals computed from hand-made records.  Usage: cufile_costs_test.py
[REPO_ROOT] (or pytest)."""

import os
import pathlib
import tempfile
import unittest

from bench_args import folders

REPO, _ = folders()

from phxrepro import cufile_kvikio  # noqa: E402
from phxrepro.experiments import cufile_costs as cc  # noqa: E402

SHIM = "/opt/phx/build/lib/cufile_shim/libcufile.so.0"


class Plan(unittest.TestCase):
    def test_rounds_interleave_and_rotate(self):
        jobs = cc.plan(3, ["phoenix", "nvidia"], ["shim", "compat", "nvidia"])
        self.assertEqual(len(jobs), 3 * (2 + 3))
        first = [j["config"] for j in jobs if j["part"] == "kvikio" and j["round"] == 0]
        second = [j["config"] for j in jobs if j["part"] == "kvikio" and j["round"] == 1]
        self.assertEqual(first, ["shim", "compat", "nvidia"])
        self.assertEqual(second, ["compat", "nvidia", "shim"])
        libs = [j["library"] for j in jobs if j["part"] == "tool"]
        self.assertEqual(libs, ["phoenix", "nvidia", "nvidia", "phoenix", "phoenix", "nvidia"])
        # Every round finishes before the next starts.
        self.assertEqual([j["round"] for j in jobs], sorted(j["round"] for j in jobs))

    def test_nothing_to_run(self):
        self.assertEqual(cc.plan(2, [], []), [])


class Environment(unittest.TestCase):
    base = {"LD_PRELOAD": "/usr/lib/libfoo.so:/somewhere/libcufile.so.0",
            "LD_LIBRARY_PATH": "/opt/phx/build/lib/cufile_shim:/usr/local/cuda/lib64",
            "KVIKIO_COMPAT_MODE": "AUTO", "HOME": "/root"}

    def test_shim_is_preloaded_with_compat_off(self):
        env = cc.kvikio_env(self.base, "shim", SHIM)
        self.assertEqual(env["LD_PRELOAD"].split(":"), [SHIM, "/usr/lib/libfoo.so"])
        self.assertEqual(env["LD_LIBRARY_PATH"].split(":")[0], os.path.dirname(SHIM))
        self.assertEqual(env["LD_LIBRARY_PATH"].count("cufile_shim"), 1)
        self.assertEqual(env["KVIKIO_COMPAT_MODE"], "OFF")
        self.assertEqual(env["HOME"], "/root")

    def test_shim_all_sizes_lowers_kvikios_gds_threshold(self):
        env = cc.kvikio_env(self.base, "shim-all-sizes", SHIM)
        self.assertEqual(env["LD_PRELOAD"].split(":")[0], SHIM)
        self.assertEqual(env["KVIKIO_COMPAT_MODE"], "OFF")
        self.assertEqual(int(env["KVIKIO_GDS_THRESHOLD"]), min(cc.SIZES))
        for config in ("shim", "compat", "nvidia"):
            self.assertNotIn("KVIKIO_GDS_THRESHOLD", cc.kvikio_env(self.base, config, SHIM))

    def test_compat_all_sizes_is_compat_mode_on_the_same_path(self):
        env = cc.kvikio_env(self.base, "compat-all-sizes", SHIM)
        self.assertEqual(env["KVIKIO_COMPAT_MODE"], "ON")
        self.assertEqual(int(env["KVIKIO_GDS_THRESHOLD"]), min(cc.SIZES))
        self.assertEqual(env["LD_PRELOAD"], "/usr/lib/libfoo.so")
        self.assertNotIn("cufile_shim", env["LD_LIBRARY_PATH"])

    def test_compat_and_nvidia_never_see_the_shim(self):
        for config, mode in (("compat", "ON"), ("nvidia", "OFF")):
            env = cc.kvikio_env(self.base, config, SHIM)
            self.assertEqual(env["KVIKIO_COMPAT_MODE"], mode)
            self.assertEqual(env["LD_PRELOAD"], "/usr/lib/libfoo.so")
            self.assertEqual(env["LD_LIBRARY_PATH"], "/usr/local/cuda/lib64")

    def test_empty_variables_are_removed(self):
        env = cc.kvikio_env({"LD_PRELOAD": SHIM}, "compat", SHIM)
        self.assertNotIn("LD_PRELOAD", env)
        self.assertNotIn("LD_LIBRARY_PATH", env)
        self.assertNotIn(self.base["LD_PRELOAD"], cc.kvikio_env(self.base, "shim", SHIM).values())

    def test_base_is_not_changed(self):
        before = dict(self.base)
        cc.kvikio_env(self.base, "shim", SHIM)
        self.assertEqual(self.base, before)

    def test_tool_args_name_the_library(self):
        args = cc.tool_args({"sizes": [4096, 1 << 20]}, "/usr/lib/libcufile.so.0", "/tmp/f")
        self.assertEqual(args[:2], ["--cufile-library", "/usr/lib/libcufile.so.0"])
        self.assertIn("4096,1048576", args)


class Offsets(unittest.TestCase):
    def test_aligned_and_inside_the_file(self):
        for size, length in ((4096, 1 << 20), (1 << 20, (1 << 20) + 4096), (1 << 30, 1 << 30)):
            spots = cufile_kvikio.offsets(size, length, 500)
            self.assertEqual(len(spots), 500)
            for off in spots:
                self.assertEqual(off % 4096, 0)
                self.assertLessEqual(off + size, length)
        self.assertGreater(len(set(cufile_kvikio.offsets(4096, 1 << 20, 50))), 40)


class Data(unittest.TestCase):
    def test_no_two_chunks_repeat(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            path = pathlib.Path(tmp) / "d.bin"
            cc.write_data(path, 3 * cc.MiB + 5)
            data = path.read_bytes()
            self.assertEqual(len(data), 3 * cc.MiB + 5)
            self.assertNotEqual(data[:4096], data[cc.MiB:cc.MiB + 4096])
            cc.write_data(path, 3 * cc.MiB + 5)
            self.assertEqual(path.read_bytes(), data)  # the same bytes every time


def tool_rec(lib, rnd, kind, **fields):
    return {"part": "tool", "library_name": lib, "round": rnd, "kind": kind, "status": "ok",
            "api": fields.pop("api", "cufile"), **fields}


def kv_rec(config, rnd, size, seconds, status="ok", verified=True):
    return {"part": "kvikio", "kind": "kvikio", "config": config, "round": rnd, "size": size,
            "status": status, "seconds": seconds, "verified": verified}


class Summary(unittest.TestCase):
    def test_medians_and_goals(self):
        recs = []
        for r, (open_us, over) in enumerate(((300.0, 1.0), (100.0, 3.0), (200.0, 1.5))):
            recs.append(tool_rec("nvidia", r, "driver_open", open_us=open_us * 1000))
            recs.append(tool_rec("phoenix", r, "driver_open", open_us=open_us / 100))
            recs.append(tool_rec("phoenix", r, "call_overhead", size=4096, goal_us=2.0,
                                 cufile_p50_us=5 + over, phx_p50_us=5.0, overhead_p50_us=over,
                                 overhead_p99_us=over * 2))
            recs.append(tool_rec("phoenix", r, "buf_register", size=4096,
                                 register={"p50_us": 10.0 + r, "first_us": 50.0},
                                 deregister={"p50_us": 1.0}))
        recs.append({"part": "tool", "library_name": "nvidia", "kind": "call", "status": "error",
                     "error": {"code": 5027}})
        for r in range(3):
            recs.append(kv_rec("shim", r, 4096, 10e-6 + r * 1e-6))
            recs.append(kv_rec("compat", r, 4096, 20e-6))
            recs.append(kv_rec("shim", r, 1 << 30, 0.5))
            recs.append(kv_rec("compat", r, 1 << 30, 0.4))
            recs.append(kv_rec("shim-all-sizes", r, 4096, 30e-6))
            recs.append(kv_rec("compat-all-sizes", r, 4096, 31e-6))
            recs.append(kv_rec("nvidia", r, 4096, None, status="error", verified=None))
        out = cc.summarise(recs)
        by = {(r["metric"], r.get("library_name") or r.get("config"), r.get("size")): r
              for r in out}
        self.assertEqual(by[("driver_open", "nvidia", None)]["median_us"], 200000.0)
        self.assertEqual(by[("driver_open", "phoenix", None)]["rounds"], 3)
        over = by[("call_overhead", "phoenix", 4096)]
        self.assertEqual(over["overhead_p50_us"], 1.5)
        self.assertTrue(over["within_goal"])
        self.assertEqual(by[("buf_register", "phoenix", 4096)]["register_p50_us"], 11.0)
        self.assertAlmostEqual(by[("kvikio_read", "shim", 4096)]["seconds"], 11e-6)
        self.assertTrue(by[("kvikio_read", "shim", 4096)]["all_verified"])
        nv = by[("kvikio_read", "nvidia", 4096)]
        self.assertEqual((nv["status"], nv["rounds_ok"], nv["all_verified"]), ("error", 0, False))
        small = by[("kvikio_shim_over_compat", None, 4096)]
        self.assertTrue(small["not_slower"])
        self.assertAlmostEqual(small["speedup"], 20 / 11)
        big = by[("kvikio_shim_over_compat", None, 1 << 30)]
        self.assertFalse(big["not_slower"])
        all_sizes = by[("kvikio_shim_all_sizes_over_compat", None, 4096)]
        self.assertFalse(all_sizes["not_slower"])
        self.assertAlmostEqual(all_sizes["speedup"], 20 / 30)
        self.assertNotIn(("kvikio_shim_all_sizes_over_compat", None, 1 << 30), by)
        same_path = by[("kvikio_shim_all_sizes_over_compat_all_sizes", None, 4096)]
        self.assertTrue(same_path["not_slower"])
        self.assertAlmostEqual(same_path["speedup"], 31 / 30)

    def test_overhead_over_the_goal(self):
        recs = [tool_rec("phoenix", 0, "call_overhead", size=4096, goal_us=2.0, cufile_p50_us=9.0,
                         phx_p50_us=5.0, overhead_p50_us=4.0, overhead_p99_us=4.0)]
        (rec,) = cc.summarise(recs)
        self.assertFalse(rec["within_goal"])

    def test_unverified_rounds_are_not_all_verified(self):
        recs = [kv_rec("shim", 0, 4096, 1e-5), kv_rec("shim", 1, 4096, 1e-5, "failed", False)]
        (rec,) = [r for r in cc.summarise(recs) if r["metric"] == "kvikio_read"]
        self.assertFalse(rec["all_verified"])
        self.assertEqual(rec["rounds_ok"], 1)


class Lines(unittest.TestCase):
    def test_only_json_lines_are_records(self):
        text = 'cuFile log line\n{"kind": "x"}\n{broken\n  {"kind": "y"}\n'
        self.assertEqual(cc.parse_lines(text), [{"kind": "x"}, {"kind": "y"}])

    def test_nvidia_library_is_never_the_shim(self):
        with tempfile.TemporaryDirectory() as tmp:
            shim = pathlib.Path(tmp) / "libcufile.so.0"
            shim.write_bytes(b"")
            found = cc.nvidia_cufile(str(shim))
            self.assertNotEqual(found and os.path.realpath(found), os.path.realpath(shim))


if __name__ == "__main__":
    unittest.main()
