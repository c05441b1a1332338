#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/reproduce multigpu without a GPU: the device_map split (even,
every tensor covered), the round-robin shard sets, the goal's arithmetic
on hand-made records, the numbering checks on hand-made probe reports,
the unavailable records with 0 or 1 GPU, a flipped bit caught by the
bit-for-bit check, and (with phx-load built) a --quick run on the host
engine.  Usage: multigpu_test.py [REPO_ROOT [BUILD_DIR]] (or pytest)."""

import json
import pathlib
import subprocess
import sys
import tempfile
import unittest

from bench_args import folders, have

REPO, BUILD = folders(build=True)

from phxrepro import checkpoint  # noqa: E402
from phxrepro.experiments import fig12_models as models  # noqa: E402
from phxrepro.experiments import multigpu  # noqa: E402



def names(model: str) -> list[str]:
    return [n for n, _, _ in models.tensors(models.config(model))]


class DeviceMap(unittest.TestCase):
    def check_split(self, model: str, devices: list[int]):
        tensors = names(model)
        mapping = multigpu.split_layers(tensors, devices)
        placed = {n: multigpu.device_for(mapping, n, default=None) for n in tensors}
        # Every tensor has a device of the list, by an entry of the map.
        self.assertTrue(all(d in devices for d in placed.values()), model)
        # A layer is never cut in two; the layers spread evenly, in order.
        layers: dict = {}
        for n, d in placed.items():
            key = multigpu.layer_key(n)
            if key is not None:
                layers.setdefault(key, set()).add(d)
        self.assertTrue(all(len(ds) == 1 for ds in layers.values()))
        order = [next(iter(layers[k])) for k in sorted(layers, key=lambda k: k[1])]
        self.assertEqual(order, sorted(order, key=devices.index))
        counts = [order.count(d) for d in devices]
        self.assertLessEqual(max(counts) - min(counts), 1, (model, counts))
        self.assertEqual(sum(counts), models.config(model)["layers"])
        return mapping, placed

    def test_even_split_covers_every_tensor(self):
        for model in ("Llama-3-8B", "OPT-6.7B", "Falcon-11B", "Qwen2.5-14B",
                      models.QUICK_MODEL):
            for n in (2, 3, 4):
                self.check_split(model, list(range(n)))

    def test_embeddings_first_head_last(self):
        _, placed = self.check_split("Llama-3-8B", [0, 1, 2, 3])
        self.assertEqual(placed["model.embed_tokens.weight"], 0)
        self.assertEqual(placed["lm_head.weight"], 3)
        self.assertEqual(placed["model.norm.weight"], 3)
        self.assertEqual(placed["model.layers.7.mlp.up_proj.weight"], 0)
        self.assertEqual(placed["model.layers.8.mlp.up_proj.weight"], 1)
        _, placed = self.check_split("OPT-6.7B", [0, 1])
        self.assertEqual(placed["model.decoder.embed_positions.weight"], 0)
        self.assertEqual(placed["model.decoder.final_layer_norm.bias"], 1)

    def test_dotted_prefix_rule_and_text(self):
        # layers.1 must not take layers.10 (the library's longest dotted prefix).
        mapping = {"model.layers.1": 1, "model.layers.10": 2, "lm_head": 3}
        self.assertEqual(multigpu.device_for(mapping, "model.layers.10.x"), 2)
        self.assertEqual(multigpu.device_for(mapping, "model.layers.1.x"), 1)
        self.assertEqual(multigpu.device_for(mapping, "model.layers.100.x"), 0)
        self.assertEqual(multigpu.device_for(mapping, "lm_head"), 3)
        self.assertEqual(multigpu.device_map_text({"a.b": 0, "c": 1}), "a.b=0,c=1")

    def test_single_file_checkpoint_names(self):
        tensors = [n for n, _, _ in checkpoint.single_file_tensors(0.01)]
        mapping = multigpu.split_layers(tensors, [0, 1])
        self.assertEqual(multigpu.device_for(mapping, "layers.0.weight"), 0)
        self.assertEqual(multigpu.device_for(mapping, "layers.47.norm"), 1)
        self.assertEqual(multigpu.device_for(mapping, "embed.scale"), 0)


class Shards(unittest.TestCase):
    def test_round_robin(self):
        files = [f"f{i}" for i in range(9)]
        sets = multigpu.round_robin(files, 2)
        self.assertEqual(sets, [["f0", "f2", "f4", "f6", "f8"], ["f1", "f3", "f5", "f7"]])
        for n in (1, 2, 3, 4):
            sets = multigpu.round_robin(files, n)
            self.assertEqual(sorted(f for s in sets for f in s), sorted(files))
        self.assertEqual(multigpu.round_robin(["a"], 2), [["a"], []])
        self.assertEqual(multigpu.split_balance([4, 4, 2, 2], 2), 1.0)
        self.assertEqual(multigpu.split_balance([4], 2), 0.0)

    def test_default_model_has_a_shard_per_gpu(self):
        # OPT-6.7B on 2 GPUs: 8.4 GB against 5.0, at most 0.80 of the sum.
        self.assertAlmostEqual(multigpu.split_reach(multigpu.shard_sizes("OPT-6.7B"), 2),
                               13.32 / (2 * 8.35), places=2)
        self.assertEqual(multigpu.choose_model(2), "Qwen2.5-14B")
        self.assertEqual(multigpu.choose_model(4), "Llama-3-8B")  # none reaches; the closest
        for n in (2, 3, 4):
            model = multigpu.choose_model(n)
            sizes = multigpu.shard_sizes(model)
            self.assertGreaterEqual(len(sizes), n, model)
            reach = multigpu.split_reach(sizes, n)
            others = [multigpu.split_reach(multigpu.shard_sizes(m), n) for m in models.by_size()
                      if len(multigpu.shard_sizes(m)) >= n]
            self.assertTrue(reach >= multigpu.REACH_WANTED or reach == max(others), (n, model))


def load(part, phase, gpu, gbps, nbytes, rnd=0, verified=True, target="gpu"):
    return {"part": part, "kind": "load", "phase": phase, "gpu": gpu, "gbps": gbps,
            "bytes": nbytes, "round": rnd, "status": "ok" if verified is not False else "failed",
            "verified": verified, "target": target}


def gang(part, phase, gbps, rnd=0, span=1.0):
    return {"part": part, "kind": "gang", "phase": phase, "status": "ok", "round": rnd,
            "aggregate_gbps": gbps, "span_seconds": span}


class Ratios(unittest.TestCase):
    def test_even_split(self):
        gb = 8e9
        recs = [load("ceiling", "alone", 0, 10.0, gb), load("ceiling", "alone", 1, 10.0, gb),
                gang("ceiling", "together", 18.0),
                load("per_gpu_processes", "together", 0, 8.6, gb),
                load("per_gpu_processes", "together", 1, 8.4, gb),
                gang("per_gpu_processes", "together", 17.0, span=0.94),
                {"part": "device_map", "kind": "load", "method": "phx-load", "status": "ok",
                 "gbps": 15.0, "verified": True}]
        (r,) = multigpu.ratios(recs)
        self.assertTrue(r["goal_applies"])
        self.assertAlmostEqual(r["ceiling_sum_gbps"], 20.0)
        self.assertAlmostEqual(r["ceiling_split_gbps"], 20.0)
        self.assertAlmostEqual(r["aggregate_over_ceiling_sum"], 0.85)
        self.assertFalse(r["goal_met"])
        # The ceilings together (18) are below their sum: host memory is the bound.
        self.assertTrue(r["bound"].startswith("host memory"))
        self.assertAlmostEqual(r["aggregate_over_bound"], 17.0 / 18.0)
        self.assertTrue(r["goal_met_within_bound"])
        self.assertAlmostEqual(r["per_gpu_over_ceiling"]["0"], 0.86)
        self.assertAlmostEqual(r["device_map_over_ceiling_sum"]["phx-load"], 0.75)
        self.assertTrue(r["all_verified"])

    def test_uneven_split_and_medians(self):
        recs = [load("ceiling", "alone", 0, 10.0, 12e9, rnd=k) for k in range(3)]
        recs[1]["gbps"] = 20.0  # a lucky round: the median (10) counts
        recs += [load("ceiling", "alone", 1, 10.0, 4e9),
                 gang("ceiling", "together", 30.0),
                 gang("per_gpu_processes", "together", 12.0, rnd=0),
                 gang("per_gpu_processes", "together", 13.0, rnd=1),
                 gang("per_gpu_processes", "together", 14.0, rnd=2),
                 load("per_gpu_processes", "together", 0, 9.5, 12e9),
                 load("per_gpu_processes", "together", 1, 9.0, 4e9)]
        (r,) = multigpu.ratios(recs)
        self.assertAlmostEqual(r["ceiling_alone_gbps"]["0"], 10.0)
        self.assertAlmostEqual(r["ceiling_sum_gbps"], 20.0)
        # GPU 0 holds 12 of 16 GB: at 10 GB/s each the split allows 16 / 1.2.
        self.assertAlmostEqual(r["ceiling_split_gbps"], 16e9 / 1.2e9)
        self.assertTrue(r["bound"].startswith("per-GPU ceilings"))
        self.assertAlmostEqual(r["aggregate_gbps"], 13.0)
        self.assertAlmostEqual(r["aggregate_over_ceiling_sum"], 0.65)
        self.assertAlmostEqual(r["aggregate_over_bound"], 13.0 * 1.2 / 16)
        self.assertAlmostEqual(r["split_balance"], 1 / 3)

    def test_unverified_load_fails_the_goal(self):
        recs = [load("ceiling", "alone", 0, 10.0, 1e9), load("ceiling", "alone", 1, 10.0, 1e9),
                gang("per_gpu_processes", "together", 19.5),
                load("per_gpu_processes", "together", 0, 9.8, 1e9),
                load("per_gpu_processes", "together", 1, 9.8, 1e9, verified=False)]
        (r,) = multigpu.ratios(recs)
        self.assertGreaterEqual(r["aggregate_over_ceiling_sum"], 0.9)
        self.assertFalse(r["all_verified"])
        self.assertFalse(r["goal_met"])

    def test_host_and_one_gpu_runs_do_not_claim_the_goal(self):
        host = [load("ceiling", "alone", 0, 1.0, 1e6, target="host"),
                load("ceiling", "alone", 1, 1.0, 1e6, target="host")]
        (r,) = multigpu.ratios(host)
        self.assertFalse(r["goal_applies"])
        self.assertIn("host engine", r["note"])
        (r,) = multigpu.ratios([load("ceiling", "alone", 0, 1.0, 1e6)])
        self.assertFalse(r["goal_applies"])
        self.assertEqual(multigpu.ratios([]), [])


BUS = ["0000:18:00.0", "0000:9a:00.0"]
SMI = [{"index": 0, "pci_bus_id": BUS[0]}, {"index": 1, "pci_bus_id": BUS[1]}]


def probe_report(order, phoenix_ids, tensor_ordinals):
    buses = [BUS[i] for i in order]
    return {"driver": {"ok": True, "count": len(order), "bus": buses},
            "torch": {"bus": buses},
            "phoenix": {"ordinals": [
                {"ordinal": o, "phoenix_id": phoenix_ids[o], "reason_bus": buses[o],
                 "tensor_device": f"cuda:{tensor_ordinals[o]}",
                 "tensor_pointer_ordinal": tensor_ordinals[o],
                 "torch_device_index": tensor_ordinals[o], "tensor_bytes_ok": True}
                for o in range(len(order))]}}


class Numbering(unittest.TestCase):
    def test_bus_ids_normalised(self):
        self.assertEqual(multigpu.norm_bus("00000000:9A:00.0"), "0000:9a:00.0")
        self.assertEqual(multigpu.norm_bus("0000:9a:00.0"), "0000:9a:00.0")
        self.assertIsNone(multigpu.norm_bus(None))

    def test_reversed_pair(self):
        # CUDA_VISIBLE_DEVICES=1,0 in PCI order: ordinal 0 is the second
        # GPU; Phoenix numbers by bus, so its id 1; "cuda:0" still lands on ordinal 0.
        checks = multigpu.numbering_checks(probe_report([1, 0], [1, 0], [0, 1]), [1, 0],
                                           SMI, True)
        self.assertFalse([k for k in multigpu.FAILING_CHECKS if checks[k] is False], checks)
        self.assertTrue(checks["tensor_on_that_ordinal"])
        self.assertFalse(checks["phoenix_id_equals_cuda_ordinal"])

    def test_a_tensor_on_the_wrong_gpu_fails(self):
        checks = multigpu.numbering_checks(probe_report([1, 0], [1, 0], [1, 0]), [1, 0],
                                           SMI, True)
        self.assertIs(checks["tensor_on_that_ordinal"], False)
        checks = multigpu.numbering_checks(probe_report([0, 1], [1, 0], [0, 1]), [0, 1],
                                           SMI, True)
        self.assertIs(checks["phoenix_id_is_pci_rank"], False)
        checks = multigpu.numbering_checks(probe_report([1, 0], [1, 0], [0, 1]), [0, 1],
                                           SMI, True)
        self.assertIs(checks["cuda_follows_visible_list"], False)

    def test_subsets(self):
        self.assertEqual([s[0] for s in multigpu.subsets(1)], ["all", "0"])
        self.assertEqual([s[0] for s in multigpu.subsets(4)],
                         ["all", "0", "1", "2", "3", "1,0", "all, default order"])


class FakeCtx:
    def __init__(self, tmp, quick):
        self.quick, self.mode, self.options, self.verbose = quick, "local", {}, False
        self.scratch = pathlib.Path(tmp)
        self.build = BUILD

    def scratch_file(self, name):
        return str(self.scratch / name)

    def log(self, message):
        pass


class Unavailable(unittest.TestCase):
    def run_with(self, count, quick):
        saved = multigpu.devices_part, multigpu.get_checkpoint

        def devices(ctx, scratch):
            return ([{"part": "devices", "status": "ok", "cuda_count": count}],
                    {"count": count, "names": ["NVIDIA H200"] * count, "phoenix_ids": {}})

        def no_checkpoint(*args):
            raise RuntimeError("stopped here by the test")

        multigpu.devices_part, multigpu.get_checkpoint = devices, no_checkpoint
        try:
            with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
                return multigpu.run(FakeCtx(tmp, quick))
        finally:
            multigpu.devices_part, multigpu.get_checkpoint = saved

    def test_no_gpu_without_quick(self):
        recs = self.run_with(0, False)
        parts = {r["part"]: r for r in recs if r.get("status") == "unavailable"}
        self.assertEqual(set(parts), {"ceiling", "device_map", "per_gpu_processes", "kv"})
        self.assertTrue(all("found 0 GPU" in r["reason"] for r in parts.values()))

    def test_one_gpu(self):
        recs = self.run_with(1, False)
        parts = {r["part"]: r for r in recs if r.get("status") == "unavailable"}
        self.assertEqual(set(parts), set(multigpu.MULTI_PARTS))
        self.assertTrue(all("found 1 GPU" in r["reason"] and "N=1" in r["reason"]
                            for r in parts.values()))
        # It went on to the parts that make sense on one GPU.
        self.assertEqual(recs[-1]["part"], "checkpoint")
        self.assertEqual(recs[-1]["target"], "gpu")

    def test_no_gpu_with_quick_runs_on_the_host(self):
        recs = self.run_with(0, True)
        parts = {r["part"]: r for r in recs if r.get("status") == "unavailable"}
        self.assertEqual(set(parts), set(multigpu.MULTI_PARTS))
        self.assertTrue(all("host" in r["reason"] for r in parts.values()))
        self.assertEqual(recs[-1]["target"], "host")


@unittest.skipUnless(have("numpy"), "needs numpy")
class BitForBit(unittest.TestCase):
    def test_a_flipped_bit_is_caught(self):
        import numpy

        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            path = pathlib.Path(tmp) / "t.safetensors"
            checkpoint.write(path, [("a", [8, 8], "F16"), ("b", [16], "F32")])
            base, head = multigpu.header(path)
            raw = path.read_bytes()
            got = {}
            for name, t in head.items():
                if name != "__metadata__":
                    lo, hi = t["data_offsets"]
                    got[name] = numpy.frombuffer(raw[base + lo:base + hi], dtype=numpy.uint8) \
                        .copy().view({"F16": numpy.float16, "F32": numpy.float32}[t["dtype"]]) \
                        .reshape(t["shape"])
            self.assertEqual(multigpu.compare_with_files(got, [str(path)]), (True, "", 2))
            got["b"].view(numpy.uint8)[5] ^= 1
            ok, detail, _ = multigpu.compare_with_files(got, [str(path)])
            self.assertFalse(ok)
            self.assertIn("b: bytes differ", detail)
            del got["a"]
            self.assertFalse(multigpu.compare_with_files(got, [str(path)])[0])


PHX_LOAD = BUILD / "tools" / "phx-load" / "phx-load"


@unittest.skipUnless(PHX_LOAD.exists() and have("matplotlib"),
                     f"needs {PHX_LOAD} and matplotlib")
class QuickRun(unittest.TestCase):
    def test_reproduce_multigpu_quick(self):
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            out = pathlib.Path(tmp) / "out"
            proc = subprocess.run(
                [sys.executable, str(REPO / "bench" / "reproduce"), "multigpu", "--quick",
                 "--build", str(BUILD), "--out", str(out), "--scratch",
                 str(pathlib.Path(tmp) / "scratch")],
                capture_output=True, text=True, timeout=600, check=False)
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
            entry = json.loads((out / "manifest.json").read_text())["experiments"]["multigpu"]
            self.assertEqual(entry["status"], "ok", entry)
            recs = [json.loads(x) for x in (out / "multigpu.jsonl").read_text().splitlines()]
            self.assertTrue((out / "multigpu.png").stat().st_size > 0)
            (devices,) = [r for r in recs if r["part"] == "devices"]
            loads = [r for r in recs
                     if r.get("kind") == "load" and r.get("status") != "unavailable"]
            checked = {r["part"] for r in loads if r.get("verified") is True}
            want = {"device_map", "per_gpu_processes", "kv"}
            if not list((BUILD / "python" / "phoenix_gds").glob("_phoenix*.so")):
                # Builds without the Python package (the sanitizers'): the
                # per-GPU processes say why they could not load.
                want.discard("per_gpu_processes")
                missing = [r for r in recs if r["part"] == "per_gpu_processes"
                           and r.get("kind") == "load"]
                self.assertTrue(missing and all(r["status"] == "unavailable" and
                                                "phoenix_gds" in r["error"] for r in missing),
                                missing)
            if devices["cuda_count"] == 1:
                # One GPU: no layers to split, so no device_map run; the
                # per-GPU processes and the KV gather run with N=1.
                want.discard("device_map")
                self.assertIn("device_map", {r["part"] for r in recs
                                             if r.get("kind") == "multi_gpu"
                                             and r["status"] == "unavailable"})
            self.assertEqual(checked, want, checked)
            for r in loads:
                if r["part"] != "ceiling":
                    self.assertIs(r.get("verified"), True, r)
                self.assertEqual(r["status"], "ok", r)
            (ratio,) = [r for r in recs if r["kind"] == "ratios"]
            self.assertTrue(ratio["all_verified"])
            if "per_gpu_processes" in want:
                self.assertIsNotNone(ratio["aggregate_over_ceiling_sum"])
            if devices["cuda_count"] == 0:
                # The host engine stands in, and every record says so.
                self.assertTrue(all(r["target"] == "host" for r in loads))
                self.assertFalse(ratio["goal_applies"])
                unavailable = {r["part"] for r in recs if r.get("kind") == "multi_gpu"}
                self.assertEqual(unavailable, set(multigpu.MULTI_PARTS))
                (numbering,) = [r for r in recs if r["part"] == "numbering"]
                self.assertEqual(numbering["status"], "unavailable")
                dm = [r for r in loads if r["part"] == "device_map"]
                self.assertTrue(dm and all(set(r["engines"]) == {"0", "1"} for r in dm), dm)
            else:
                self.assertFalse([r for r in recs if r.get("kind") == "numbering"
                                  and r["status"] == "failed"])


if __name__ == "__main__":
    unittest.main()
