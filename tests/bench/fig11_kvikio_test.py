#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""fig11's kvikio peer without a GPU.

- kv_replay parses traces as phx-kvcache's trace.cpp does and plans the
  same loads: which blocks, one load per sequence, which pool slots (the
  FIFO free list), which file offsets; its timing follows replay.cpp.
- Its check catches one wrong byte in the pool, naming the block.
- fig11: kvikio runs only when asked for and only on this machine, after
  phx-kvcache has written the KV file, with KVIKIO_COMPAT_MODE=ON; the
  ratios gain compat_over_kvikio and the goal asks compat >= kvikio.
- Without kvikio (or torch, or a GPU) the peer is one "unavailable" record.
- Given phx-kvcache, its --stats agree with kv_replay's parser and a file
  it wrote passes kv_replay's check (the pattern is the tools' pattern).

The read backend here is a host-memory pool (HostPool): kv_replay takes
its backend as an argument for this.
Usage: fig11_kvikio_test.py [REPO_ROOT [PHX_KVCACHE]] (or pytest)."""

import contextlib
import io
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest

# The positional arguments, before unittest's own options.
POSITIONAL = list(itertools.takewhile(lambda a: not a.startswith("-"), sys.argv[1:3]))
REPO = pathlib.Path(POSITIONAL[0]).resolve() if POSITIONAL else \
    pathlib.Path(__file__).resolve().parents[2]
TOOL = POSITIONAL[1] if len(POSITIONAL) > 1 else None
sys.path.insert(0, str(REPO / "bench"))
from phxrepro.system_python import ensure_matplotlib  # noqa: E402

# fig11 imports the plotting module; Debian's python3 with matplotlib has numpy too.
ensure_matplotlib("fig11_kvikio_test")
del sys.argv[1:1 + len(POSITIONAL)]

import numpy as np  # noqa: E402

from phxrepro import Context  # noqa: E402
from phxrepro.experiments import fig11  # noqa: E402
from phxrepro.peers import kv_replay as kv  # noqa: E402

TRACES = REPO / "bench" / "data" / "kvcache-traces"

# The real format (bench/data/kvcache-traces/README.md), with what a
# parser must tolerate: blank lines, "\r\n" ends, extra spaces, an empty list,
# a sequence without rounds.
SYNTHETIC = ("Seq1 (conversation id: conv_a):\r\n"
             "Round 1-human: [0, 1, 2]\r\n"
             "Round 2-gpt: [3]\r\n"
             "\r\n"
             "Seq2 (conversation id: conv_b):\n"
             "Round 1-human: [ 10 ,5 ]\n"
             "Round 2-gpt: []\n"
             "\n"
             "Seq3 (conversation id: conv_c):\n"
             "Round 1-human: [7, 8, 9, 6, 4]\n"
             "Seq4 (conversation id: conv_d):\n"
             "Seq5 (conversation id: conv_e):\n"
             "Round 1-human: [11, 12]\n")
# (block, slot) per load, worked out by hand from slot_pool.cpp's FIFO free
# list of 2 * 5 = 10 slots: Seq1 takes 0-3 and frees them behind 4-9, Seq2
# takes 4, 5, Seq3 takes 6-9 and then 0, Seq5 takes 1, 2.
EXPECTED = [[(0, 0), (1, 1), (2, 2), (3, 3)], [(10, 4), (5, 5)],
            [(7, 6), (8, 7), (9, 8), (6, 9), (4, 0)], [], [(11, 1), (12, 2)]]
BLOCK = 8192


def write_pattern_file(path, size):
    with open(path, "wb") as f:
        f.write(kv.pattern_bytes(0, size, np).tobytes())


class HostPool(kv.ReadBackend):
    """A pool in host memory filled by os.pread; records each load's reads."""

    def __init__(self, path, block_size, pool_blocks, device=0):
        self.fd = os.open(path, os.O_RDONLY)
        self.bs = block_size
        self.pool = np.zeros(pool_blocks * block_size, dtype=np.uint8)
        self.loads = []

    def describe(self):
        return {"library": "host test pool", "compat_mode": "n/a"}

    def load(self, prepared):
        self.loads.append([(r.block, r.slot, r.file_offset, r.pool_offset) for r in prepared])
        for r in prepared:
            data = os.pread(self.fd, self.bs, r.file_offset)
            if len(data) != self.bs:
                raise kv.ReplayFailure(f"block {r.block}: {len(data)} of {self.bs} bytes")
            self.pool[r.pool_offset:r.pool_offset + self.bs] = np.frombuffer(data, np.uint8)
        return len(prepared)

    def fetch(self, reads):
        return self.pool.reshape(-1, self.bs)[[r.slot for r in reads]].reshape(-1)

    def close(self):
        os.close(self.fd)


