# SPDX-License-Identifier: MIT
"""phoenix_gds.Device and Registration on the CPU (host engine): one
registration reused by many reads and threads, transient registrations
shared rather than racing, context-manager cleanup, and the errors."""

import errno

import pytest

from conftest import numpy, threaded

SIZE = 1 << 20


@pytest.fixture
def blob(make_blob):
    return make_blob(SIZE, 21)


def test_device_cpu(phx):
    with phx.Device("cpu") as dev:
        assert dev.engine == "host" and dev.id == 0 and dev.name == "cpu"
        assert isinstance(dev.engine_reason, str)
    assert dev.closed
    dev.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        dev.register(numpy.zeros(8, dtype=numpy.uint8))
    with pytest.raises(OSError) as info:
        phx.Device("gpu")
    assert info.value.errno == errno.EINVAL
    with pytest.raises(OSError) as info:
        phx.Device("cpu", engine="direct")
    assert info.value.errno == errno.EINVAL


def test_one_registration_many_reads(phx, blob):
    path, data = blob
    buf = numpy.zeros(SIZE, dtype=numpy.uint8)
    with phx.Device("cpu") as dev, phx.File(path) as f:
        before = dev.stats
        with dev.register(buf) as reg:
            assert reg.nbytes == SIZE and reg.ptr == buf.ctypes.data and reg.device == "cpu"
            assert reg.buffer is buf
            assert dev.stats["live"] == before["live"] + 1
            for i in range(64):
                off, size = i * 16_381 % (SIZE - 5000), 1 + i * 61
                assert f.pread(buf, size, off, off) == size
                assert buf[off:off + size].tobytes() == data[off:off + size].tobytes()
            batch = [(buf, 4096, k * 4096, k * 4096) for k in range(256)]
            assert f.pread_batch(batch) == [4096] * 256
            assert buf.tobytes() == data.tobytes()
            # The registration was made once, and used by every read.
            assert dev.stats["registered"] == before["registered"] + 1
        assert reg.closed
        assert dev.stats["live"] == before["live"]
        with pytest.raises(ValueError, match="closed"):
            reg.ptr
        reg.close()  # idempotent


def test_registration_of_a_part_and_of_the_same_memory_again(phx, blob):
    path, data = blob
    buf = numpy.zeros(SIZE, dtype=numpy.uint8)
    with phx.Device("cpu") as dev, phx.File(path) as f:
        base = dev.stats["registered"]
        whole = dev.register(buf)
        part = dev.register(buf[4096:8192])  # lies inside: shares the registration
        again = dev.register(buf)
        assert dev.stats["registered"] == base + 1
        assert f.pread(buf[4096:8192], file_offset=4096) == 4096
        assert buf[4096:8192].tobytes() == data[4096:8192].tobytes()
        whole.close()
        again.close()
        assert f.pread(buf[5000:6000], file_offset=5000) == 1000  # part still holds it
        assert dev.stats["registered"] == base + 1
        part.close()
        # Overlapping a registration without lying inside it is EINVAL.
        with dev.register(buf[:4096]):
            with pytest.raises(OSError) as info:
                dev.register(buf[2048:8192])
            assert info.value.errno == errno.EINVAL and "overlaps" in str(info.value)


def test_device_close_closes_its_registrations(phx, blob):
    path, data = blob
    bufs = [numpy.zeros(4096, dtype=numpy.uint8) for _ in range(3)]
    dev = phx.Device("cpu")
    live = dev.stats["live"]
    regs = [dev.register(b) for b in bufs]
    assert dev.stats["live"] == live + 3
    dev.close()
    assert all(r.closed for r in regs) and dev.stats["live"] == live
    # The buffers still work, registered for each read.
    with phx.File(path) as f:
        assert f.pread(bufs[0], file_offset=1) == 4096
    assert bufs[0].tobytes() == data[1:4097].tobytes()


def test_registration_keeps_the_buffer_alive(phx, blob):
    path, data = blob
    with phx.Device("cpu") as dev:
        reg = dev.register(numpy.zeros(10_000, dtype=numpy.uint8))
        with phx.File(path) as f:
            assert f.pread(reg.buffer, file_offset=3) == 10_000
        assert reg.buffer.tobytes() == data[3:10_003].tobytes()


def test_registration_errors(phx):
    with phx.Device("cpu") as dev:
        with pytest.raises(ValueError, match="empty"):
            dev.register(numpy.zeros(0, dtype=numpy.uint8))
        with pytest.raises(TypeError):
            dev.register(42)
        with pytest.raises(OSError) as info:
            dev.register(numpy.zeros((4, 4))[:, ::2])
        assert info.value.errno == errno.EINVAL


@pytest.mark.parametrize("registered", [False, True])
def test_threads_reading_into_one_buffer(phx, blob, registered):
    """The EEXIST race of registering per call: gone either way."""
    path, data = blob
    buf = numpy.zeros(SIZE, dtype=numpy.uint8)
    part = SIZE // 8
    with phx.Device("cpu") as dev, phx.File(path) as f:
        before = dev.stats
        reg = dev.register(buf) if registered else None

        def work(k):
            for rep in range(25):
                # Every thread also reads the whole first page: the same range.
                assert f.pread(buf, 4096, 0, 0) == 4096
                lo = k * part + rep * 97
                assert f.pread(buf, part - rep * 97, lo, lo) == part - rep * 97

        threaded(8, work)
        assert buf.tobytes() == data.tobytes()
        if registered:
            assert dev.stats["registered"] == before["registered"] + 1
            reg.close()
        assert dev.stats["live"] == before["live"]


def test_threads_read_into_one_tensor(phx, blob):
    """The original API's case: every thread reads the whole tensor."""
    path, data = blob
    buf = numpy.zeros(SIZE // 4, dtype=numpy.uint8)
    with phx.File(path) as f:
        def work(k):
            for _ in range(30):
                assert f.read_into(buf, 4096) == buf.size

        threaded(8, work)
    assert buf.tobytes() == data[4096:4096 + buf.size].tobytes()


def test_threads_on_overlapping_views_wait_for_each_other(phx, blob):
    path, data = blob
    backing = numpy.zeros(SIZE, dtype=numpy.uint8)
    views = [backing[k * 4096:k * 4096 + 65_536] for k in range(8)]  # each overlaps the next
    with phx.File(path) as f:
        def work(k):
            for _ in range(20):
                assert f.pread(views[k], file_offset=k * 4096) == 65_536

        threaded(8, work)
    end = 7 * 4096 + 65_536
    assert backing[:end].tobytes() == data[:end].tobytes()
