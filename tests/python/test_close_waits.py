# SPDX-License-Identifier: MIT
"""No I/O is lost or orphaned: File.close() (and the end of a with block)
waits for every future made on the file, queued or running; Device and
Registration closes wait for the package's futures started before them; a
failure nobody looked at is raised by close() rather than dropped."""

import concurrent.futures
import errno
import threading

import pytest

from conftest import numpy

RUNS = 300


def test_a_write_nobody_awaits_reaches_the_file(phx, tmp_path):
    # Before: the bytes were missing after the block in most runs.
    src = numpy.random.default_rng(1).integers(0, 256, 4096, dtype=numpy.uint8)
    for run in range(RUNS):
        path = tmp_path / f"w{run % 4}.bin"
        with phx.File(path, "w") as f:
            f.pwrite_async(src, 4096, 0)
        assert path.read_bytes() == src.tobytes(), f"run {run}"


def test_many_unawaited_writes_all_land(phx, tmp_path):
    src = numpy.random.default_rng(2).integers(0, 256, 64 * 4096, dtype=numpy.uint8)
    for run in range(RUNS // 10):
        path = tmp_path / "many.bin"
        with phx.File(path, "w") as f:
            for k in range(64):
                f.pwrite_async(src, 4096, k * 4096, k * 4096)
        assert path.read_bytes() == src.tobytes(), f"run {run}"


def test_a_read_made_in_the_block_holds_its_result_after_it(phx, make_blob):
    # Before: get() raised "I/O operation on closed file" in 199 of 200.
    path, data = make_blob(8192, 3)
    for run in range(RUNS):
        dst = numpy.zeros(8192, dtype=numpy.uint8)
        with phx.File(path) as f:
            fut = f.pread_async(dst, 8192, 0)
        assert fut.done(), f"run {run}"
        assert fut.get() == 8192
        assert dst.tobytes() == data.tobytes()


def test_batches_are_waited_for_too(phx, tmp_path):
    src = numpy.arange(8192, dtype=numpy.uint8)
    for run in range(RUNS // 3):
        path = tmp_path / "batch.bin"
        with phx.File(path, "w") as f:
            fut = f.pwrite_batch_async([(src, 4096, 0, 0), (src, 4096, 4096, 4096)])
        assert fut.done() and fut.get() == [4096, 4096]
        assert path.read_bytes() == src.tobytes(), f"run {run}"


def test_a_closed_file_refuses_new_futures_at_once(phx, make_blob):
    path, _ = make_blob(4096, 4)
    f = phx.File(path)
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.pread_async(numpy.zeros(16, dtype=numpy.uint8))


def test_close_raises_a_failure_nobody_looked_at(phx, make_blob):
    path, _ = make_blob(4096, 5)
    f = phx.File(path, "r")
    f.pwrite_async(numpy.ones(16, dtype=numpy.uint8), 16, 0)  # read-only: EBADF
    with pytest.raises(OSError) as info:
        f.close()
    assert info.value.errno == errno.EBADF and str(path) in str(info.value)
    assert f.closed
    f.close()  # idempotent, and the failure was reported once


def test_close_is_quiet_about_a_failure_already_seen(phx, make_blob):
    path, _ = make_blob(4096, 6)
    with phx.File(path, "r") as f:
        fut = f.pwrite_async(numpy.ones(16, dtype=numpy.uint8), 16, 0)
        with pytest.raises(OSError):
            fut.get()


def test_close_waits_for_a_write_still_running(phx, tmp_path, monkeypatch):
    # Futures still queued (not running) when close() starts: one blocker
    # per pool thread holds the pool while the file is closed.
    path = tmp_path / "queued.bin"
    release = threading.Event()
    started = threading.Barrier(2, timeout=30)
    src = numpy.full(4096, 7, dtype=numpy.uint8)
    with phx.File(path, "w") as f:
        original = f.pwrite

        def slow_pwrite(*args):
            if args[2] == 0:
                started.wait()
                release.wait(30)
            return original(*args)

        monkeypatch.setattr(f, "pwrite", slow_pwrite)
        first = f.pwrite_async(src, 4096, 0)
        rest = [f.pwrite_async(src, 4096, k * 4096) for k in range(1, 16)]
        started.wait()
        closer = threading.Thread(target=f.close)
        closer.start()
        closer.join(0.2)
        assert closer.is_alive(), "close() returned while a write was still running"
        release.set()
        closer.join(30)
        assert not closer.is_alive()
    assert first.get() == 4096 and [r.get() for r in rest] == [4096] * 15
    assert path.read_bytes() == src.tobytes() * 16


def test_registration_and_device_closes_wait(phx, tmp_path):
    src = numpy.random.default_rng(8).integers(0, 256, 32 * 4096, dtype=numpy.uint8)
    for run in range(RUNS // 10):
        path = tmp_path / "reg.bin"
        with phx.File(path, "w") as f:
            with phx.Device("cpu") as dev:
                reg = dev.register(src)
                futs = [f.pwrite_async(src, 4096, k * 4096, k * 4096) for k in range(16)]
                reg.close()
                assert all(fut.done() for fut in futs), f"run {run}"
                futs = [f.pwrite_async(src, 4096, k * 4096, k * 4096) for k in range(16, 32)]
            assert all(fut.done() for fut in futs), f"run {run}"
        assert path.read_bytes() == src[:32 * 4096].tobytes()


def test_futures_work_with_concurrent_futures(phx, make_blob):
    path, data = make_blob(1 << 16, 9)
    dst = numpy.zeros(1 << 16, dtype=numpy.uint8)
    with phx.File(path) as f:
        futs = [f.pread_async(dst, 4096, k * 4096, k * 4096) for k in range(16)]
        done, not_done = concurrent.futures.wait(futs, timeout=30)
        assert len(done) == 16 and not not_done
        assert sorted(fut.result() for fut in concurrent.futures.as_completed(futs)) == [4096] * 16
    assert dst.tobytes() == data.tobytes()
