# SPDX-License-Identifier: MIT
"""phoenix_gds.hf.from_pretrained against transformers' own from_pretrained,
on the CPU, with small random models saved by transformers itself.

Every parameter and buffer is compared bit for bit (dtype, shape, device
and bytes), and greedy generation must give the same tokens.  The loads
that must come from Phoenix run with transformers' own safetensors reader
patched to fail, so a test cannot pass by transformers reading the files.
"""

from __future__ import annotations

import errno
import json
import os
import pathlib
import shutil
import threading

import pytest
import torch
import transformers
from transformers import (AutoModel, AutoModelForCausalLM, AutoModelForSeq2SeqLM,
                          AutoModelForSequenceClassification, GPT2Config, GPT2LMHeadModel,
                          LlamaConfig, LlamaForCausalLM, LlamaForSequenceClassification, T5Config,
                          T5ForConditionalGeneration)

from phoenix_gds import hf

PROMPT = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6]])


def _llama(path, *, tie=False, dtype=torch.bfloat16, shard="60KB", seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=320, hidden_size=64, intermediate_size=160,
                         num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, tie_word_embeddings=tie, dtype=dtype)
    model = LlamaForCausalLM(config).to(dtype)
    model.save_pretrained(path, max_shard_size=shard)
    return path


def _gpt2(path, seed=1):
    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=300, n_positions=64, n_embd=48, n_layer=2, n_head=4,
                        dtype=torch.float32)
    GPT2LMHeadModel(config).save_pretrained(path, max_shard_size="50KB")
    return path


def _refuse(*args, **kwargs):
    raise AssertionError("transformers read the checkpoint itself")


def _bits(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def assert_same_model(ours, ref):
    assert type(ours) is type(ref)
    for kind in ("named_parameters", "named_buffers"):
        a = dict(getattr(ours, kind)(remove_duplicate=False))
        b = dict(getattr(ref, kind)(remove_duplicate=False))
        assert a.keys() == b.keys(), kind
        for name in b:
            x, y = a[name], b[name]
            assert (x.dtype, x.shape, x.device) == (y.dtype, y.shape, y.device), name
            assert torch.equal(_bits(x), _bits(y)), f"{name}: other bytes"
            assert getattr(x, "requires_grad", False) == getattr(y, "requires_grad", False), name
    # Tied weights are one tensor in both.
    def shared(model):
        names = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), []).append(name)
        return sorted(v for v in names.values() if len(v) > 1)

    assert shared(ours) == shared(ref)
    assert ours.training == ref.training
    assert ours.config.to_dict() == ref.config.to_dict()
    if ref.can_generate():
        assert ours.generation_config.to_dict() == ref.generation_config.to_dict()
        with torch.no_grad():
            got = ours.generate(PROMPT, max_new_tokens=12, do_sample=False)
            want = ref.generate(PROMPT, max_new_tokens=12, do_sample=False)
        assert got.tolist() == want.tolist()


def _both(cls, path, monkeypatch, **kwargs):
    """Ours (with transformers' reader patched to fail), then transformers'."""
    with monkeypatch.context() as m:
        m.setattr(transformers.modeling_utils, "safe_open", _refuse)
        ours = hf.from_pretrained(cls, path, **kwargs)
    ref = cls.from_pretrained(path, **kwargs)
    return ours, ref


@pytest.mark.parametrize("dtype", [None, "auto", torch.bfloat16, torch.float32, torch.float16])
def test_sharded_llama_is_transformers_model(tmp_path, monkeypatch, dtype):
    path = _llama(tmp_path / "llama")
    assert (path / "model.safetensors.index.json").exists()
    ours, ref = _both(AutoModelForCausalLM, path, monkeypatch, dtype=dtype,
                      device_map="cpu")
    assert_same_model(ours, ref)


def test_no_device_map_and_auto_match_transformers(tmp_path, monkeypatch):
    path = _llama(tmp_path / "llama", shard="10MB")
    assert (path / "model.safetensors").exists()  # one file, no index
    for device_map in (None, "auto", {"": "cpu"}, {"model": "cpu", "lm_head": "cpu"}):
        ours, ref = _both(LlamaForCausalLM, path, monkeypatch, device_map=device_map)
        assert_same_model(ours, ref)
        assert getattr(ours, "hf_device_map", None) == getattr(ref, "hf_device_map", None)


def test_tied_embeddings_are_tied(tmp_path, monkeypatch):
    path = _llama(tmp_path / "tied", tie=True)
    ours, ref = _both(AutoModelForCausalLM, path, monkeypatch, device_map="cpu")
    assert ours.lm_head.weight is ours.model.embed_tokens.weight
    assert_same_model(ours, ref)


