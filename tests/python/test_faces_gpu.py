# SPDX-License-Identifier: MIT
"""The safetensors and kvikio faces on a GPU with torch: load_file,
safe_open (whole tensors and slices) equal to safetensors' own reads, byte
for byte, on cuda; CuFile into CUDA tensors; close() waiting for futures
into GPU memory.  Skipped without torch, CUDA or safetensors."""

import concurrent.futures

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)
safetensors_torch = pytest.importorskip("safetensors.torch")
import safetensors  # noqa: E402

import phoenix_gds as phx  # noqa: E402
from phoenix_gds.torch import load_file  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    gen = torch.Generator().manual_seed(3)
    tensors = {
        "model.layers.0.self_attn.q_proj.weight": torch.randn(256, 384, generator=gen).bfloat16(),
        "model.layers.0.self_attn.o_proj.weight": torch.randn(384, 256, generator=gen).half(),
        "model.layers.0.mlp.up_proj.weight": torch.randn(512, 384, generator=gen),
        "model.norm.weight": torch.randn(384, generator=gen).bfloat16(),
        "counts": torch.randint(-5, 5, (7, 3, 5), generator=gen, dtype=torch.int64),
        "mask": torch.rand(33, 17, generator=gen) > 0.5,
        "scale": torch.tensor(2.5),
        # Rows of 32 KiB: a few columns are sparse pieces (pinned staging),
        # where the narrow weights above read their span.
        "wide": torch.randn(64, 8192, generator=gen),
    }
    if hasattr(torch, "float8_e4m3fn"):
        tensors["fp8"] = torch.randn(64, 48, generator=gen).to(torch.float8_e4m3fn)
    path = tmp_path_factory.mktemp("faces") / "model.safetensors"
    safetensors_torch.save_file(tensors, str(path), metadata={"format": "pt"})
    return path


def same(a, b):
    return (a.dtype == b.dtype and a.shape == b.shape and a.device == b.device and
            torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                        b.contiguous().reshape(-1).view(torch.uint8)))


@pytest.mark.parametrize("device", ["cuda:0", 0, "cpu"])
def test_load_file_equals_safetensors(checkpoint, device):
    ours = load_file(checkpoint, device=device)
    theirs = safetensors_torch.load_file(str(checkpoint), device=device)
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        assert same(ours[name], theirs[name]), name


SLICES = [(slice(None), slice(100, 200)), (slice(10, 90),), (3,), (Ellipsis, slice(0, 1)),
          (slice(5, 6), slice(7, 8))]


def test_safe_open_equals_safetensors_on_cuda(checkpoint):
    with phx.safe_open(checkpoint, framework="pt", device="cuda:0") as ours, \
            safetensors.safe_open(str(checkpoint), framework="pt", device="cuda:0") as theirs:
        assert ours.keys() == sorted(theirs.keys())
        assert ours.metadata() == theirs.metadata()
        for name in theirs.keys():
            assert same(ours.get_tensor(name), theirs.get_tensor(name)), name
            a, b = ours.get_slice(name), theirs.get_slice(name)
            assert a.get_shape() == list(b.get_shape()) and a.get_dtype() == b.get_dtype()
            if len(a.get_shape()) == 2:
                for key in SLICES:
                    assert same(a[key], b[key]), (name, key)


def test_cufile_into_cuda_tensors(tmp_path):
    data = torch.randint(0, 256, ((4 << 20) + 123,), dtype=torch.uint8)
    path = tmp_path / "blob.bin"
    path.write_bytes(data.numpy().tobytes())
    gpu = torch.empty_like(data, device="cuda:0")
    with phx.CuFile(path) as f:
        assert f.read(gpu) == gpu.numel()
        assert torch.equal(gpu.cpu(), data)
        gpu.zero_()
        futs = [f.pread(gpu[k << 20:(k + 1) << 20], file_offset=k << 20) for k in range(4)]
        concurrent.futures.wait(futs)
        assert [x.get() for x in futs] == [1 << 20] * 4
        assert torch.equal(gpu[:4 << 20].cpu(), data[:4 << 20])
    out = tmp_path / "out.bin"
    for run in range(50):
        with phx.File(out, "w") as f:
            f.pwrite_async(gpu, 1 << 20, 0)   # never awaited
        assert out.read_bytes() == data[:1 << 20].numpy().tobytes(), f"run {run}"
