#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""transformers' from_pretrained against phoenix_gds.hf.from_pretrained on a GPU.

    from_pretrained.py generate --dir D      # a random Llama checkpoint (9.08 GB, 4 shards)
    from_pretrained.py verify --dir D        # both in one process: bits and tokens compared
    from_pretrained.py run --dir D --out F   # every call in a fresh process, warm and cold

Each timed call runs in a fresh Python process with torch, transformers and
phoenix_gds imported and CUDA up: from the call to a model whose weights are
on the GPU (torch.cuda.synchronize()).  Warm: the shards read once before;
cold: evicted until mincore finds none of their pages, checked in the
worker right before the call.  Rounds rotate the order of the configs;
the mixed rows run after every round of the others.
Rows: "transformers" (its from_pretrained), "phoenix" (phoenix_gds.hf,
with its phases: {phase: [start, end]} seconds, from hf.last_phases()),
"loader" (phoenix_gds.load_safetensors alone: the bytes without a model),
"transformers-mixed" and "phoenix-mixed" (a mixed device_map: the
embeddings and the first half of the layers on the GPU, the rest, the
final norm and lm_head on the CPU, where offloading users put them; the
worker records each parameter's device), and cold raw readers of the same files into host memory (no GPU copy):
buffered and O_DIRECT, threads each reading one contiguous range.
Records are JSON lines; the summary, phoenix's median phases and the
goals' ratios come last.
"""

from __future__ import annotations

import argparse
import gc
import json
import mmap
import os
import pathlib
import statistics
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from phxrepro.experiments.cufile_costs import rotated  # noqa: E402
from phxrepro.peers import pagecache  # noqa: E402
from phxrepro.records import add_round_arguments, goal_ratio  # noqa: E402
from phxrepro.records import manifest_header, run_worker  # noqa: E402

MODEL_CONFIGS = ["transformers", "phoenix", "loader"]
MIXED_CONFIGS = ["transformers-mixed", "phoenix-mixed"]
RAW_CONFIGS = ["raw-buffered-16x16M", "raw-buffered-4x64M", "raw-direct-16x16M"]
PROMPT = [128000, 791, 6864, 315, 9822, 374, 12366, 13, 578, 6864]


def llama_config(layers: int, tiny: bool = False):
    """Llama-3-8B's shapes with @layers layers (16: 9.08 GB in bf16); @tiny:
    a small model of the same architecture, for trying the script out."""
    from transformers import LlamaConfig

    if tiny:
        return LlamaConfig(vocab_size=128256, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                           dtype="bfloat16", architectures=["LlamaForCausalLM"])
    return LlamaConfig(vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                       num_hidden_layers=layers, num_attention_heads=32, num_key_value_heads=8,
                       max_position_embeddings=8192, rope_theta=500000.0, rms_norm_eps=1e-5,
                       tie_word_embeddings=False, dtype="bfloat16",
                       architectures=["LlamaForCausalLM"])


def generate(args) -> int:
    """Random bf16 weights (made on the GPU, seeded), sharded as transformers
    shards them, with config.json, generation_config.json and the index."""
    import torch
    from safetensors.torch import save_file
    from transformers import GenerationConfig, LlamaForCausalLM

    folder = pathlib.Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    config = llama_config(args.layers, args.tiny)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in LlamaForCausalLM(config).state_dict().items()}
    total = sum(s.numel() * 2 for s in shapes.values())
    per_shard = -(-total // args.shards)
    shards, current, size = [], {}, 0
    for name, shape in shapes.items():
        current[name] = shape
        size += shape.numel() * 2
        if size >= per_shard:
            shards.append(current)
            current, size = {}, 0
    if current:
        shards.append(current)
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    weight_map = {}
    for i, names in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        tensors = {}
        for name, shape in names.items():
            t = torch.randn(shape, generator=gen, device=args.device, dtype=torch.float32)
            if name.endswith("norm.weight"):
                t = 1 + 0.1 * t
            else:
                t = t * 0.02
            tensors[name] = t.to(torch.bfloat16).cpu()
            weight_map[name] = file
        save_file(tensors, str(folder / file), metadata={"format": "pt"})
        del tensors
    (folder / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    config.save_pretrained(folder)
    GenerationConfig.from_model_config(config).save_pretrained(folder)
    print(json.dumps({"kind": "generated", "dir": str(folder), "bytes": total,
                      "shards": len(shards), "tensors": len(shapes)}))
    return 0


def shard_files(folder: pathlib.Path) -> list[str]:
    return sorted(str(p) for p in folder.glob("*.safetensors"))


def checkpoint_bytes(folder: pathlib.Path) -> int:
    return sum(os.path.getsize(p) for p in shard_files(folder))


def mixed_map(folder: str, device: str) -> dict:
    """The mixed device_map of the "-mixed" rows: the GPU holds the
    embeddings, the rotary tables and the first half of the layers; the CPU
    the other half, the final norm and lm_head."""
    layers = json.loads((pathlib.Path(folder) / "config.json").read_text())["num_hidden_layers"]
    gpu = layers // 2
    placement = {"model.embed_tokens": device, "model.rotary_emb": device,
                 "model.norm": "cpu", "lm_head": "cpu"}
    placement.update({f"model.layers.{i}": device if i < gpu else "cpu" for i in range(layers)})
    return placement


def load_model(config: str, folder: str, device: str):
    import torch

    if config == "loader":
        import phoenix_gds

        return phoenix_gds.load_safetensors(folder, device, framework="torch")
    from transformers import AutoModelForCausalLM

    device_map = mixed_map(folder, device) if config.endswith("-mixed") else device
    if config.startswith("transformers"):
        return AutoModelForCausalLM.from_pretrained(folder, device_map=device_map,
                                                    dtype=torch.bfloat16)
    if config.startswith("phoenix"):
        from phoenix_gds import hf

        return hf.from_pretrained(AutoModelForCausalLM, folder, device_map=device_map,
                                  dtype=torch.bfloat16)
    raise ValueError(config)


def raw_read(config: str, files: list[str]) -> int:
    """Reads @files into host memory: each of T threads one contiguous
    range of one file, R-byte requests (config "raw-MODE-TxR")."""
    _, mode, shape = config.split("-")
    threads_s, request_s = shape.split("x")
    threads, request = int(threads_s), int(request_s.rstrip("M")) << 20
    flags = os.O_RDONLY | (os.O_DIRECT if mode == "direct" else 0)
    ranges = []
    per_file = max(1, threads // len(files))
    for path in files:
        size = os.path.getsize(path)
        step = -(-size // per_file)
        step = -(-step // 4096) * 4096
        ranges += [(path, off, min(size, off + step)) for off in range(0, size, step)]
    done = [0] * len(ranges)
    errors = []

    def work(i):
        path, start, stop = ranges[i]
        buf = mmap.mmap(-1, request)  # page-aligned, for O_DIRECT
        fd = os.open(path, flags)
        try:
            off = start
            while off < stop:
                want = min(request, stop - off)
                if mode == "direct":
                    want = -(-want // 4096) * 4096
                n = os.preadv(fd, [memoryview(buf)[:want]], off)
                if n <= 0:
                    break
                done[i] += min(n, stop - off)
                off += n
        except OSError as exc:
            errors.append(repr(exc))
        finally:
            os.close(fd)
            buf.close()

    pool = [threading.Thread(target=work, args=(i,)) for i in range(len(ranges))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise OSError(errors[0])
    return sum(done)


def worker(job) -> int:
    import torch
    from transformers import AutoModelForCausalLM  # noqa: F401  (a user's script imports first)

    import phoenix_gds  # noqa: F401
    from phoenix_gds import hf

    folder = pathlib.Path(job["dir"])
    files = shard_files(folder)
    rec = {"kind": "call", **job}
    device = job["device"]
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.init()
        torch.empty(1, device=device)
        torch.cuda.synchronize()
    rec["resident_before"] = pagecache.resident_fraction(files)
    try:
        start = time.perf_counter()
        if job["config"].startswith("raw-"):
            moved = raw_read(job["config"], files)
        else:
            model = load_model(job["config"], str(folder), device)
            if cuda:
                torch.cuda.synchronize()
            moved = checkpoint_bytes(folder)
        seconds = time.perf_counter() - start
        rec.update({"status": "ok", "seconds": seconds, "bytes": moved,
                    "gbps": moved / seconds / 1e9})
        if job["config"].startswith("phoenix"):
            rec["phases"] = hf.last_phases()
        if job["config"].startswith(("transformers", "phoenix")):
            params = list(model.parameters())
            rec["on_device"] = all(str(p.device) == str(torch.device(device)) for p in params)
            rec["dtypes"] = sorted({str(p.dtype) for p in params})
            if job["config"].endswith("-mixed"):
                rec["devices"] = {d: sum(p.numel() for p in params if str(p.device) == d)
                                  for d in sorted({str(p.device) for p in params})}
    except Exception as exc:  # noqa: BLE001  (a failing config is a record)
        rec.update({"status": "error", "error": repr(exc)[:800]})
    print(json.dumps(rec), flush=True)
    return 0


def _bits(t):
    import torch

    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def held_value(model, name: str, tensor):
    """@tensor, or where accelerate offloaded it (a device_map's CPU share
    beside a GPU: the parameter is on the meta device and its bytes in the
    module's hook), the bytes the hook holds for it; None where it has none."""
    if tensor.device.type != "meta":
        return tensor
    from accelerate.utils import align_module_device

    owner_name, _, leaf = name.rpartition(".")
    owner = model.get_submodule(owner_name) if owner_name else model
    with align_module_device(owner, "cpu"):
        value = getattr(owner, leaf)
        return None if value.device.type == "meta" else value.detach().clone()


def compare(ours, ref) -> tuple[list[str], dict]:
    """Every parameter and buffer of @ours against @ref: dtype, shape,
    device and bits (an offloaded one's bits where its hook holds them);
    the names that differ, and the counts."""
    import torch

    mismatched, counts = [], {}
    for kind in ("named_parameters", "named_buffers"):
        a = dict(getattr(ours, kind)(remove_duplicate=False))
        b = dict(getattr(ref, kind)(remove_duplicate=False))
        if a.keys() != b.keys():
            mismatched.append(f"{kind}: other names")
            continue
        for name in b:
            x, y = a[name], b[name]
            if (x.dtype, x.shape, x.device) != (y.dtype, y.shape, y.device):
                mismatched.append(name)
                continue
            x, y = held_value(ours, name, x), held_value(ref, name, y)
            if x is None or y is None or not torch.equal(_bits(x).cpu(), _bits(y).cpu()):
                mismatched.append(name)
        counts[kind.replace("named_", "")] = len(b)
    return mismatched, counts


def verify(args) -> dict:
    """Both models in one process: every parameter and buffer compared bit
    for bit (dtype, shape, device), and 16 greedy tokens of a fixed prompt;
    then both with the mixed device_map, compared the same way (no tokens:
    half the layers run on the CPU)."""
    import torch

    folder = str(pathlib.Path(args.dir))
    ref = load_model("transformers", folder, args.device)
    ours = load_model("phoenix", folder, args.device)
    rec = {"kind": "verify", "dir": folder}
    mismatched, counts = compare(ours, ref)
    rec.update(counts)
    prompt = torch.tensor([PROMPT], device=args.device)
    with torch.no_grad():
        got = ours.generate(prompt, max_new_tokens=16, do_sample=False)
        want = ref.generate(prompt, max_new_tokens=16, do_sample=False)
    del ref, ours
    rec.update({"mismatched": mismatched[:20], "identical": not mismatched,
                "tokens": got[0, len(PROMPT):].tolist(),
                "same_tokens": got.tolist() == want.tolist()})
    try:
        mixed_ref = load_model("transformers-mixed", folder, args.device)
        mixed_ours = load_model("phoenix-mixed", folder, args.device)
        mixed_mismatched, mixed_counts = compare(mixed_ours, mixed_ref)
        # Where accelerate offloaded the CPU share, its parameters are on
        # the meta device and their bytes in host memory: both models alike.
        devices = sorted({str(p.device) for p in mixed_ours.parameters()})
        del mixed_ref, mixed_ours
        rec["mixed"] = {**mixed_counts, "mismatched": mixed_mismatched[:20],
                        "identical": not mixed_mismatched, "devices": devices}
    except Exception as exc:  # noqa: BLE001  (the first comparison's result stays)
        mixed_mismatched = ["(error)"]
        rec["mixed"] = {"identical": False, "error": repr(exc)[:800]}
    same = not mismatched and got.tolist() == want.tolist() and not mixed_mismatched
    rec["status"] = "ok" if same else "failed"
    print(json.dumps(rec), flush=True)
    return rec


def cold_or_marked(rec: dict) -> dict:
    """@rec, or, for a cold call that found some of the files resident (a
    mapping nobody can evict, such as a model still alive in this process
    whose offloaded weights point into the shards), an error record: such a
    call is not a cold load."""
    resident = rec.get("resident_before") or 0
    if rec.get("cache") == "cold" and rec.get("status") == "ok" and resident > 0:
        return {**rec, "status": "error",
                "error": f"not a cold read: {resident:.1%} of the files resident before it"}
    return rec


def evict(files) -> float | None:
    return pagecache.evict_until_cold(files)


def summarise(records):
    out, medians = [], {}
    ok = [r for r in records if r.get("kind") == "call" and r.get("status") == "ok"]
    for key in sorted({(r["config"], r["cache"]) for r in ok}):
        rows = [r for r in ok if (r["config"], r["cache"]) == key]
        seconds = statistics.median(r["seconds"] for r in rows)
        medians[key] = seconds
        out.append({"kind": "summary", "config": key[0], "cache": key[1], "seconds": seconds,
                    "gbps": statistics.median(r["gbps"] for r in rows), "rounds": len(rows),
                    "resident_before_max": max((r["resident_before"] or 0) for r in rows)})
        spans = [r["phases"] for r in rows if r.get("phases")]
        if spans:
            out.append({"kind": "phases", "config": key[0], "cache": key[1],
                        "phases": {name: [round(statistics.median(s[name][i] for s in spans
                                                                  if name in s), 4)
                                          for i in (0, 1)]
                                   for name in spans[0]}})

    def ratio(goal, faster, slower, at_least):
        # Seconds: the slower's over the faster's is how many times faster.
        if rec := goal_ratio(goal, medians, slower, faster, at_least):
            out.append(rec)

    ratio("warm: phoenix at least 5x faster than transformers", ("phoenix", "warm"),
          ("transformers", "warm"), 5.0)
    ratio("cold: phoenix at least as fast as transformers", ("phoenix", "cold"),
          ("transformers", "cold"), 1.0)
    ratio("cold: phoenix within 1.05x of the loader alone", ("phoenix", "cold"),
          ("loader", "cold"), 1 / 1.05)
    for cache in ("warm", "cold"):
        # Not a goal: how the mixed device_map compares, side by side.
        a, b = ("phoenix-mixed", cache), ("transformers-mixed", cache)
        if a in medians and b in medians:
            out.append({"kind": "compare", "what": f"{cache}, mixed device_map: how many times "
                        "faster phoenix is than transformers", "ratio": medians[b] / medians[a],
                        "numerator": list(b), "denominator": list(a)})
    raws = [k for k in medians if k[0].startswith("raw-") and k[1] == "cold"]
    if raws:
        best = min(raws, key=lambda k: medians[k])
        ratio(f"cold: phoenix at least 0.95x the best raw reader ({best[0]})",
              ("phoenix", "cold"), best, 0.95)
    return out


def schedule(rounds: int, caches: list[str]) -> list[tuple[int, str, str]]:
    """(round, cache, config) in run order: every round of the goals' rows
    first (the models, the loader and, cold, the raw readers, rotated by
    round), then the mixed device_map's rounds, so that a budget that ends
    the run early takes the rows no goal depends on."""
    order = []
    for rows in ("goals", "mixed"):
        for rnd in range(rounds):
            for cache in caches:
                configs = (MIXED_CONFIGS if rows == "mixed" else
                           MODEL_CONFIGS + (RAW_CONFIGS if cache == "cold" else []))
                order += [(rnd, cache, c) for c in rotated(configs, rnd)]
    return order


def run(args) -> int:
    folder = pathlib.Path(args.dir)
    files = shard_files(folder)
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    manifest = {**manifest_header("phx-hf-from-pretrained/1", ROOT,
                                  ("torch", "transformers", "accelerate", "safetensors")),
                "checkpoint": {"bytes": checkpoint_bytes(folder), "shards": len(files)},
                "rounds": args.rounds, "caches": args.caches}
    out.with_name("manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    records = []
    deadline = time.monotonic() + args.budget_s
    with open(out, "w", encoding="utf-8") as sink:
        if args.verify:
            try:
                records.append(verify(args))
            except Exception as exc:  # noqa: BLE001
                records.append({"kind": "verify", "status": "error", "error": repr(exc)[:800]})
            # The models compared hold cycles; those with offloaded weights
            # map the shards, whose pages no eviction can drop while mapped.
            gc.collect()
            sink.write(json.dumps(records[-1]) + "\n")
        for rnd, cache, config in schedule(args.rounds, args.caches.split(",")):
            if time.monotonic() > deadline:
                break
            if cache == "warm":
                pagecache.prime(files)
            else:
                evict(files)
            job = {"config": config, "cache": cache, "round": rnd, "dir": str(folder),
                   "device": args.device}
            for rec in run_worker(__file__, job, kind="call",
                                  timeout_s=args.job_timeout_s):
                rec = cold_or_marked(rec)
                records.append(rec)
                sink.write(json.dumps(rec) + "\n")
                sink.flush()
                print(json.dumps(rec), flush=True)
        for rec in summarise(records):
            sink.write(json.dumps(rec) + "\n")
            print(json.dumps(rec), flush=True)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    device = argparse.ArgumentParser(add_help=False)
    device.add_argument("--device", default="cuda:0")
    g = sub.add_parser("generate", parents=[device])
    g.add_argument("--dir", required=True)
    g.add_argument("--layers", type=int, default=16)
    g.add_argument("--shards", type=int, default=4)
    g.add_argument("--seed", type=int, default=39)
    g.add_argument("--tiny", action="store_true", help="a small model, to try the script")
    v = sub.add_parser("verify", parents=[device])
    v.add_argument("--dir", required=True)
    r = sub.add_parser("run", parents=[device])
    r.add_argument("--dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--verify", action="store_true", help="verify first, in the same run")
    add_round_arguments(r)
    w = sub.add_parser("worker")
    w.add_argument("job")
    args = parser.parse_args()
    if args.command == "generate":
        return generate(args)
    if args.command == "verify":
        return 0 if verify(args)["status"] == "ok" else 1
    if args.command == "run":
        return run(args)
    return worker(json.loads(args.job))


if __name__ == "__main__":
    sys.exit(main())
