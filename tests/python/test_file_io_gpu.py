# SPDX-License-Identifier: MIT
"""phoenix_gds.File, Device and Registration on a GPU with torch (and cupy
where installed); skipped without torch or CUDA."""

import pytest

from conftest import numpy, read_parts_in_threads

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA GPU", allow_module_level=True)

SIZE = (8 << 20) + 4099


@pytest.fixture
def blob(make_blob):
    return make_blob(SIZE, 41)


def host(t):
    torch.cuda.synchronize()
    return t.cpu().numpy().tobytes()


@pytest.mark.parametrize("engine", ["auto", "compat"])
def test_pread_pwrite_torch_unaligned(phx, blob, tmp_path, engine):
    path, data = blob
    dst = torch.zeros(SIZE + 8192, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    with phx.File(path, engine=engine) as f:
        for file_offset, size, buf_offset in [(0, 1 << 20, 0), (1, 4095, 3), (4097, 3 << 20, 511),
                                              (SIZE - 9, 9, 4096), (0, SIZE, 1)]:
            assert f.pread(dst, size, file_offset, buf_offset) == size
            got = host(dst[buf_offset:buf_offset + size])
            assert got == data[file_offset:file_offset + size].tobytes()
    out = tmp_path / "out.bin"
    with phx.File(out, "w", engine=engine) as f:
        assert f.pwrite(dst, SIZE, 0, 1) == SIZE
    assert out.read_bytes() == data.tobytes()


def test_one_registration_many_reads_and_threads(phx, blob):
    path, data = blob
    dst = torch.zeros(SIZE, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    with phx.Device("cuda:0") as dev, phx.File(path) as f:
        before = dev.stats["registered"]
        with dev.register(dst) as reg:
            assert reg.device == "cuda:0" and reg.nbytes == SIZE
            done = read_parts_in_threads(f, dst, SIZE, reps=10)
            assert f.pread(dst, SIZE - done, done, done) == SIZE - done
            assert f.pread_batch([(dst, 4096, k * 4096, k * 4096) for k in range(64)]) == \
                [4096] * 64
            assert dev.stats["registered"] == before + 1
        assert host(dst) == data.tobytes()


def test_unregistered_threads_share_transient_registrations(phx, blob):
    path, data = blob
    dst = torch.zeros(SIZE, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    with phx.File(path) as f:
        futures = [f.pread_async(dst, SIZE, 0, 0) for _ in range(8)]
        assert [fut.get() for fut in futures] == [SIZE] * 8
    assert host(dst) == data.tobytes()


def test_cupy_arrays(phx, blob):
    cupy = pytest.importorskip("cupy")
    path, data = blob
    dst = cupy.zeros(100_003, dtype=cupy.uint8)
    with phx.Device("cuda:0") as dev, dev.register(dst), phx.File(path) as f:
        assert f.pread(dst, file_offset=12_345) == 100_003
        assert f.pread_async(dst, 1000, 7, 5).get() == 1000
    got = cupy.asnumpy(dst).tobytes()
    assert got[5:1005] == data[7:1007].tobytes()
    assert got[1005:] == data[12_345 + 1005:12_345 + 100_003].tobytes()


def test_buffer_on_another_device_is_refused(phx):
    with phx.Device("cuda:0") as dev:
        with pytest.raises(ValueError, match="cpu"):
            dev.register(numpy.zeros(16, dtype=numpy.uint8))
    with phx.Device("cpu") as dev:
        with pytest.raises(ValueError, match="cuda:0"):
            dev.register(torch.zeros(16, dtype=torch.uint8, device="cuda:0"))
