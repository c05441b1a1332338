# SPDX-License-Identifier: MIT
"""phoenix_gds.CuFile takes kvikio.CuFile's calls: read/write block,
pread/pwrite return futures that concurrent.futures takes, raw_read/
raw_write take dev_offset; on the CPU with numpy, byte for byte."""

import concurrent.futures
import errno
import os

import pytest

from conftest import numpy

SIZE = (1 << 20) + 4097


def test_the_common_calls(phx, tmp_path):
    path = tmp_path / "kv.bin"
    src = numpy.random.default_rng(11).integers(0, 256, SIZE, dtype=numpy.uint8)
    with phx.CuFile(path, "w") as f:
        assert f.write(src) == SIZE
        fut = f.pwrite(src, 4096, file_offset=SIZE, task_size=1 << 20)
        assert isinstance(fut, concurrent.futures.Future) and fut.get() == 4096
        assert f.fileno() >= 0 and isinstance(f.open_flags(), int)
    assert path.read_bytes() == src.tobytes() + src[:4096].tobytes()

    with phx.CuFile(path) as f:
        assert f.nbytes() == SIZE + 4096
        dst = numpy.zeros(SIZE, dtype=numpy.uint8)
        assert f.read(dst) == SIZE
        assert dst.tobytes() == src.tobytes()
        halves = numpy.zeros(SIZE, dtype=numpy.uint8)
        futs = [f.pread(halves[:SIZE // 2]), f.pread(halves[SIZE // 2:], file_offset=SIZE // 2)]
        done, not_done = concurrent.futures.wait(futs, timeout=60)
        assert not not_done and [x.get() for x in futs] == [SIZE // 2, SIZE - SIZE // 2]
        assert halves.tobytes() == src.tobytes()
        raw = numpy.zeros(10_000, dtype=numpy.uint8)
        assert f.raw_read(raw, 5000, file_offset=123, dev_offset=777) == 5000
        assert raw[777:5777].tobytes() == src[123:5123].tobytes()
        assert not raw[:777].any() and not raw[5777:].any()
    assert f.closed


def test_raw_write_and_append_mode(phx, tmp_path):
    path = tmp_path / "raw.bin"
    path.write_bytes(b"\x01" * 8192)
    src = numpy.arange(256, dtype=numpy.uint8)
    with phx.CuFile(path, "a") as f:   # kept, not truncated
        assert f.raw_write(src, 100, file_offset=4000, dev_offset=50) == 100
    data = path.read_bytes()
    assert data[:4000] == b"\x01" * 4000 and data[4000:4100] == src[50:150].tobytes()
    assert data[4100:] == b"\x01" * (8192 - 4100)


def test_futures_made_and_never_awaited_land(phx, tmp_path):
    src = numpy.random.default_rng(12).integers(0, 256, 4096, dtype=numpy.uint8)
    for run in range(100):
        path = tmp_path / "lost.bin"
        with phx.CuFile(path, "w") as f:
            f.pwrite(src)
        assert path.read_bytes() == src.tobytes(), f"run {run}"


def test_bad_arguments_are_value_errors(phx, tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"x" * 10)
    for flags in ("rw", "q", 3):
        with pytest.raises(ValueError, match="flags") as info:
            phx.CuFile(path, flags)
        assert info.value.errno == errno.EINVAL
    with phx.CuFile(path) as f:
        with pytest.raises(ValueError, match="task_size"):
            f.read(numpy.zeros(4, dtype=numpy.uint8), task_size=0)
        with pytest.raises(ValueError, match="file offset -1"):
            f.read(numpy.zeros(4, dtype=numpy.uint8), file_offset=-1)
    with pytest.raises(FileNotFoundError):
        phx.CuFile(tmp_path / "absent")
    with pytest.raises(IsADirectoryError):
        phx.CuFile(os.fspath(tmp_path))