def test_gpt2_is_transformers_model(tmp_path, monkeypatch):
    path = _gpt2(tmp_path / "gpt2")
    ours, ref = _both(AutoModelForCausalLM, path, monkeypatch, dtype=torch.bfloat16)
    assert_same_model(ours, ref)


def test_keep_in_fp32_modules_stay_fp32(tmp_path, monkeypatch):
    # T5 keeps its "wo" projections in float32 when loaded in float16.
    torch.manual_seed(2)
    config = T5Config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                      decoder_start_token_id=0)
    T5ForConditionalGeneration(config).save_pretrained(tmp_path / "t5", max_shard_size="50KB")
    ours, ref = _both(AutoModelForSeq2SeqLM, tmp_path / "t5", monkeypatch, dtype=torch.float16,
                      device_map="cpu")
    assert ours.encoder.block[0].layer[1].DenseReluDense.wo.weight.dtype == torch.float32
    assert ours.shared.weight.dtype == torch.float16
    assert_same_model(ours, ref)


def test_head_checkpoint_into_the_base_model(tmp_path, monkeypatch):
    # The checkpoint's keys carry the base model's prefix ("model."), the
    # model's do not, and lm_head is left over: renamed and dropped as
    # transformers does.
    path = _llama(tmp_path / "llama")
    ours, ref = _both(AutoModel, path, monkeypatch, device_map="cpu")
    assert_same_model(ours, ref)


def test_attn_implementation_and_config_overrides(tmp_path, monkeypatch):
    path = _llama(tmp_path / "llama")
    ours, ref = _both(AutoModelForCausalLM, path, monkeypatch, attn_implementation="eager",
                      rms_norm_eps=1e-3)
    assert ours.config._attn_implementation == "eager"
    assert ours.config.rms_norm_eps == 1e-3
    assert_same_model(ours, ref)


def test_loader_options_and_loading_info(tmp_path, monkeypatch):
    path = _llama(tmp_path / "llama")
    with monkeypatch.context() as m:
        m.setattr(transformers.modeling_utils, "safe_open", _refuse)
        ours, info = hf.from_pretrained(AutoModelForCausalLM, path, output_loading_info=True,
                                        loader_options={"cache": "buffered", "chunk_size": 4096})
    ref, ref_info = AutoModelForCausalLM.from_pretrained(path, output_loading_info=True)
    assert_same_model(ours, ref)
    assert info == ref_info


def _seeded_both(cls, path, monkeypatch, **kwargs):
    """_both with the same seed before each: weights the checkpoint lacks are
    initialised from torch's generator, so both draw the same ones."""
    with monkeypatch.context() as m:
        m.setattr(transformers.modeling_utils, "safe_open", _refuse)
        torch.manual_seed(1234)
        ours = hf.from_pretrained(cls, path, output_loading_info=True, **kwargs)
    torch.manual_seed(1234)
    ref = cls.from_pretrained(path, output_loading_info=True, **kwargs)
    return ours, ref


def _base_checkpoint(path):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         pad_token_id=0)
    AutoModel.from_config(config).save_pretrained(path)
    return path


@pytest.mark.parametrize("cls", [AutoModelForCausalLM, AutoModelForSequenceClassification])
def test_missing_weights_are_initialised_as_transformers_does(tmp_path, monkeypatch, cls):
    # A base model's checkpoint has no head: the usual start of a fine-tune.
    # transformers initialises the head and reports it; so must we.
    path = _base_checkpoint(tmp_path / "base")
    (ours, info), (ref, ref_info) = _seeded_both(cls, path, monkeypatch)
    assert info == ref_info
    assert info["missing_keys"], "the head should be reported missing"
    assert_same_model(ours, ref)


def test_mismatched_sizes_as_transformers(tmp_path, monkeypatch):
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                         pad_token_id=0, num_labels=2)
    path = tmp_path / "two_labels"
    LlamaForSequenceClassification(config).save_pretrained(path)
    # Without ignore_mismatched_sizes both refuse, with transformers' error.
    with pytest.raises(RuntimeError) as ours_error:
        hf.from_pretrained(AutoModelForSequenceClassification, path, num_labels=5)
    with pytest.raises(RuntimeError) as ref_error:
        AutoModelForSequenceClassification.from_pretrained(path, num_labels=5)
    assert str(ours_error.value) == str(ref_error.value)
    assert "ignore_mismatched_sizes" in str(ours_error.value)
    (ours, info), (ref, ref_info) = _seeded_both(AutoModelForSequenceClassification, path,
                                                 monkeypatch, num_labels=5,
                                                 ignore_mismatched_sizes=True)
    assert info == ref_info
    assert [k for k, *_ in info["mismatched_keys"]] == ["score.weight"]
    assert ours.score.weight.shape == (5, 32)
    assert_same_model(ours, ref)


