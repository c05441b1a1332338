# SPDX-License-Identifier: MIT
"""bench/hf's bit-for-bit comparison of two models where accelerate offloaded
weights (a device_map's CPU share beside a GPU puts them on the meta device,
their bytes in the module's hook): it compares those bytes, and finds one
that differs."""

from __future__ import annotations

import pathlib
import sys

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

accelerate = pytest.importorskip("accelerate")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "hf"))
from from_pretrained import compare  # noqa: E402


def _model(seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1)
    return LlamaForCausalLM(config).to(torch.bfloat16).eval()


def _offloaded(model):
    accelerate.cpu_offload(model, execution_device=torch.device("cpu"))
    assert any(p.device.type == "meta" for p in model.parameters())
    return model


def test_offloaded_models_compare_by_their_held_bytes():
    mismatched, counts = compare(_offloaded(_model()), _offloaded(_model()))
    assert mismatched == []
    assert counts["parameters"] > 0


def test_an_offloaded_weight_that_differs_is_found():
    other = _model()
    with torch.no_grad():
        other.model.layers[1].mlp.up_proj.weight[3, 5] += 1
    mismatched, _ = compare(_offloaded(_model()), _offloaded(other))
    assert mismatched == ["model.layers.1.mlp.up_proj.weight"]


def test_offloaded_against_resident_is_a_difference():
    mismatched, _ = compare(_offloaded(_model()), _model())
    assert "model.embed_tokens.weight" in mismatched


def test_a_cold_call_that_found_the_files_resident_is_not_a_cold_load():
    from from_pretrained import cold_or_marked

    call = {"kind": "call", "cache": "cold", "status": "ok", "seconds": 4.0}
    assert cold_or_marked({**call, "resident_before": 0.0}) == {**call, "resident_before": 0.0}
    marked = cold_or_marked({**call, "resident_before": 0.241})
    assert marked["status"] == "error" and "24.1%" in marked["error"]
    warm = {**call, "cache": "warm", "resident_before": 1.0}
    assert cold_or_marked(warm) == warm
