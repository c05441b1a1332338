# SPDX-License-Identifier: MIT
"""phoenix_gds.File: pread/pwrite on the CPU (host engine) into numpy and
other buffers, byte for byte, at unaligned offsets and sizes; modes,
context managers and the errors."""

import array
import errno
import mmap
import os

import pytest

from conftest import numpy

SIZE = (1 << 20) + 333
SENTINEL = 0xA5

# (file offset, size, buffer offset): aligned, and off by one either way.
CASES = [(0, 4096, 0), (4096, 8192, 0), (1, 4095, 0), (4095, 4097, 3), (12_345, 100_003, 511),
         (SIZE - 7, 7, 1), (0, SIZE, 0), (65_536, 1, 4_095), (3, 65_536 * 3 + 5, 4_097)]


@pytest.fixture
def blob(make_blob):
    return make_blob(SIZE, 11)


@pytest.mark.parametrize("direct", ["preferred", "off"])
def test_pread_unaligned_byte_for_byte(phx, blob, direct):
    path, data = blob
    with phx.File(path, direct=direct) as f:
        assert f.size == SIZE and f.mode == "r" and not f.writable
        for file_offset, size, buf_offset in CASES:
            dst = numpy.full(buf_offset + size + 9, SENTINEL, dtype=numpy.uint8)
            assert f.pread(dst, size, file_offset, buf_offset) == size
            got = dst[buf_offset:buf_offset + size]
            assert got.tobytes() == data[file_offset:file_offset + size].tobytes(), (
                file_offset, size, buf_offset)
            assert (dst[:buf_offset] == SENTINEL).all() and (dst[buf_offset + size:] == SENTINEL).all()


def test_pread_defaults_short_and_past_the_end(phx, blob):
    path, data = blob
    with phx.File(path) as f:
        whole = numpy.zeros(1000, dtype=numpy.uint8)
        assert f.pread(whole) == 1000  # size: the whole buffer, at file offset 0
        assert whole.tobytes() == data[:1000].tobytes()
        rest = numpy.zeros(1000, dtype=numpy.uint8)
        assert f.pread(rest, buf_offset=600, file_offset=10) == 400  # the rest of the buffer
        assert rest[600:].tobytes() == data[10:410].tobytes() and not rest[:600].any()
        tail = numpy.zeros(100, dtype=numpy.uint8)
        assert f.pread(tail, file_offset=SIZE - 40) == 40
        assert tail[:40].tobytes() == data[-40:].tobytes()
        assert f.pread(tail, file_offset=SIZE + 4096) == 0
        assert f.pread(tail, 0) == 0


@pytest.mark.parametrize("direct", ["preferred", "off"])
@pytest.mark.parametrize("mode", ["w", "w+", "r+"])
def test_pwrite_unaligned_then_read_back(phx, tmp_path, direct, mode):
    path = tmp_path / "out.bin"
    expected = bytearray(b"\x00" * 300_000)
    if mode == "r+":
        expected = bytearray(numpy.random.default_rng(1).integers(0, 256, 300_000,
                                                                  dtype=numpy.uint8).tobytes())
        path.write_bytes(expected)
    rng = numpy.random.default_rng(2)
    with phx.File(path, mode, direct=direct) as f:
        assert f.writable
        for file_offset, size, buf_offset in [(0, 4096, 0), (4097, 5000, 1), (100_001, 77, 13),
                                              (8191, 65_537, 4095), (299_000, 1000, 0)]:
            src = rng.integers(0, 256, buf_offset + size, dtype=numpy.uint8)
            assert f.pwrite(src, size, file_offset, buf_offset) == size
            expected[file_offset:file_offset + size] = src[buf_offset:].tobytes()
            back = numpy.zeros(size, dtype=numpy.uint8)
            assert f.pread(back, size, file_offset) == size
            assert back.tobytes() == src[buf_offset:].tobytes()
        assert f.size == len(expected)
    assert path.read_bytes() == bytes(expected)


def test_buffers_of_every_kind(phx, blob):
    path, data = blob
    with phx.File(path) as f:
        two_d = numpy.zeros((33, 17), dtype=numpy.float32)
        assert f.pread(two_d, file_offset=5) == two_d.nbytes
        assert two_d.tobytes() == data[5:5 + two_d.nbytes].tobytes()
        ba = bytearray(777)
        assert f.pread(ba, file_offset=1) == 777 and bytes(ba) == data[1:778].tobytes()
        backing = bytearray(1000)
        assert f.pread(memoryview(backing)[100:300], file_offset=9) == 200
        assert bytes(backing[100:300]) == data[9:209].tobytes() and not any(backing[:100])
        arr = array.array("i", [0] * 100)
        assert f.pread(arr, file_offset=3) == 400 and arr.tobytes() == data[3:403].tobytes()
        with mmap.mmap(-1, 8192) as m:
            assert f.pread(m, file_offset=4096) == 8192 and m[:] == data[4096:12288].tobytes()
        capsule_target = numpy.zeros(64, dtype=numpy.uint8)
        assert f.pread(capsule_target.__dlpack__(), file_offset=2) == 64
        assert capsule_target.tobytes() == data[2:66].tobytes()