def test_harmless_arguments_subfolder_and_variant(tmp_path, monkeypatch):
    path = _llama(tmp_path / "llama")
    ours, ref = _both(AutoModelForCausalLM, path, monkeypatch, revision="main",
                      use_safetensors=True, subfolder="", variant=None)
    assert_same_model(ours, ref)
    _llama(tmp_path / "repo" / "sub")
    ours, ref = _both(AutoModelForCausalLM, tmp_path / "repo", monkeypatch, subfolder="sub")
    assert_same_model(ours, ref)
    torch.manual_seed(0)
    model = LlamaForCausalLM.from_pretrained(path)
    model.save_pretrained(tmp_path / "variant", variant="v1", max_shard_size="60KB")
    assert any(".v1." in name for name in os.listdir(tmp_path / "variant"))
    ours, ref = _both(AutoModelForCausalLM, tmp_path / "variant", monkeypatch, variant="v1")
    assert_same_model(ours, ref)
    for kwargs in ({"revision": "v2"}, {"use_safetensors": False}):
        with pytest.raises(hf.UnsupportedCheckpoint):
            hf.from_pretrained(AutoModelForCausalLM, path, **kwargs)


def _edit_config(path, **changes):
    with open(path / "config.json") as f:
        config = json.load(f)
    config.update(changes)
    with open(path / "config.json", "w") as f:
        json.dump(config, f)


def test_what_it_does_not_cover_is_refused(tmp_path):
    path = _llama(tmp_path / "llama")
    with pytest.raises(OSError) as e:
        hf.from_pretrained(AutoModelForCausalLM, tmp_path / "nowhere")
    assert e.value.errno == errno.ENOENT
    with pytest.raises(OSError) as e:
        hf.from_pretrained(AutoModelForCausalLM, path / "config.json")
    assert e.value.errno == errno.ENOTDIR
    for kwargs in ({"trust_remote_code": True}, {"device_map": {"": "disk"}},
                   {"quantization_config": {"quant_method": "bitsandbytes"}},
                   {"load_in_8bit": True}, {"gguf_file": "x.gguf"}, {"tp_plan": "auto"}):
        with pytest.raises(hf.UnsupportedCheckpoint):
            hf.from_pretrained(AutoModelForCausalLM, path, **kwargs)

    quantized = tmp_path / "quantized"
    shutil.copytree(path, quantized)
    _edit_config(quantized, quantization_config={"quant_method": "fp8",
                                                 "weight_block_size": [128, 128]})
    with pytest.raises(hf.UnsupportedCheckpoint, match="quantized"):
        hf.from_pretrained(AutoModelForCausalLM, quantized)

    remote = tmp_path / "remote"
    shutil.copytree(path, remote)
    _edit_config(remote, model_type="phoenix-test-remote",
                 auto_map={"AutoModelForCausalLM": "modeling_x.XForCausalLM"})
    with pytest.raises((hf.UnsupportedCheckpoint, ValueError), match="remote|phoenix-test-remote"):
        hf.from_pretrained(AutoModelForCausalLM, remote)

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(path / "config.json", pickled)
    torch.save({}, pickled / "pytorch_model.bin")
    with pytest.raises(hf.UnsupportedCheckpoint, match="safetensors"):
        hf.from_pretrained(AutoModelForCausalLM, pickled)


def test_a_damaged_shard_is_an_oserror(tmp_path):
    path = _llama(tmp_path / "llama")
    shard = sorted(p for p in os.listdir(path) if p.endswith(".safetensors"))[-1]
    size = os.path.getsize(path / shard)
    os.truncate(path / shard, size - 100)
    with pytest.raises(OSError) as e:
        hf.from_pretrained(AutoModelForCausalLM, path)
    assert e.value.errno is not None
    assert shard in str(e.value)


class _RecordingLoader:
    """Stands in for phoenix_gds.Loader: records where each tensor was asked for."""

    calls: list = []

    def __init__(self, device, **options):
        self.device, self.options = device, options

    def load(self, files, framework=None, keys=None):
        self.calls.append((self.device, self.options.get("pinned", False),
                           None if keys is None else sorted(keys)))
        routes = self.options.get("device_map") or {}
        return {k: routes.get(k, self.device) for k in (keys or [])}


