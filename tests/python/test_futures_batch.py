# SPDX-License-Identifier: MIT
"""phoenix_gds.File's futures (pread_async, pwrite_async) and batches
(pread_batch, pwrite_batch) on the CPU (host engine), byte for byte."""

import errno

import pytest

from conftest import numpy

SIZE = (1 << 20) + 4099


@pytest.fixture
def blob(make_blob):
    return make_blob(SIZE, 31)


def test_pread_async_futures(phx, blob):
    path, data = blob
    dst = numpy.zeros(SIZE, dtype=numpy.uint8)
    chunk = 65_537
    with phx.File(path) as f:
        futures = [(off, f.pread_async(dst, min(chunk, SIZE - off), off, off))
                   for off in range(0, SIZE, chunk)]
        for off, fut in futures:
            assert isinstance(fut, phx.IOFuture)
            assert fut.get() == min(chunk, SIZE - off)
            assert fut.done()
        assert "done" in repr(futures[0][1])
    assert dst.tobytes() == data.tobytes()


def test_pwrite_async_then_read(phx, tmp_path):
    # Unaligned pieces, but no two in one 4 KiB block, into a file already
    # that long: concurrent O_DIRECT writes that share a block, or that
    # extend the file, race in libphoenix's read-modify-write.
    path = tmp_path / "out.bin"
    src = numpy.random.default_rng(4).integers(0, 256, 12_288 * 40, dtype=numpy.uint8)
    expected = bytearray(12_288 * 39 + 8001)
    path.write_bytes(expected)
    with phx.File(path, "r+") as f:
        futs = [f.pwrite_async(src, 8000, k * 12_288 + 1, k * 12_288) for k in range(40)]
        assert [fut.get() for fut in futs] == [8000] * 40
        for k in range(40):
            expected[k * 12_288 + 1:k * 12_288 + 8001] = src[k * 12_288:k * 12_288 + 8000].tobytes()
        back = numpy.zeros(len(expected), dtype=numpy.uint8)
        assert f.pread_async(back).get(timeout=60) == len(expected)
    assert back.tobytes() == bytes(expected)
    assert path.read_bytes() == bytes(expected)


def test_future_carries_the_error(phx, blob):
    path, _ = blob
    with phx.File(path) as f:
        fut = f.pwrite_async(numpy.ones(10, dtype=numpy.uint8), file_offset=0)
        with pytest.raises(OSError) as info:
            fut.get()
        assert info.value.errno == errno.EBADF and fut.done()
        with pytest.raises(OSError) as info:
            f.pread_async(numpy.zeros(4, dtype=numpy.uint8), file_offset=-3).get()
        assert info.value.errno == errno.EINVAL and "offset -3" in str(info.value)


@pytest.mark.parametrize("direct", ["preferred", "off"])
def test_pread_batch_unaligned(phx, blob, direct):
    path, data = blob
    rng = numpy.random.default_rng(5)
    dst = numpy.full(SIZE, 0xA5, dtype=numpy.uint8)
    others = [numpy.zeros(int(n), dtype=numpy.uint8) for n in rng.integers(1, 20_000, 40)]
    requests = []
    expect = []
    # Disjoint pieces of one buffer, at odd offsets and sizes...
    pos = 0
    for _ in range(60):
        size = int(rng.integers(1, 9000))
        requests.append((dst, size, int(rng.integers(0, SIZE - size)), pos))
        pos += size + int(rng.integers(0, 17))
    # ...and whole separate buffers, size left out.
    for b in others:
        requests.append((b, None, int(rng.integers(0, SIZE - b.size))))
    with phx.File(path, direct=direct) as f:
        got = f.pread_batch(requests)
        assert f.pread_batch_async(requests).get() == got
    for (buf, size, file_offset, *rest), n in zip(requests, got):
        buf_offset = rest[0] if rest else 0
        size = buf.size - buf_offset if size is None else size
        assert n == size
        assert buf[buf_offset:buf_offset + size].tobytes() == \
            data[file_offset:file_offset + size].tobytes()
    assert f.closed


def test_pread_batch_short_at_end_and_empty(phx, blob):
    path, data = blob
    dst = numpy.zeros(100, dtype=numpy.uint8)
    with phx.File(path) as f:
        assert f.pread_batch([]) == []
        assert f.pread_batch([(dst, 100, SIZE - 30), (dst, 0, 0, 50), (dst, 10, SIZE + 5, 90)]) == \
            [30, 0, 0]
    assert dst[:30].tobytes() == data[-30:].tobytes()


def test_pwrite_batch_then_pread_batch(phx, tmp_path):
    path = tmp_path / "out.bin"
    rng = numpy.random.default_rng(6)
    src = rng.integers(0, 256, 200_000, dtype=numpy.uint8)
    pieces = [(src, 4999, k * 5003 + 1, k * 4999) for k in range(40)]
    with phx.File(path, "w+") as f:
        assert f.pwrite_batch(pieces) == [4999] * 40
        assert f.pwrite_batch_async(pieces[:3]).get() == [4999] * 3
        back = numpy.zeros_like(src)
        assert f.pread_batch([(back, s, fo, bo) for _, s, fo, bo in pieces]) == [4999] * 40
    assert back[:40 * 4999].tobytes() == src[:40 * 4999].tobytes()
    on_disk = path.read_bytes()
    for _, size, file_offset, buf_offset in pieces:
        assert on_disk[file_offset:file_offset + size] == src[buf_offset:buf_offset + size].tobytes()


def test_batch_errors(phx, blob):
    path, _ = blob
    dst = numpy.zeros(16, dtype=numpy.uint8)
    with phx.File(path) as f:
        with pytest.raises(TypeError, match="tuple"):
            f.pread_batch([dst])
        with pytest.raises(TypeError, match="tuple"):
            f.pread_batch([()])
        with pytest.raises(OSError) as info:
            f.pread_batch([(dst, 8, 0), (dst, 17, 0)])
        assert info.value.errno == errno.EINVAL and "size 17" in str(info.value)
        with pytest.raises(OSError) as info:
            f.pwrite_batch([(dst, 8, 0), (dst, 8, 4096)])
        assert info.value.errno == errno.EBADF
        assert "request 0" in str(info.value) and str(path) in str(info.value)
