#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The peers harness without a GPU: record format, bit-for-bit comparison
(a corrupted load is unverified), cache eviction, the round-robin order,
and a dry run of bench/reproduce peers in which loaders that need CUDA are
records with the reason.  Usage: peers_test.py [REPO_ROOT] (or pytest)."""

import json
import mmap
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

from bench_args import folders, have

REPO, BUILD = folders(build=True)

from phxrepro import checkpoint  # noqa: E402
from phxrepro.peers import loaders, pagecache, schedule, verify  # noqa: E402



def worker(job: dict, stdin: str | None = None) -> list[dict]:
    # The build's phoenix_gds, as bench/reproduce hands it to its workers.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "bench"),
                                                       str(BUILD / "python")]))
    proc = subprocess.run([sys.executable, "-m", "phxrepro.peers.worker", json.dumps(job)],
                          input=stdin, capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.splitlines()]


HAVE_MODULE = any((BUILD / "python" / "phoenix_gds").glob("_phoenix*.so"))


class Tiny(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(dir="/var/tmp")
        cls.path = checkpoint.single_file(pathlib.Path(cls.tmp.name), 0.01, "F16")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()


class Checkpoint(Tiny):
    def test_layout_is_the_issues_at_scale(self):
        tensors = checkpoint.single_file_tensors(1.0)
        self.assertEqual(sum(1 for _, s, d in tensors if d == "BF16" and s == [8192, 8192]), 48)
        self.assertEqual(sum(1 for _, s, d in tensors if d == "F32" and s == [8192]), 48)
        total = sum(checkpoint.nbytes(s, d) for _, s, d in tensors)
        self.assertAlmostEqual(total / 1e9, 6.44, places=2)

    @unittest.skipUnless(have("safetensors") and have("numpy"), "needs safetensors, numpy")
    def test_safetensors_reads_the_generated_file(self):
        from safetensors.numpy import load_file

        got = load_file(str(self.path))
        self.assertEqual(len(got), 97)


class Compare(unittest.TestCase):
    @unittest.skipUnless(have("numpy"), "needs numpy")
    def test_a_flipped_bit_is_a_mismatch(self):
        import numpy

        ref = {"a": numpy.arange(16, dtype=numpy.float16), "b": numpy.ones(3, numpy.float32)}
        same = {k: v.copy() for k, v in ref.items()}
        self.assertEqual(verify.compare_tensors(same, ref), (True, ""))
        bad = {k: v.copy() for k, v in ref.items()}
        bad["a"].view(numpy.uint8)[5] ^= 1
        ok, detail = verify.compare_tensors(bad, ref)
        self.assertFalse(ok)
        self.assertIn("a", detail)
        self.assertFalse(verify.compare_tensors({"a": ref["a"]}, ref)[0])          # a name missing
        self.assertFalse(verify.compare_tensors({**same, "b": same["b"].astype(numpy.float64)},
                                                ref)[0])                            # dtype
        self.assertFalse(verify.compare_tensors({**same, "b": numpy.ones((3, 1), numpy.float32)},
                                                ref)[0])                            # shape
        self.assertFalse(verify.compare_tensors({}, ref)[0])

    @unittest.skipUnless(have("numpy"), "needs numpy")
    def test_nan_payloads_compare_as_bits(self):
        import numpy

        ref = {"n": numpy.array([numpy.nan], numpy.float32)}
        self.assertTrue(verify.compare_tensors({"n": ref["n"].copy()}, ref)[0])

    def test_raw_bytes_against_the_file(self):
        with tempfile.NamedTemporaryFile(dir="/var/tmp") as f:
            data = os.urandom(100_000)
            f.write(data)
            f.flush()
            self.assertTrue(verify.compare_bytes(lambda i, o, n: data[o:o + n], [f.name])[0])
            bad = bytearray(data)
            bad[77_777] ^= 0x10
            self.assertFalse(verify.compare_bytes(lambda i, o, n: bad[o:o + n], [f.name])[0])


class PageCache(unittest.TestCase):
    def test_evict_says_how_and_leaves_the_file_out(self):
        with tempfile.NamedTemporaryFile(dir="/var/tmp") as f:
            f.write(os.urandom(8 << 20))
            f.flush()
            pagecache.prime([f.name])
            before = pagecache.resident_fraction([f.name])
            state = pagecache.evict([f.name], drop_caches=False)
            self.assertEqual(state["evicted_by"], "fsync+posix_fadvise(DONTNEED)")
            after = state["resident_after_evict"]
            if before is None or after is None:
                self.skipTest("mincore cannot report on this filesystem")
            self.assertLessEqual(after, before)
            if before > 0.9 and after > 0.1:
                self.skipTest(f"this filesystem keeps pages past DONTNEED ({after:.2f})")

    def test_evict_to_zero_drops_every_cache_only_when_fadvise_left_pages(self):
        with tempfile.NamedTemporaryFile(dir="/var/tmp") as f:
            f.write(os.urandom(8 << 20))
            f.flush()
            pagecache.prime([f.name])
            state = pagecache.evict_to_zero([f.name], drop_caches=True)
            if state["resident_after_evict"] is None:
                self.skipTest("mincore cannot report on this filesystem")
            self.assertEqual(state["resident_after_evict"], 0)
            if state["evict_tries"] > 1:
                self.skipTest("pages stayed past fadvise here, so drop_caches had to run")
            self.assertEqual(state["evicted_by"], "fsync+posix_fadvise(DONTNEED)")


class Schedule(unittest.TestCase):
    def test_round_robin_rotates_and_covers(self):
        jobs = schedule.round_robin(["a", "b", "c"], ["m"], ["warm", "cold"], 3)
        self.assertEqual(len(jobs), 3 * 2 * 3)
        for k in range(3):
            for cache in ("warm", "cold"):
                order = [j["loader"] for j in jobs if j["round"] == k and j["cache"] == cache]
                self.assertEqual(sorted(order), ["a", "b", "c"])
        firsts = [j["loader"] for j in jobs if j["slot"] == 0 and j["cache"] == "warm"]
        self.assertEqual(firsts, ["a", "b", "c"])
        # Warm then cold within a round: rounds interleave the cache states.
        self.assertEqual([j["cache"] for j in jobs[:6]], ["warm"] * 3 + ["cold"] * 3)

    def test_peers_flag(self):
        self.assertEqual(loaders.parse("fastsafetensors"),
                         ["fastsafetensors", "fastsafetensors-gds"])
        self.assertEqual(loaders.parse("runai-model-streamer,kvikio-cu13"), ["runai", "kvikio"])
        self.assertNotIn("selftest-corrupt", loaders.parse(None))
        with self.assertRaises(ValueError):
            loaders.parse("nosuchloader")


class Worker(Tiny):
    def test_ceiling_record_format(self):
        recs = worker({"loader": "odirect_read", "files": [str(self.path)], "cache": "cold",
                       "device": "cpu", "steady_calls": 2})
        self.assertEqual([r["call"] for r in recs], ["fresh", "steady"])
        for r in recs:
            for key in ("kind", "method", "loader_kind", "cache", "status", "seconds", "gbps",
                        "bytes", "verified", "versions", "evicted_by", "resident_after_evict"):
                self.assertIn(key, r)
            self.assertEqual((r["status"], r["verified"], r["loader_kind"]), ("ok", True, "ceiling"))
        self.assertEqual(len(recs[1]["calls_seconds"]), 2)

    def test_a_cold_call_whose_file_stayed_cached_is_no_cold_result(self):
        # Pages a process maps survive DONTNEED and drop_caches: the mapping
        # here holds the file in the page cache as a reference load that
        # shares the file's mapping would.
        with open(self.path, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as held:
            touched = sum(held[i] for i in range(0, len(held), mmap.PAGESIZE))
            del touched
            recs = worker({"loader": "odirect_read", "files": [str(self.path)],
                           "cache": "cold", "device": "cpu", "steady_calls": 1})
        if any(r.get("resident_after_evict") in (None, [None]) for r in recs):
            self.skipTest("mincore cannot report on this filesystem")
        for r in recs:
            self.assertGreater(max(r["resident_after_evict"]), 0.9, r)
            self.assertEqual(r["status"], "error", r)
            self.assertIn("not a cold read", r["error"])

    def test_cuda_loaders_without_cuda_are_unavailable_with_a_reason(self):
        if have("torch"):
            import torch

            if torch.cuda.is_available():
                self.skipTest("this machine has CUDA")
        for name in ("phoenix", "safetensors", "kvikio", "fastsafetensors-gds", "instanttensor"):
            recs = worker({"loader": name, "files": [str(self.path)], "cache": "warm",
                           "device": "cuda:0"})
            self.assertEqual({r["status"] for r in recs}, {"unavailable"}, recs)
            self.assertTrue(all(r["error"] for r in recs))

    @unittest.skipUnless(have("safetensors") and have("numpy"), "needs safetensors, numpy")
    def test_a_corrupted_load_is_a_failed_record(self):
        recs = worker({"loader": "selftest-corrupt", "files": [str(self.path)], "cache": "warm",
                       "device": "cpu"})
        self.assertEqual({(r["status"], r["verified"]) for r in recs}, {("failed", False)})
        recs = worker({"loader": "safetensors", "files": [str(self.path)], "cache": "warm",
                       "device": "cpu"})
        self.assertEqual({(r["status"], r["verified"]) for r in recs}, {("ok", True)})


@unittest.skipUnless(HAVE_MODULE and have("numpy"), "needs the build's phoenix_gds, numpy")
class EnginesRecorded(Tiny):
    """The one-line call keeps no stats object, yet its records, alone or
    N at once, name the engine it loaded with (the host engine on "cpu")."""

    def job(self, **more) -> dict:
        return {"loader": "phoenix", "files": [str(self.path)], "device": "cpu", **more}

    def expect_host_engine(self, recs: list[dict]) -> None:
        self.assertTrue(recs)
        for r in recs:
            self.assertEqual(r.get("engines"), {"0": "host"}, r)
            # Compared with safetensors' own load where it is installed.
            self.assertEqual(r["status"], "ok" if have("safetensors") else "failed", r)

    def test_one_load(self):
        self.expect_host_engine(worker(self.job(cache="warm")))

    def test_loads_from_threads(self):
        for how in ("threads", "sequential"):
            self.expect_host_engine(worker(self.job(mode="concurrent", n=2, how=how)))

    def test_a_member_process(self):
        recs = worker(self.job(mode="member"), stdin="go\n")
        self.assertEqual(recs[0], {"ready": True})
        self.expect_host_engine(recs[1:])


@unittest.skipUnless(have("matplotlib"), "bench/reproduce needs matplotlib")
class DryRun(unittest.TestCase):
    def test_reproduce_peers_quick(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            out = pathlib.Path(tmp) / "out"
            proc = subprocess.run(
                [sys.executable, str(REPO / "bench" / "reproduce"), "peers", "--quick",
                 "--peers-device", "cuda:0", "--out", str(out), "--scratch",
                 str(pathlib.Path(tmp) / "scratch")],
                capture_output=True, text=True, timeout=900, check=False)
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            manifest = json.loads((out / "manifest.json").read_text())
            entry = manifest["experiments"]["peers"]
            self.assertEqual(entry["status"], "ok")
            self.assertTrue(entry["command"].startswith("bench/reproduce peers"))
            self.assertIn("fastsafetensors", entry["pinned"])
            recs = [json.loads(x) for x in (out / "peers.jsonl").read_text().splitlines()]
            loads = [r for r in recs if r["kind"] == "load"]
            self.assertEqual({r["method"] for r in loads}, set(loaders.DEFAULT))
            for r in loads:
                if r["status"] != "ok":
                    self.assertTrue(r.get("error"), r)
                    continue
                self.assertTrue(r["verified"], r)
            ceilings = [r for r in loads if r["loader_kind"] == "ceiling"]
            self.assertTrue(ceilings and all(r["status"] == "ok" for r in ceilings))
            self.assertTrue((out / "peers.png").stat().st_size > 0)


if __name__ == "__main__":
    unittest.main()