def test_mixed_device_map_reads_each_tensor_once_where_it_lives(tmp_path, monkeypatch):
    # The CPU share of a map with GPUs goes straight to pinned host memory,
    # not through a GPU (which a user offloading to the CPU lacks room on).
    import phoenix_gds

    monkeypatch.setattr(phoenix_gds, "Loader", _RecordingLoader)
    _RecordingLoader.calls = []
    placements = {"model.embed_tokens.weight": "cpu", "model.norm.weight": "cuda:0",
                  "lm_head.weight": "cuda:1", "model.layers.0.mlp.up_proj.weight": "cpu"}
    state = hf._read(["x.safetensors"], placements, {"chunk_size": 4096})
    assert state == placements
    by_device = {device: (pinned, keys) for device, pinned, keys in _RecordingLoader.calls}
    assert len(_RecordingLoader.calls) == 2
    assert by_device["cpu"] == (True, ["model.embed_tokens.weight",
                                       "model.layers.0.mlp.up_proj.weight"])
    assert by_device["cuda:0"][1] == ["lm_head.weight", "model.norm.weight"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_mixed_cpu_and_gpu_map_is_transformers_model(tmp_path, monkeypatch):
    path = _llama(tmp_path / "llama")
    device_map = {"model.embed_tokens": "cpu", "model.layers": 0, "model.norm": 0,
                  "model.rotary_emb": 0, "lm_head": "cpu"}
    ours, ref = _both(AutoModelForCausalLM, path, monkeypatch, device_map=device_map)
    # accelerate offloads the CPU share beside a GPU (its parameters on the
    # meta device, their bytes in each module's hook) in both models alike:
    # bench/hf's comparison reads the bytes where they are held.
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench" / "hf"))
    from from_pretrained import compare

    mismatched, counts = compare(ours, ref)
    assert mismatched == [] and counts["parameters"] > 0


def test_weights_are_the_tensors_read_while_the_model_was_built(tmp_path, monkeypatch):
    # The read begins before transformers builds the model, and each weight
    # is the very tensor the Loader returned (same memory), not a copy.
    import phoenix_gds

    path = _llama(tmp_path / "llama")
    read_began = threading.Event()
    loaded = {}

    class Recording(phoenix_gds.Loader):
        def load(self, *args, **kwargs):
            read_began.set()
            state = super().load(*args, **kwargs)
            loaded.update(state)
            return state

    init = LlamaForCausalLM.__init__
    built_after_read_began = []

    def recording_init(self, *args, **kwargs):
        # A read started before the model has begun by now, or soon (it is
        # in a thread); one that starts after the model never begins here.
        built_after_read_began.append(read_began.wait(timeout=5))
        init(self, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(phoenix_gds, "Loader", Recording)
        m.setattr(LlamaForCausalLM, "__init__", recording_init)
        m.setattr(transformers.modeling_utils, "safe_open", _refuse)
        ours = hf.from_pretrained(AutoModelForCausalLM, path, device_map="cpu",
                                  dtype=torch.bfloat16)
    assert built_after_read_began == [True]
    params = dict(ours.named_parameters())
    assert loaded.keys() == params.keys()
    for name, tensor in loaded.items():
        assert params[name].data_ptr() == tensor.data_ptr(), f"{name} was copied"
    phases = hf.last_phases()
    assert phases["read"][0] < phases["model"][0]
    assert_same_model(ours, AutoModelForCausalLM.from_pretrained(path, device_map="cpu",
                                                                 dtype=torch.bfloat16))


def test_a_wrong_early_guess_is_read_again(tmp_path, monkeypatch):
    # The read that starts before transformers resolves the files is of the
    # files guessed; where transformers resolves others, those are read.
    path = _llama(tmp_path / "llama")
    shards = sorted(str(p) for p in path.glob("*.safetensors"))
    assert len(shards) > 1
    monkeypatch.setattr(hf, "_early_files", lambda *args: shards[:1])
    ours, ref = _both(AutoModelForCausalLM, path, monkeypatch, device_map="cpu")
    assert_same_model(ours, ref)


def test_a_failing_call_waits_for_its_read(tmp_path, monkeypatch):
    # The read starts before transformers sees the arguments; when they
    # fail, the error is transformers' and no read is left running.
    import phoenix_gds

    path = _llama(tmp_path / "llama")
    reads = []

    class Recording(phoenix_gds.Loader):
        def load(self, *args, **kwargs):
            reads.append(threading.current_thread().name)
            return super().load(*args, **kwargs)

    monkeypatch.setattr(phoenix_gds, "Loader", Recording)
    with pytest.raises(TypeError, match="not_an_argument"):
        hf.from_pretrained(AutoModelForCausalLM, path, device_map="cpu", not_an_argument=1)
    assert reads == ["phoenix_gds.hf read"]
    assert not [t for t in threading.enumerate() if t.name == "phoenix_gds.hf read"]
