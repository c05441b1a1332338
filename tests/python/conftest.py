# SPDX-License-Identifier: MIT
"""Shared fixtures: safetensors files written byte for byte (8-byte
little-endian header length, JSON header padded with spaces, data), so the
tests do not trust any safetensors implementation."""

import json
import struct
import threading

import pytest

numpy = pytest.importorskip("numpy")


def write_safetensors(path, tensors, gap=0, metadata=None):
    """tensors: {name: numpy array}; each placed after `gap` filler bytes."""
    names = {"float16": "F16", "float32": "F32", "float64": "F64", "int8": "I8",
             "int16": "I16", "int32": "I32", "int64": "I64", "uint8": "U8",
             "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL"}
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    data = bytearray()
    for name, array in tensors.items():
        data += b"\x5a" * gap
        raw = numpy.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": names[str(array.dtype)], "shape": list(array.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(data)


def random_tensors(seed, count=4, prefix="layer"):
    rng = numpy.random.default_rng(seed)
    out = {}
    for i in range(count):
        shape = (int(rng.integers(1, 40)), int(rng.integers(1, 300)))
        dtype = [numpy.float32, numpy.float16, numpy.int64, numpy.uint8][i % 4]
        out[f"{prefix}.{i}.weight"] = (rng.standard_normal(shape) * 100).astype(dtype)
    return out


@pytest.fixture
def make_file(tmp_path):
    def make(name, tensors, **kwargs):
        path = tmp_path / name
        write_safetensors(path, tensors, **kwargs)
        return path
    return make


def threaded(count, work):
    """Runs work(k) for k in range(count) on as many threads; re-raises the first failure."""
    errors = []

    def run(k):
        try:
            work(k)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def read_parts_in_threads(f, buf, size, threads=8, reps=5):
    """Each thread reads its part of the file into the same place of buf,
    reps times at shifting starts; the tail after the parts is left."""
    part = size // threads

    def work(k):
        for rep in range(reps):
            lo = k * part + rep
            assert f.pread(buf, part - rep, lo, lo) == part - rep

    threaded(threads, work)
    return threads * part


@pytest.fixture
def make_blob(tmp_path):
    """make_blob(size, seed) -> (path, numpy uint8 array of the file's bytes)."""
    def make(size, seed):
        data = numpy.random.default_rng(seed).integers(0, 256, size, dtype=numpy.uint8)
        path = tmp_path / f"blob-{seed}.bin"
        data.tofile(path)
        return path, data
    return make


@pytest.fixture
def phx():
    """The package under test (import name phoenix_gds)."""
    return pytest.importorskip("phoenix_gds")