def test_read_only_buffers_are_sources_not_destinations(phx, tmp_path):
    path = tmp_path / "ro.bin"
    frozen = numpy.arange(4096, dtype=numpy.uint8)
    frozen.flags.writeable = False
    with phx.File(path, "w") as f:
        assert f.pwrite(b"hello, world", file_offset=3) == 12
        assert f.pwrite(frozen, 100, 20) == 100
        with pytest.raises(ValueError, match="read-only"):
            f.pread(b"\x00" * 16)
        with pytest.raises(ValueError, match="read-only"):
            f.pread(frozen)
    assert path.read_bytes() == b"\x00" * 3 + b"hello, world" + b"\x00" * 5 + frozen[:100].tobytes()


def test_torch_cpu_tensor(phx, blob):
    torch = pytest.importorskip("torch")
    path, data = blob
    dst = torch.zeros(1000, dtype=torch.uint8)
    with phx.File(path) as f:
        assert f.pread(dst, file_offset=77) == 1000
    assert dst.numpy().tobytes() == data[77:1077].tobytes()


def test_context_manager_closes_the_file(phx, blob):
    path, _ = blob
    with phx.File(path) as f:
        fd = f.fd
        os.fstat(fd)
    assert f.closed
    with pytest.raises(OSError) as info:
        os.fstat(fd)
    assert info.value.errno == errno.EBADF
    f.close()  # idempotent
    dst = numpy.zeros(8, dtype=numpy.uint8)
    for call in (lambda: f.pread(dst), lambda: f.pwrite(dst), lambda: f.pread_batch([(dst,)]),
                 lambda: f.size, lambda: f.fd):
        with pytest.raises(ValueError, match="closed file"):
            call()
    with pytest.raises(ValueError):
        f.pread_async(dst).get()
    # An exception inside the block closes it too.
    with pytest.raises(RuntimeError):
        with phx.File(path) as g:
            raise RuntimeError("inside")
    assert g.closed


def test_modes_and_open_errors(phx, tmp_path, blob):
    path, _ = blob
    with pytest.raises(FileNotFoundError):
        phx.File(tmp_path / "absent.bin")
    with pytest.raises(FileExistsError):
        phx.File(path, "x")
    with pytest.raises(ValueError, match="mode"):
        phx.File(path, "rw")
    with pytest.raises(OSError) as info:
        phx.File(path, direct="sometimes")
    assert info.value.errno == errno.EINVAL
    with phx.File(tmp_path / "new.bin", "x") as f:
        assert f.writable and f.size == 0
    # Read-only descriptor: the kernel's EBADF, naming the file.
    with phx.File(path, "r") as f:
        with pytest.raises(OSError) as info:
            f.pwrite(numpy.ones(10, dtype=numpy.uint8), file_offset=0)
        assert info.value.errno == errno.EBADF and str(path) in str(info.value)
    # "w" truncates.
    with phx.File(path, "w") as f:
        assert f.size == 0


def test_range_errors_name_file_offset_and_size(phx, blob):
    path, _ = blob
    dst = numpy.zeros(8, dtype=numpy.uint8)
    with phx.File(path) as f:
        for kwargs, words in (({"file_offset": -1}, ("offset -1",)),
                              ({"size": -4}, ("size -4",)),
                              ({"size": 9}, ("size 9", "8 bytes")),
                              ({"size": 4, "buf_offset": 5}, ("size 4", "buffer offset 5")),
                              ({"buf_offset": 9}, ("buffer offset 9",))):
            with pytest.raises(OSError) as info:
                f.pread(dst, **kwargs)
            assert info.value.errno == errno.EINVAL and str(path) in str(info.value)
            assert all(w in str(info.value) for w in words), str(info.value)
        with pytest.raises(OSError) as info:
            f.pread(numpy.zeros((4, 4), dtype=numpy.float32)[:, ::2])
        assert info.value.errno == errno.EINVAL and "contiguous" in str(info.value)
        with pytest.raises(TypeError, match="buffer protocol"):
            f.pread(object())
    assert not dst.any()
