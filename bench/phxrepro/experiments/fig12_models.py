# SPDX-License-Identifier: MIT
"""Tensor names, shapes and dtypes of the Fig 12 models, from their published
Hugging Face configs (no downloads): what `save_pretrained` writes for
OPTForCausalLM, LlamaForCausalLM, FalconForCausalLM and Qwen2ForCausalLM.
Tied embeddings are saved once (no lm_head.weight), as HF does."""

from __future__ import annotations

# name: architecture and the config values that decide the tensors.
MODELS = {
    # facebook/opt-*: FP16, learned positions (max 2048 + offset 2), biases
    # everywhere, LayerNorm with bias, tied lm_head.
    "OPT-2.7B": dict(arch="opt", hidden=2560, layers=32, ffn=10240, vocab=50272, positions=2050,
                     dtype="F16"),
    "OPT-6.7B": dict(arch="opt", hidden=4096, layers=32, ffn=16384, vocab=50272, positions=2050,
                     dtype="F16"),
    "OPT-13B": dict(arch="opt", hidden=5120, layers=40, ffn=20480, vocab=50272, positions=2050,
                    dtype="F16"),
    # meta-llama/Meta-Llama-3-8B: BF16, GQA 32/8 heads of 128, untied.
    "Llama-3-8B": dict(arch="llama", hidden=4096, layers=32, heads=32, kv_heads=8, ffn=14336,
                       vocab=128256, tied=False, qkv_bias=False, dtype="BF16"),
    # tiiuae/falcon-7b: BF16, multi-query (71 heads of 64, one KV head),
    # parallel attention, one LayerNorm with bias per layer, tied.
    "Falcon-7B": dict(arch="falcon", hidden=4544, layers=32, heads=71, kv_heads=1, head_dim=64,
                      ffn=18176, vocab=65024, tied=True, dtype="BF16"),
    # tiiuae/falcon-11B: new decoder architecture, 32 heads / 8 KV heads of
    # 128, one LayerNorm per layer (num_ln_in_parallel_attn 1), untied.
    "Falcon-11B": dict(arch="falcon", hidden=4096, layers=60, heads=32, kv_heads=8, head_dim=128,
                       ffn=16384, vocab=65024, tied=False, dtype="BF16"),
    # Qwen/Qwen2.5-7B and -14B: BF16, GQA, q/k/v biases, untied.
    "Qwen2.5-7B": dict(arch="llama", hidden=3584, layers=28, heads=28, kv_heads=4, ffn=18944,
                       vocab=152064, tied=False, qkv_bias=True, dtype="BF16"),
    "Qwen2.5-14B": dict(arch="llama", hidden=5120, layers=48, heads=40, kv_heads=8, ffn=13824,
                        vocab=152064, tied=False, qkv_bias=True, dtype="BF16"),
}

# --quick: a 2-layer Llama-shaped model with real naming, FP16 (numpy has
# no BF16), small enough for CI machines.
QUICK_MODEL = "tiny-llama-2L"
QUICK = dict(arch="llama", hidden=256, layers=2, heads=4, kv_heads=2, ffn=688, vocab=2048,
             tied=False, qkv_bias=False, dtype="F16")

DTYPE_SIZE = {"F16": 2, "BF16": 2, "F32": 4}


def config(name: str) -> dict:
    return QUICK if name == QUICK_MODEL else MODELS[name]


