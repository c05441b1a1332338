# SPDX-License-Identifier: MIT
"""phx.load_safetensors onto a GPU against torch and safetensors; skipped
without torch or CUDA."""

import pytest

from conftest import numpy, random_tensors, write_safetensors

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)


def bits(t):
    """The tensor's bytes, comparable whatever the dtype (NaNs, float8)."""
    return t.contiguous().view(-1).view(torch.uint8)


@pytest.fixture
def checkpoint(tmp_path):
    tensors = random_tensors(21, count=9)
    tensors["big"] = numpy.random.default_rng(3).standard_normal((1024, 4099)).astype(numpy.float32)
    path = tmp_path / "m.safetensors"
    write_safetensors(path, tensors, gap=5)
    return path, tensors


def test_torch_tensors_equal_the_file(phx, checkpoint):
    path, tensors = checkpoint
    loaded = phx.load_safetensors(path, device="cuda:0", framework="torch")
    for name, array in tensors.items():
        t = loaded[name]
        assert t.is_cuda and t.device.index == 0
        assert t.cpu().numpy().tobytes() == array.tobytes(), name


def test_matches_safetensors_torch_bit_for_bit(phx, tmp_path):
    st = pytest.importorskip("safetensors.torch")
    tensors = {
        "bf16": torch.randn(333, 77, dtype=torch.bfloat16),
        "f16": torch.randn(1000, dtype=torch.float16),
        "i32": torch.randint(-5, 5, (17, 3), dtype=torch.int32),
        "flags": torch.rand(99) > 0.5,
        "f8": torch.randn(64, 3).to(torch.float8_e4m3fn),
        "f8b": torch.randn(5, 8).to(torch.float8_e5m2),
    }
    path = tmp_path / "st.safetensors"
    st.save_file(tensors, str(path))
    expected = st.load_file(str(path), device="cuda:0")
    loaded = phx.load_safetensors(path, device="cuda:0", framework="torch")
    for name, ref in expected.items():
        got = loaded[name]
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        assert torch.equal(bits(got), bits(ref)), name


def test_phoenix_tensor_into_torch_keeps_memory_alive(phx, checkpoint):
    path, tensors = checkpoint
    loaded = phx.load_safetensors(path, device="cuda:0")
    t = torch.from_dlpack(loaded["big"])
    del loaded
    torch.cuda.synchronize()
    assert t.cpu().numpy().tobytes() == tensors["big"].tobytes()


def test_read_into_torch_cuda_tensor(phx, tmp_path):
    data = numpy.random.default_rng(9).integers(0, 255, 3_000_017, dtype=numpy.uint8)
    path = tmp_path / "blob.bin"
    data.tofile(path)
    dst = torch.zeros(2_000_000, dtype=torch.uint8, device="cuda:0")
    f = phx.File(path)
    assert f.read_into(dst, 4097) == 2_000_000
    assert dst.cpu().numpy().tobytes() == data[4097:2_004_097].tobytes()


def test_engine_auto_on_cuda(phx):
    assert phx.engine_for("cuda:0") in ("direct", "compat")
