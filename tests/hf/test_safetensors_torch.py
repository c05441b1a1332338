# SPDX-License-Identifier: MIT
"""phoenix_gds's safetensors face against safetensors 0.8 itself, with torch
on the CPU: every dtype, slices, save/load byte for byte, and the errors.
Here because these need torch and safetensors, which the product does not
depend on (scripts/test-hf runs them in its environment)."""

from __future__ import annotations

import json
import struct

import pytest
import torch

safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open as st_safe_open  # noqa: E402

import phoenix_gds as phx  # noqa: E402
import phoenix_gds.torch as phx_torch  # noqa: E402


def write_one(path, dtype, shape, data):
    header = json.dumps({"t": {"dtype": dtype, "shape": shape,
                               "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def raw_bytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


DTYPES = [("F4", [2, 4], 4), ("F6_E2M3", [4], 3), ("F6_E3M2", [2, 4], 6), ("F8_E8M0", [2, 2], 4),
          ("F8_E4M3FNUZ", [3], 3), ("F8_E5M2FNUZ", [3], 3), ("C64", [2, 2], 32),
          ("F8_E4M3", [2], 2), ("F8_E5M2", [2], 2), ("BF16", [3], 6), ("BOOL", [2], 2)]


@pytest.mark.parametrize("dtype,shape,nbytes", DTYPES)
def test_every_dtype_as_safetensors_gives_it(tmp_path, dtype, shape, nbytes):
    data = bytes((5 * i + 1) % 2 if dtype == "BOOL" else (5 * i + 1) % 256 for i in range(nbytes))
    path = tmp_path / "t.safetensors"
    write_one(path, dtype, shape, data)
    try:
        with st_safe_open(path, framework="pt") as f:
            want = f.get_tensor("t")
    except safetensors.SafetensorError:
        want = None  # a dtype torch lacks (F6): ours refuses it too, as TypeError
    with phx.safe_open(path, framework="pt") as f:
        if want is None:
            with pytest.raises(phx.SafetensorError, match=dtype) as info:
                f.get_tensor("t")
            assert isinstance(info.value, TypeError)
            return
        got = f.get_tensor("t")
    assert got.dtype == want.dtype and got.shape == want.shape
    assert raw_bytes(got) == raw_bytes(want) == data
    loaded = phx_torch.load_file(path)["t"]
    assert loaded.dtype == want.dtype and loaded.shape == want.shape
    assert raw_bytes(loaded) == data


def test_f4_with_an_odd_last_dimension_is_refused_as_safetensors_does(tmp_path):
    path = tmp_path / "t.safetensors"
    write_one(path, "F4", [2, 3], b"\1\2\3")
    with st_safe_open(path, framework="pt") as f, pytest.raises(safetensors.SafetensorError):
        f.get_tensor("t")
    with phx.safe_open(path, framework="pt") as f, pytest.raises(phx.SafetensorError,
                                                                  match="even"):
        f.get_tensor("t")


def test_slices_as_safetensors_and_numpy_take_them(tmp_path):
    from safetensors.torch import save_file as st_save_file

    torch.manual_seed(3)
    tensors = {"bf16": torch.randn(12, 40).to(torch.bfloat16),
               "f8": torch.randn(6, 5, 16).to(torch.float8_e4m3fn),
               "i32": torch.randint(-99, 99, (7, 9), dtype=torch.int32)}
    path = tmp_path / "m.safetensors"
    st_save_file(tensors, path)
    # safetensors' own docstring example, and others it takes.
    shared = [(slice(None), slice(None, None, 8)), (slice(1, None, 3),), (Ellipsis, slice(2, 9, 2)),
              (-1, slice(None, None, 5)), (0,)]
    # numpy's semantics where safetensors 0.8 refuses: negative steps and bounds, None.
    numpy_only = [(slice(None, None, -1),), (slice(-3, None), None),
                  (None, Ellipsis, slice(-1, 0, -2)), (slice(4, 1, -1), -2)]
    with st_safe_open(path, framework="pt") as ref, phx.safe_open(path, framework="pt") as f:
        for name, t in tensors.items():
            for key in shared:
                want, got = ref.get_slice(name)[key], f.get_slice(name)[key]
                assert got.dtype == want.dtype and got.shape == want.shape, (name, key)
                assert raw_bytes(got) == raw_bytes(want), (name, key)
            size = t.element_size()
            as_bytes = t.view(torch.uint8).numpy().reshape(*t.shape, size)
            for key in numpy_only:
                want = as_bytes[key + (slice(None),)]
                got = f.get_slice(name)[key]
                assert got.dtype == t.dtype and tuple(got.shape) == want.shape[:-1], (name, key)
                assert raw_bytes(got) == want.tobytes(), (name, key)


def test_f4_slices_read_whole_bytes_only(tmp_path):
    data = bytes(range(16))
    path = tmp_path / "t.safetensors"
    write_one(path, "F4", [4, 8], data)
    with phx.safe_open(path, framework="pt") as f:
        x = f.get_slice("t")
        rows = x[1:3]
        assert rows.dtype == torch.float4_e2m1fn_x2 and rows.shape == (2, 4)
        assert raw_bytes(rows) == data[4:12]
        assert raw_bytes(x[:, 2:6]) == bytes(b for r in range(4) for b in data[4 * r + 1:4 * r + 3])
        with pytest.raises(phx.SafetensorError, match="share a byte"):
            x[:, 1:5]


def torch_dict():
    torch.manual_seed(9)
    return {"w": torch.randn(5, 7), "bf": torch.randn(3, 4).to(torch.bfloat16),
            "f8": torch.randn(6).to(torch.float8_e5m2),
            "e8": torch.ones(2).to(torch.float8_e8m0fnu),
            "i64": torch.arange(5), "flags": torch.tensor([True, False, True]),
            "z": torch.randn(2, 2, dtype=torch.complex64),
            "u16": torch.arange(3, dtype=torch.int32).to(torch.uint16),
            "f4": torch.arange(6, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).reshape(2, 3),
            "empty": torch.zeros(0, 3), "scalar": torch.tensor(2.5, dtype=torch.float16),
            "é\n\x01 name": torch.ones(1, dtype=torch.int8)}


def test_torch_save_is_byte_for_byte_safetensors(tmp_path):
    import safetensors.torch as st

    tensors = torch_dict()
    for metadata in (None, {}, {"format": "pt"}, {"ü": "\x7f/\"\\"}):
        want = st.save(tensors, metadata=metadata)
        assert phx_torch.save(tensors, metadata=metadata) == want, metadata
        ours, theirs = tmp_path / "ours.safetensors", tmp_path / "theirs.safetensors"
        phx_torch.save_file(tensors, ours, metadata=metadata)
        st.save_file(tensors, theirs, metadata=metadata)
        assert ours.read_bytes() == theirs.read_bytes() == want
    # Each reads the other's: safetensors ours, ours safetensors' (F4
    # included, which safetensors.torch.load itself cannot read).
    with st_safe_open(ours, framework="pt") as f:
        assert sorted(f.keys()) == sorted(tensors)
        assert raw_bytes(f.get_tensor("w")) == raw_bytes(tensors["w"])
    for got in (phx_torch.load(want), phx_torch.load_file(theirs)):
        for name, t in tensors.items():
            assert got[name].dtype == t.dtype and got[name].shape == t.shape, name
            assert raw_bytes(got[name]) == raw_bytes(t), name


def test_numpy_save_is_byte_for_byte_safetensors():
    import numpy
    import safetensors.numpy as sn

    import phoenix_gds.numpy as phx_numpy

    rng = numpy.random.default_rng(4)
    arrays = {"w": rng.standard_normal((5, 7)).astype(numpy.float32), "i": numpy.arange(9),
              "b": numpy.array([True, False]), "c": numpy.ones(3, dtype=numpy.complex64),
              "h": numpy.ones((2, 0), dtype=numpy.float16),
              "u": numpy.arange(4, dtype=numpy.uint32)}
    for metadata in (None, {"k": "v"}):
        want = sn.save(arrays, metadata=metadata)
        assert phx_numpy.save(arrays, metadata=metadata) == want
        got = phx_numpy.load(want)
        assert all(got[n].tobytes() == a.tobytes() and got[n].dtype == a.dtype
                   for n, a in arrays.items())


def test_torch_save_refuses_what_safetensors_refuses():
    import safetensors.torch as st

    t = torch.arange(12.0).reshape(3, 4)
    cases = [{"t": t.t()}, {"a": t, "b": t[1]}, {"a": t, "b": t}, {"a": 1},
             {"s": torch.eye(2).to_sparse()}]
    for tensors in cases:
        with pytest.raises(Exception) as theirs:
            st.save(tensors)
        with pytest.raises(phx.SafetensorError) as ours:
            phx_torch.save(tensors)
        assert isinstance(ours.value, type(theirs.value)), (tensors, theirs.value)
    # Tensors of one storage that do not overlap are fine, as safetensors has them.
    halves = {"a": t[:1], "b": t[1:]}
    assert phx_torch.save(halves) == st.save(halves)
    with pytest.raises(phx.SafetensorError):
        phx_torch.load(b"\x08\0\0\0\0\0\0\0{garbage")
