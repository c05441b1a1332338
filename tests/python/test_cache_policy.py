# SPDX-License-Identifier: MIT
"""File's default (direct="auto"): each read through the page cache when it
holds the range, O_DIRECT when it does not; the explicit modes stay what
they say.  What a read did is told by the kernel: the bytes this process
made the block layer read (/proc/self/io) and what the page cache holds
afterwards (File.cached_fraction, mincore)."""

import os
import tempfile

import pytest

from conftest import numpy

SIZE = 4 << 20


def storage_read_bytes():
    with open("/proc/self/io") as io:
        for line in io:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    raise AssertionError("/proc/self/io has no read_bytes")


@pytest.fixture
def disk_file():
    """A 4 MiB file on a disk filesystem (O_DIRECT; /var/tmp, not tmpfs),
    fsynced so that its pages can be dropped, and a function that leaves
    exactly the first `cached` bytes in the page cache."""
    folder = tempfile.mkdtemp(dir="/var/tmp")
    path = os.path.join(folder, "weights.bin")
    data = numpy.random.default_rng(5).integers(0, 256, SIZE, dtype=numpy.uint8)
    with open(path, "wb") as f:
        f.write(data.tobytes())
        f.flush()
        os.fsync(f.fileno())

    def cache(cached):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            if cached:
                assert len(os.pread(fd, cached, 0)) == cached
        finally:
            os.close(fd)

    yield path, data, cache
    os.unlink(path)
    os.rmdir(folder)


def read(file, offset, size):
    """Reads through `file`; returns the bytes and the block layer's count."""
    out = numpy.zeros(size, dtype=numpy.uint8)
    before = storage_read_bytes()
    assert file.pread(out, size, offset) == size
    return out, storage_read_bytes() - before


def test_the_default_reads_a_cached_range_from_memory(phx, disk_file):
    path, data, cache = disk_file
    cache(SIZE)
    with phx.File(path) as f:
        if not f.direct_io:
            pytest.skip("/var/tmp has no O_DIRECT here: both modes are the page cache")
        assert f.cached_fraction(0, SIZE) == 1.0
        assert f.reads_buffered(0, SIZE)
        out, disk = read(f, 0, SIZE)
        assert disk == 0, "a cached range was read from the disk"
        assert numpy.array_equal(out, data)
        out, disk = read(f, 4097, 100003)  # unaligned, as buffered reads may be
        assert disk == 0 and numpy.array_equal(out, data[4097:4097 + 100003])
    # The control: direct="preferred" reads the same cached range from the disk.
    with phx.File(path, direct="preferred") as f:
        assert not f.reads_buffered(0, SIZE)
        out, disk = read(f, 0, SIZE)
        assert disk >= SIZE and numpy.array_equal(out, data)


def test_the_default_reads_an_uncached_range_direct(phx, disk_file):
    path, data, cache = disk_file
    cache(0)
    with phx.File(path) as f:
        if not f.direct_io:
            pytest.skip("/var/tmp has no O_DIRECT here")
        assert not f.reads_buffered(0, SIZE)
        out, disk = read(f, 0, SIZE)
        assert disk >= SIZE and numpy.array_equal(out, data)
        assert f.cached_fraction(0, SIZE) == 0.0, "an uncached read filled the page cache"
    with phx.File(path, direct=False) as f:
        assert f.reads_buffered(0, SIZE)
        out, _ = read(f, 0, SIZE)
        assert numpy.array_equal(out, data) and f.cached_fraction(0, SIZE) == 1.0


def test_each_read_is_decided_for_its_range(phx, disk_file):
    path, data, cache = disk_file
    cache(SIZE // 2)
    with phx.File(path) as f:
        if not f.direct_io:
            pytest.skip("/var/tmp has no O_DIRECT here")
        assert f.reads_buffered(0, SIZE // 2) and not f.reads_buffered(SIZE // 2, SIZE // 2)
        out, disk = read(f, 0, SIZE // 2)
        assert disk == 0 and numpy.array_equal(out, data[:SIZE // 2])
        out, disk = read(f, SIZE // 2, SIZE // 2)
        assert disk >= SIZE // 2 and numpy.array_equal(out, data[SIZE // 2:])


def test_the_kvikio_face_follows_the_policy(phx, disk_file):
    path, data, cache = disk_file
    cache(SIZE)
    with phx.CuFile(path, "r") as f:
        out = numpy.zeros(SIZE, dtype=numpy.uint8)
        before = storage_read_bytes()
        assert f.read(out) == SIZE
        assert numpy.array_equal(out, data)
        if phx.File(path).direct_io:
            assert storage_read_bytes() - before == 0


def test_direct_accepts_auto_and_names_it_among_the_choices(phx, disk_file):
    path, _, _ = disk_file
    with phx.File(path, direct="auto") as f:
        assert f.reads_buffered(0, 0) is False  # nothing to read
    with pytest.raises(ValueError, match="auto, preferred, required, off"):
        phx.File(path, direct="sometimes")


def test_options_read_cache(phx):
    assert phx.Options().read_cache == "auto"
    assert phx.Options(read_cache="descriptor").read_cache == "descriptor"
    assert 'read_cache="auto"' in repr(phx.Options())
    with pytest.raises(ValueError, match="'never'"):
        phx.Options(read_cache="never")