class OneWrongByte(HostPool):
    """Loads right, then one byte of one block's slot differs."""

    def __init__(self, *args, block, at):
        super().__init__(*args)
        self.block, self.at = block, at

    def load(self, prepared):
        n = super().load(prepared)
        for r in prepared:
            if r.block == self.block:
                self.pool[r.pool_offset + self.at] ^= 0x40
        return n


# tools/common/pattern.hpp's kPatternSeed, written out: a wrong seed in
# kv_replay must fail here too.
TOOLS_PATTERN_SEED = 0x7068786265E7C401


def splitmix_word(index):
    """pattern.cpp's word_at in plain integers, to check the vectorised one."""
    mask = (1 << 64) - 1
    z = (index * 0x9E3779B97F4A7C15 + TOOLS_PATTERN_SEED) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


class Scratch(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR", "/var/tmp"))
        self.dir = pathlib.Path(self.tmp.name)
        self.trace = self.dir / "synthetic.txt"
        self.trace.write_text(SYNTHETIC, newline="")
        self.file = self.dir / "kv.bin"

    def tearDown(self):
        self.tmp.cleanup()

    def job(self, **extra):
        return {"trace": str(self.trace), "file": str(self.file), "block_size": BLOCK,
                "evict": False, **extra}


class Parser(unittest.TestCase):
    def test_synthetic_trace(self):
        trace = kv.parse_trace(SYNTHETIC, "synthetic.txt")
        self.assertEqual([s.id for s in trace.sequences],
                         ["conv_a", "conv_b", "conv_c", "conv_d", "conv_e"])
        self.assertEqual([[b for b, _ in load] for load in EXPECTED],
                         [s.blocks for s in trace.sequences])
        self.assertEqual((trace.block_count(), trace.largest_block(), trace.longest_sequence()),
                         (13, 12, 5))

    def test_readme_statistics(self):
        for name, want in {"paper_assit.txt": (23, 15708, 15707), "gsm100.txt": (100, 33600, 33599),
                           "quality.txt": (15, 6428, 6427),
                           "sharegpt-sample-200.txt": (197, 20195, 20195)}.items():
            t = kv.load_trace(str(TRACES / name))
            self.assertEqual((len(t.sequences), t.block_count(), t.largest_block()), want, name)
            # fig11's own shape helper (pool size, file size) agrees.
            self.assertEqual(fig11.trace_shape(TRACES / name), (t.largest_block(),
                                                                t.longest_sequence()), name)

    def test_max_sequences_cuts_like_the_tool(self):
        t = kv.load_trace(str(TRACES / "quality.txt"), 4)
        self.assertEqual(len(t.sequences), 4)
        self.assertEqual(fig11.trace_shape(TRACES / "quality.txt", 4),
                         (t.largest_block(), t.longest_sequence()))

    def test_malformed_lines_name_the_line(self):
        for text, where, why in (("Round 1-human: [1, 2]\n", ":1:", "before any Seq"),
                                 ("Seq1 (conversation id: x):\nRound 1: [1, x2]\n", ":2:", "x2"),
                                 ("Seq1:\nRound 1: [1,\t2]\n", ":2:", "bad block id"),
                                 ("Seq1:\nRound 1: [1, 2\n", ":2:", "without a [...]"),
                                 ("Seq1:\nRound 1: [18446744073709551616]\n", ":2:", "bad block"),
                                 ("Seq1:\nhello\n", ":2:", "neither")):
            with self.assertRaises(kv.TraceError) as e:
                kv.parse_trace(text, "t.txt")
            self.assertIn("t.txt" + where, str(e.exception))
            self.assertIn(why, str(e.exception))
        # The largest 64-bit id is an id.
        self.assertEqual(kv.parse_trace("Seq1:\nRound 1: [18446744073709551615]\n", "t")
                         .sequences[0].blocks, [(1 << 64) - 1])


class Plan(unittest.TestCase):
    def test_blocks_slots_offsets_per_load(self):
        trace = kv.parse_trace(SYNTHETIC, "synthetic.txt")
        self.assertEqual(kv.default_pool_blocks(trace), 10)
        loads = kv.plan_loads(trace, BLOCK, kv.default_pool_blocks(trace))
        self.assertEqual([[(r.block, r.slot) for r in load] for load in loads], EXPECTED)
        for load in loads:
            for r in load:
                self.assertEqual((r.file_offset, r.pool_offset), (r.block * BLOCK, r.slot * BLOCK))

    def test_pool_too_small_fails_like_the_tool(self):
        trace = kv.parse_trace(SYNTHETIC, "synthetic.txt")
        with self.assertRaisesRegex(kv.ReplayFailure, "4 free slots, a sequence needs 5"):
            kv.plan_loads(trace, BLOCK, 4)

    def test_quantile_interpolates(self):
        self.assertEqual(kv.quantile([], 0.5), 0.0)
        self.assertAlmostEqual(kv.quantile([4, 1, 3, 2], 0.5), 2.5)
        self.assertAlmostEqual(kv.quantile([4, 1, 3, 2], 0.99), 3.97)
        self.assertEqual(kv.quantile([4, 1, 3, 2], 1.0), 4)


class Pattern(unittest.TestCase):
    def test_numpy_pattern_is_the_tools(self):
        for offset in (0, 8, 4096, 1 << 33):
            got = kv.pattern_bytes(offset, 64, np).tobytes()
            want = b"".join(splitmix_word(offset // 8 + i).to_bytes(8, "little")
                            for i in range(8))
            self.assertEqual(got, want, offset)


class Replay(Scratch):
    def test_loads_are_the_plan_and_all_verify(self):
        write_pattern_file(self.file, 16 * BLOCK)
        backends = []

        def open_backend(*args):
            backends.append(HostPool(*args))
            return backends[-1]
        rec = kv.run_job(self.job(), open_backend, np)
        self.assertEqual(rec["status"], "ok", rec)
        # One load per sequence (the empty one too), each with every block of
        # the sequence, in the planned slots at the planned offsets.
        self.assertEqual([[(b, s) for b, s, _, _ in load] for load in backends[0].loads],
                         EXPECTED)
        self.assertTrue(all(off == b * BLOCK and pool == s * BLOCK
                            for load in backends[0].loads for b, s, off, pool in load))
        self.assertEqual((rec["engine"], rec["trace"], rec["block_size"], rec["pool_blocks"]),
                         ("kvikio", "synthetic.txt", BLOCK, 10))
        self.assertEqual((rec["sequences"], rec["blocks"], rec["bytes"], rec["requests"]),
                         (5, 13, 13 * BLOCK, 13))
        self.assertEqual((rec["verified"], rec["blocks_checked"], rec["mismatches"]),
                         (True, 13, 0))
        lat = rec["latency_ms"]
        self.assertTrue(0 <= lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"], lat)
        self.assertAlmostEqual(rec["bandwidth_GBps"], rec["bytes"] / rec["io_s"] / 1e9)
        self.assertEqual(rec["compat_mode"], "n/a")  # copied up from the backend's config

    def test_one_wrong_byte_fails_the_check(self):
        write_pattern_file(self.file, 16 * BLOCK)
        rec = kv.run_job(self.job(), lambda *a: OneWrongByte(*a, block=6, at=5000), np)
        self.assertEqual((rec["status"], rec["verified"], rec["mismatches"]), ("failed", False, 1))
        # Block 6 went to slot 9 (EXPECTED); the byte as phx-kvcache names it.
        self.assertEqual(rec["first_mismatch"], "block 6 (slot 9) at byte 5000")
        self.assertEqual(rec["blocks_checked"], 13)

    def test_a_block_from_the_wrong_offset_fails(self):
        write_pattern_file(self.file, 16 * BLOCK)

        class Shifted(HostPool):
            def load(self, prepared):
                return super().load([kv.BlockRead(r.block, r.slot, r.file_offset + 8,
                                                  r.pool_offset) for r in prepared])
        rec = kv.run_job(self.job(max_sequences=1), Shifted, np)
        self.assertEqual((rec["status"], rec["mismatches"], rec["sequences"]), ("failed", 4, 1))

    def test_without_verify_nothing_is_checked(self):
        write_pattern_file(self.file, 16 * BLOCK)
        rec = kv.run_job(self.job(verify=False), lambda *a: OneWrongByte(*a, block=6, at=1), np)
        self.assertEqual((rec["status"], rec["verified"]), ("ok", None))
        self.assertNotIn("blocks_checked", rec)

    def test_short_file_and_missing_file_fail_before_reading(self):
        opened = []
        write_pattern_file(self.file, 12 * BLOCK)  # block 12 needs 13 blocks
        for path in (self.file, self.dir / "missing.bin"):
            rec = kv.run_job({**self.job(), "file": str(path)},
                             lambda *a: opened.append(a), np)
            self.assertEqual(rec["status"], "failed")
            self.assertIn("--min-file-size", rec["error"])
        self.assertEqual(opened, [])

    def test_a_backend_exception_is_an_error_record(self):
        write_pattern_file(self.file, 16 * BLOCK)

        def broken(*args):
            raise OSError(5, "no such luck")
        rec = kv.run_job(self.job(), broken, np)
        self.assertEqual(rec["status"], "error")
        self.assertIn("no such luck", rec["error"])

    def test_timing_spans_are_replay_cpps(self):
        # A clock that ticks once per reading: per sequence io_start, io_end
        # and the check's end.  io_s: the loads only; e2e_s: all but checks.
        write_pattern_file(self.file, 16 * BLOCK)
        trace = kv.load_trace(str(self.trace))
        loads = kv.plan_loads(trace, BLOCK, 10)
        ticks = itertools.count()
        pool = HostPool(str(self.file), BLOCK, 10)
        stats = kv.replay(loads, pool, BLOCK, verify=True, np=np,
                          clock=lambda: float(next(ticks)))
        pool.close()
        self.assertEqual(stats.latencies, [1.0] * 5)
        self.assertEqual(stats.io_seconds, 5.0)
        self.assertEqual(stats.e2e_seconds, 16.0 - 5.0)  # 17 readings, 5 checks of one tick
        self.assertEqual((stats.bytes, stats.requests), (13 * BLOCK, 13))


class Unavailable(Scratch):
    def test_missing_kvikio_is_one_unavailable_record(self):
        out = io.StringIO()
        saved = sys.modules.get("kvikio")
        sys.modules["kvikio"] = None  # import kvikio raises ImportError
        try:
            with contextlib.redirect_stdout(out):
                self.assertEqual(kv.main(self.job(round=0)), 0)
        finally:
            if saved is None:
                del sys.modules["kvikio"]
            else:
                sys.modules["kvikio"] = saved
        (rec,) = [json.loads(line) for line in out.getvalue().splitlines()]
        self.assertEqual((rec["status"], rec["engine"], rec["trace"], rec["block_size"]),
                         ("unavailable", "kvikio", "synthetic.txt", BLOCK))
        self.assertIn("import", rec["reason"])

    def test_fig11s_command_runs_the_module(self):
        # The command fig11 builds, run as ctx.run_json runs it.  Here (no
        # kvikio, torch or GPU) it says why; on a GPU machine it replays.
        write_pattern_file(self.file, 16 * BLOCK)
        ctx = make_ctx(self.dir, ["compat", "kvikio"])
        got = fig11.run_peer(ctx, "kvikio", str(self.trace), str(self.file), BLOCK, 0,
                             13 * BLOCK, {"point": "synthetic.txt/8192", "kv_engine": "kvikio",
                                          "round": 0})
        self.assertEqual(len(got), 1, got)
        self.assertEqual((got[0]["engine"], got[0]["round"]), ("kvikio", 0))
        self.assertIn(got[0]["status"], ("unavailable", "ok"), got)
        if got[0]["status"] == "ok":
            self.assertIs(got[0]["verified"], True)


def make_ctx(tmp, engines, **kw):
    return Context(build=pathlib.Path(tmp) / "build", out=pathlib.Path(tmp) / "out",
                   scratch=pathlib.Path(tmp) / "scratch", quick=kw.pop("quick", True),
                   engines=engines, emulated=False, label="test", machine={}, **kw)


class Fig11Runs(Scratch):
    def test_kvikio_only_when_asked_and_only_here(self):
        def engines(names, **kw):
            return fig11.plan(make_ctx(self.dir, names, **kw))[2]
        self.assertEqual(engines(["direct", "compat", "cufile", "posix", "host"]),
                         ["direct", "compat", "cufile", "posix", "host", "pinned"])
        self.assertEqual(engines(["compat", "kvikio"]), ["compat", "pinned", "kvikio"])
        self.assertEqual(engines(["kvikio"], quick=False), ["pinned", "kvikio"])
        self.assertEqual(engines(["compat", "kvikio"], mode="plan"), ["compat"])
        self.assertNotIn("kvikio", fig11.KV_ENGINES)

    def test_file_written_before_the_peer_and_compat_mode_on(self):
        ctx = make_ctx(self.dir, ["compat", "kvikio"])
        ctx.tool = lambda name: f"/fake/{name}"
        calls = []

        def run_json(cmd, *, timeout=None, meta=None):
            cmd = [str(c) for c in cmd]
            calls.append(cmd)
            if cmd[0] == "/fake/phx-kvcache":
                path = cmd[cmd.index("--file") + 1]
                size = int(cmd[cmd.index("--min-file-size") + 1])
                with open(path, "ab") as f:
                    f.truncate(max(size, os.path.getsize(path)))
                engine = cmd[cmd.index("--engine") + 1]
                return [{**(meta or {}), "engine": engine, "status": "ok"}]
            return [{**(meta or {}), "engine": "kvikio", "status": "ok"}]
        ctx.run_json = run_json
        fig11.run(ctx)
        peer = [i for i, c in enumerate(calls) if "phxrepro.peers.kv_replay" in c]
        self.assertEqual(len(peer), 3)  # quick: one trace, three block sizes, one round
        # The untimed write comes first even in a single-round run.
        self.assertEqual(calls[0][0], "/fake/phx-kvcache")
        self.assertIn("--min-file-size", calls[0])
        cmd = calls[peer[0]]
        self.assertEqual(cmd[:2], ["env", "KVIKIO_COMPAT_MODE=ON"])
        self.assertTrue(cmd[2].startswith("PYTHONPATH=" + str(REPO / "bench")))
        self.assertEqual(cmd[3:6], [sys.executable, "-m", "phxrepro.peers.kv_replay"])
        job = json.loads(cmd[6])
        self.assertEqual((job["trace"], job["max_sequences"], job["verify"]),
                         (f"{fig11.traces_dir()}/{fig11.QUICK_TRACE}", fig11.QUICK_SEQUENCES,
                          True))
        self.assertEqual(job["file"], calls[0][calls[0].index("--file") + 1])

    def test_missing_file_is_a_failed_record_not_a_read(self):
        ctx = make_ctx(self.dir, ["kvikio"])
        ctx.run_json = lambda *a, **k: self.fail("the peer ran without its file")
        (rec,) = fig11.run_peer(ctx, "kvikio", "t/quality.txt", str(self.dir / "none.bin"),
                                BLOCK, 4, BLOCK, {"point": "quality.txt/8192", "round": 0})
        self.assertEqual((rec["status"], rec["engine"], rec["trace"]),
                         ("failed", "kvikio", "quality.txt"))


def row(engine, gbps, rnd=0, trace="t.txt", size=BLOCK, status="ok", verified=True):
    return {"engine": engine, "trace": trace, "block_size": size, "status": status,
            "bandwidth_GBps": gbps, "verified": verified, "round": rnd,
            "latency_ms": {"p50": 1.0, "p99": 2.0}}


class Ratios(unittest.TestCase):
    def test_compat_over_kvikio_and_the_goal(self):
        base = [row("compat", 5.0), row("posix", 0.5), row("pinned", 5.5)]
        (r,) = [x for x in fig11.ratios(base + [row("kvikio", 4.0)]) if x["kind"] == "ratios"]
        self.assertAlmostEqual(r["compat_over_kvikio"], 1.25)
        self.assertAlmostEqual(r["kvikio_over_pinned"], 4.0 / 5.5)
        self.assertTrue(r["goal_met"])
        (r,) = fig11.ratios(base + [row("kvikio", 6.0), row("direct", 6.6)])
        self.assertAlmostEqual(r["compat_over_kvikio"], 5.0 / 6.0)
        self.assertAlmostEqual(r["direct_over_kvikio"], 1.1)
        self.assertFalse(r["goal_met"])  # compat beats posix and nears pinned, not kvikio

    def test_without_kvikio_the_goal_is_as_before(self):
        (r,) = fig11.ratios([row("compat", 5.0), row("posix", 0.5), row("pinned", 5.5)])
        self.assertNotIn("compat_over_kvikio", r)
        self.assertTrue(r["goal_met"])

    def test_medians_over_rounds(self):
        rounds = [row("compat", 5.0, 0), row("compat", 5.2, 1), row("compat", 4.0, 2),
                  row("kvikio", 4.0, 0), row("kvikio", 6.0, 1), row("kvikio", 5.1, 2),
                  row("posix", 0.5), row("pinned", 5.5)]
        (r,) = fig11.ratios(rounds)
        self.assertAlmostEqual(r["compat_over_kvikio"], 5.0 / 5.1)
        self.assertEqual(r["rounds_GBps"]["kvikio"], [4.0, 5.1, 6.0])
        self.assertFalse(r["goal_met"])

    def test_a_failed_peer_round_is_named(self):
        (r,) = fig11.ratios([row("compat", 5.0), row("posix", 0.5), row("pinned", 5.5),
                             row("kvikio", 9.0, status="failed", verified=False)])
        self.assertNotIn("compat_over_kvikio", r)
        self.assertEqual(r["peer_problems"], ["failed"])


@unittest.skipUnless(TOOL, "phx-kvcache not given")
class AgainstTheTool(Scratch):
    def tool(self, *args):
        proc = subprocess.run([TOOL, *map(str, args)], capture_output=True, text=True,
                              timeout=120, check=False)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]

    def test_stats_agree(self):
        for max_seq in (0, 2):
            (s,) = self.tool("--trace", self.trace, "--block-size", BLOCK, "--stats",
                             "--max-sequences", max_seq)
            t = kv.load_trace(str(self.trace), max_seq)
            self.assertEqual((s["sequences"], s["blocks"], s["largest_block"],
                              s["longest_sequence"], s["trace"]),
                             (len(t.sequences), t.block_count(), t.largest_block(),
                              t.longest_sequence(), t.name))

    def test_a_file_the_tool_wrote_verifies(self):
        (r,) = self.tool("--trace", self.trace, "--block-size", BLOCK, "--engine", "host",
                         "--verify", "--file", self.file)
        rec = kv.run_job(self.job(), HostPool, np)
        self.assertEqual((rec["status"], rec["verified"], rec["blocks_checked"]),
                         ("ok", True, 13), rec)
        for key in ("trace", "block_size", "pool_blocks", "sequences", "blocks", "bytes",
                    "blocks_checked", "mismatches", "max_sequences"):
            self.assertEqual(rec[key], r[key], key)


if __name__ == "__main__":
    unittest.main(verbosity=1)