def tensors(cfg: dict) -> list[tuple[str, list[int], str]]:
    """(name, shape, dtype) in the order HF's state dict has them."""
    h, dt = cfg["hidden"], cfg["dtype"]
    out: list[tuple[str, list[int], str]] = []
    if cfg["arch"] == "opt":
        p = "model.decoder"
        out += [(f"{p}.embed_tokens.weight", [cfg["vocab"], h], dt),
                (f"{p}.embed_positions.weight", [cfg["positions"], h], dt)]
        for i in range(cfg["layers"]):
            q = f"{p}.layers.{i}"
            for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
                out += [(f"{q}.self_attn.{proj}.weight", [h, h], dt),
                        (f"{q}.self_attn.{proj}.bias", [h], dt)]
            out += [(f"{q}.self_attn_layer_norm.weight", [h], dt),
                    (f"{q}.self_attn_layer_norm.bias", [h], dt),
                    (f"{q}.fc1.weight", [cfg["ffn"], h], dt), (f"{q}.fc1.bias", [cfg["ffn"]], dt),
                    (f"{q}.fc2.weight", [h, cfg["ffn"]], dt), (f"{q}.fc2.bias", [h], dt),
                    (f"{q}.final_layer_norm.weight", [h], dt),
                    (f"{q}.final_layer_norm.bias", [h], dt)]
        out += [(f"{p}.final_layer_norm.weight", [h], dt),
                (f"{p}.final_layer_norm.bias", [h], dt)]
    elif cfg["arch"] == "llama":
        head_dim = h // cfg["heads"]
        kv = cfg["kv_heads"] * head_dim
        out.append(("model.embed_tokens.weight", [cfg["vocab"], h], dt))
        for i in range(cfg["layers"]):
            q = f"model.layers.{i}"
            for proj, rows in (("q_proj", h), ("k_proj", kv), ("v_proj", kv)):
                out.append((f"{q}.self_attn.{proj}.weight", [rows, h], dt))
                if cfg["qkv_bias"]:
                    out.append((f"{q}.self_attn.{proj}.bias", [rows], dt))
            out += [(f"{q}.self_attn.o_proj.weight", [h, h], dt),
                    (f"{q}.mlp.gate_proj.weight", [cfg["ffn"], h], dt),
                    (f"{q}.mlp.up_proj.weight", [cfg["ffn"], h], dt),
                    (f"{q}.mlp.down_proj.weight", [h, cfg["ffn"]], dt),
                    (f"{q}.input_layernorm.weight", [h], dt),
                    (f"{q}.post_attention_layernorm.weight", [h], dt)]
        out.append(("model.norm.weight", [h], dt))
        if not cfg["tied"]:
            out.append(("lm_head.weight", [cfg["vocab"], h], dt))
    elif cfg["arch"] == "falcon":
        qkv = (cfg["heads"] + 2 * cfg["kv_heads"]) * cfg["head_dim"]
        out.append(("transformer.word_embeddings.weight", [cfg["vocab"], h], dt))
        for i in range(cfg["layers"]):
            q = f"transformer.h.{i}"
            out += [(f"{q}.self_attention.query_key_value.weight", [qkv, h], dt),
                    (f"{q}.self_attention.dense.weight", [h, h], dt),
                    (f"{q}.mlp.dense_h_to_4h.weight", [cfg["ffn"], h], dt),
                    (f"{q}.mlp.dense_4h_to_h.weight", [h, cfg["ffn"]], dt),
                    (f"{q}.input_layernorm.weight", [h], dt),
                    (f"{q}.input_layernorm.bias", [h], dt)]
        out += [("transformer.ln_f.weight", [h], dt), ("transformer.ln_f.bias", [h], dt)]
        if not cfg["tied"]:
            out.append(("lm_head.weight", [cfg["vocab"], h], dt))
    else:
        raise ValueError(f"unknown architecture {cfg['arch']}")
    return out


def nbytes(shape: list[int], dtype: str) -> int:
    n = DTYPE_SIZE[dtype]
    for d in shape:
        n *= d
    return n


def total_bytes(cfg: dict) -> int:
    return sum(nbytes(s, d) for _, s, d in tensors(cfg))


def shards(cfg: dict, max_shard: int = 5_000_000_000) -> list[list[tuple[str, list[int], str]]]:
    """HF's sharding: tensors in order, a new shard when the next would pass
    max_shard bytes."""
    out: list[list] = [[]]
    size = 0
    for t in tensors(cfg):
        b = nbytes(t[1], t[2])
        if out[-1] and size + b > max_shard:
            out.append([])
            size = 0
        out[-1].append(t)
        size += b
    return out


def by_size() -> list[str]:
    return sorted(MODELS, key=lambda m: total_bytes(MODELS[m]))
