# SPDX-License-Identifier: MIT
"""phoenix_gds.CuFile takes kvikio.CuFile's calls: read/write block,
pread/pwrite return futures that concurrent.futures takes, raw_read/
raw_write take dev_offset; on the CPU with numpy, byte for byte."""

import concurrent.futures
import errno
import os
import threading

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


def _expect_end_of_file(phx, call):
    """kvikio raises RuntimeError ("POSIX error on pread: EOF") where a read
    meets the end of the file; ours is that and OSError(EIO) too."""
    with pytest.raises(RuntimeError, match="EOF") as info:
        call()
    assert isinstance(info.value, OSError) and isinstance(info.value, phx.CuFileError)
    assert info.value.errno == errno.EIO


def test_a_read_past_the_end_raises_as_kvikio(phx, tmp_path):
    path = tmp_path / "short.bin"
    data = numpy.random.default_rng(13).integers(0, 256, 10_000, dtype=numpy.uint8)
    data.tofile(path)
    with phx.CuFile(path) as f:
        big = numpy.zeros(12_000, dtype=numpy.uint8)
        _expect_end_of_file(phx, lambda: f.read(big))
        _expect_end_of_file(phx, lambda: f.pread(big).get())
        _expect_end_of_file(phx, lambda: f.read(big, 4096, file_offset=8000))
        _expect_end_of_file(phx, lambda: f.read(big, task_size=4096))   # the last task is short
        _expect_end_of_file(phx, lambda: f.read(big, 100, file_offset=20_000))
        _expect_end_of_file(phx, lambda: f.raw_read(big, 3000, file_offset=9000))
        _expect_end_of_file(phx, lambda: f.raw_read(big, None, 0, 1000))
        # Up to the end exactly is no error.
        assert f.read(big, 10_000) == 10_000 and f.raw_read(big, 2000, 8000) == 2000
        assert f.pread(big, 0, file_offset=10_000).get() == 0
        assert big[:2000].tobytes() == data[8000:].tobytes()


def test_errors_are_kvikios_classes_too(phx, tmp_path):
    """kvikio raises RuntimeError for failures of the system, ValueError for a
    size beyond the buffer or bad flags, OverflowError for a negative size or
    offset (a size_t); ours are those and OSError with errno as well."""
    with pytest.raises(RuntimeError) as info:
        phx.CuFile(tmp_path / "absent")
    assert isinstance(info.value, FileNotFoundError) and info.value.errno == errno.ENOENT
    path = tmp_path / "ro.bin"
    path.write_bytes(b"r" * 8192)
    src = numpy.ones(4096, dtype=numpy.uint8)
    with phx.CuFile(path, "r") as f:
        for call in (lambda: f.write(src), lambda: f.pwrite(src).get(),
                     lambda: f.raw_write(src, 4096)):
            with pytest.raises(RuntimeError) as info:
                call()
            assert isinstance(info.value, OSError) and info.value.errno == errno.EBADF
        for call in (lambda: f.read(src, 4097), lambda: f.pread(src, 5000),
                     lambda: f.raw_read(src, 4097)):
            with pytest.raises(ValueError, match="buffer"):
                call()
        for call in (lambda: f.read(src, file_offset=-1), lambda: f.read(src, -5),
                     lambda: f.pwrite(src, file_offset=-4096),
                     lambda: f.raw_read(src, 10, 0, -1)):
            with pytest.raises(OverflowError, match="negative") as info:
                call()
            assert isinstance(info.value, phx.ArgumentError)
    for flags in ("", "q", "x"):
        with pytest.raises(ValueError, match="flags"):
            phx.CuFile(path, flags)


def _recording(file, name):
    """Records (size, file_offset, buf_offset, thread) of each call of
    file.<name>, the piece a task moves, then makes it."""
    calls = []
    real = getattr(file, name)

    def record(buf, size, file_offset, buf_offset):
        calls.append((size, file_offset, buf_offset, threading.get_ident()))
        return real(buf, size, file_offset, buf_offset)

    setattr(file, name, record)
    return calls


def _moved(calls):
    """The (size, file_offset, buf_offset) pieces recorded, in file order."""
    return sorted((c[:3] for c in calls), key=lambda piece: piece[1])


def _pieces(size, file_offset, task_size):
    """kvikio's tasks of a request, written out: task_size each, the last one
    taking the rest; a request of a page or less, or of task_size or less, is one."""
    if size <= max(task_size, 4096):
        return [(size, file_offset, 0)]
    count = -(-size // task_size)
    return [(min(task_size, size - k * task_size), file_offset + k * task_size, k * task_size)
            for k in range(count)]


def test_task_size_cuts_a_request_into_tasks_run_at_once(phx, tmp_path):
    path = tmp_path / "tasks.bin"
    src = numpy.random.default_rng(14).integers(0, 256, SIZE, dtype=numpy.uint8)
    task = (128 << 10) + 3          # odd: tasks meet at unaligned offsets
    with phx.CuFile(path, "w") as f:
        writes = _recording(f._file, "pwrite")
        assert f.write(src, task_size=task) == SIZE
        assert _moved(writes) == _pieces(SIZE, 0, task)
        assert len({c[3] for c in writes}) > 1  # the caller and the pool
    assert path.read_bytes() == src.tobytes()

    with phx.CuFile(path) as f:
        reads = _recording(f._file, "pread")
        dst = numpy.zeros(SIZE, dtype=numpy.uint8)
        assert f.pread(dst, SIZE - 7, file_offset=7, task_size=task).get() == SIZE - 7
        assert _moved(reads) == _pieces(SIZE - 7, 7, task)
        assert dst[:SIZE - 7].tobytes() == src[7:].tobytes()
        # Without task_size: defaults.get("task_size").
        reads.clear()
        with phx.defaults.set("task_size", 256 << 10):
            assert f.read(dst) == SIZE
        assert _moved(reads) == _pieces(SIZE, 0, 256 << 10)
        assert dst.tobytes() == src.tobytes()
        # A task that fails is the call's error, after every task ended.
        reads.clear()
        with pytest.raises(RuntimeError, match="EOF"):
            f.read(numpy.zeros(SIZE + 5000, dtype=numpy.uint8), task_size=task)
        assert len(reads) == len(_pieces(SIZE + 5000, 0, task))
