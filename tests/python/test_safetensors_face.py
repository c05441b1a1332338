# SPDX-License-Identifier: MIT
"""The calls safetensors users make, on the CPU with numpy: load_file,
safe_open (keys, metadata, get_tensor, get_slice) whose slices read only
their bytes, "np"/"pt" names, integer devices, and numpy's __array__ on
CPU Tensors.  Every value is compared with numpy's own indexing of the
arrays the file was written from."""

import errno
import json

import pytest

from conftest import numpy, random_tensors


@pytest.fixture
def weights():
    rng = numpy.random.default_rng(21)
    return {
        "w2d": rng.standard_normal((37, 53)).astype(numpy.float32),
        "w3d": rng.integers(-1000, 1000, (5, 7, 11), dtype=numpy.int16),
        "bias": rng.standard_normal(29).astype(numpy.float64),
        "flags": rng.integers(0, 2, (3, 4)).astype(numpy.bool_),
        "scalar": numpy.array(3.5, dtype=numpy.float32),
        "empty": numpy.zeros((0, 4), dtype=numpy.uint8),
    }


def test_numpy_load_file_returns_writable_arrays(phx, make_file, weights):
    from phoenix_gds.numpy import load_file

    path = make_file("m.safetensors", weights, gap=3)
    got = load_file(path)
    assert sorted(got) == sorted(weights)
    for name, array in weights.items():
        assert isinstance(got[name], numpy.ndarray)
        assert got[name].dtype == array.dtype and got[name].shape == array.shape
        assert got[name].tobytes() == array.tobytes(), name
        assert got[name].flags.writeable, name
    got["w2d"][0, 0] = 42.0
    assert got["w2d"][0, 0] == 42.0


def test_cpu_tensors_speak_numpy(phx, make_file, weights):
    path = make_file("m.safetensors", weights)
    tensors = phx.load_safetensors(path, device="cpu")
    array = numpy.asarray(tensors["w3d"])
    assert array.dtype == numpy.int16 and array.shape == (5, 7, 11)
    assert array.tobytes() == weights["w3d"].tobytes()
    array[0, 0, 0] = 7
    assert numpy.asarray(tensors["w3d"])[0, 0, 0] == 7  # a view, not a copy
    assert numpy.asarray(tensors["bias"], dtype=numpy.float32).dtype == numpy.float32
    assert numpy.array(tensors["bias"], copy=True).tobytes() == weights["bias"].tobytes()


def test_framework_and_device_names(phx, make_file, weights):
    path = make_file("m.safetensors", weights)
    for framework in ("np", "numpy"):
        got = phx.load_safetensors(path, device="cpu", framework=framework)
        assert got["bias"].tobytes() == weights["bias"].tobytes()
    with pytest.raises(ValueError, match="'tensorflow'"):
        phx.load_safetensors(path, device="cpu", framework="tensorflow")
    # An integer device is a CUDA ordinal: accepted as such (this machine
    # may have no GPU: then ENODEV, not an argument error).
    try:
        phx.Loader(0)
    except OSError as error:
        assert error.errno == errno.ENODEV and not isinstance(error, ValueError)
    with pytest.raises(ValueError, match="device -1"):
        phx.Loader(-1)


def test_safe_open_keys_metadata_and_tensors(phx, make_file, weights):
    path = make_file("m.safetensors", weights, gap=5, metadata={"format": "np", "k": "v"})
    with phx.safe_open(path, framework="np") as f:
        assert f.keys() == sorted(weights)
        assert f.metadata() == {"format": "np", "k": "v"}
        for name, array in weights.items():
            got = f.get_tensor(name)
            assert got.dtype == array.dtype and got.shape == array.shape, name
            assert got.tobytes() == array.tobytes(), name
            assert got.flags.writeable
        with pytest.raises(KeyError, match="nope"):
            f.get_tensor("nope")
    plain = make_file("plain.safetensors", {"a": weights["bias"]})
    with phx.safe_open(plain, framework="numpy", device="cpu") as f:
        assert f.metadata() is None


SLICES = [
    (slice(None), slice(0, 20)),       # a column shard: one piece per row
    (slice(10, 20),),                  # a row shard: one piece
    (slice(3, 30), slice(7, 50)),
    (5,),
    (5, slice(1, 9)),
    (-1, -1),
    (Ellipsis, slice(52, 53)),
    (slice(0, 0),),
    (slice(30, 100),),                 # clipped like numpy
]

SLICES_3D = [
    (slice(1, 3), slice(None), slice(2, 5)),
    (Ellipsis, 4),
    (2, Ellipsis),
    (slice(None), slice(0, 7), slice(0, 11)),
    (slice(4, 5), slice(6, 7)),
    (slice(1, 3), slice(0, 2), slice(2, 5)),   # not evenly spaced: explicit pieces
    (slice(1, 4), 3),
]


def test_get_slice_equals_numpy_indexing(phx, make_file, weights):
    path = make_file("m.safetensors", weights, gap=1)
    with phx.safe_open(path, framework="np") as f:
        w = f.get_slice("w2d")
        assert w.get_shape() == [37, 53] and w.get_dtype() == "F32"
        for key in SLICES:
            expected = weights["w2d"][key]
            got = w[key]
            assert got.shape == expected.shape, key
            assert got.tobytes() == numpy.ascontiguousarray(expected).tobytes(), key
        cube = f.get_slice("w3d")
        for key in SLICES_3D:
            expected = weights["w3d"][key]
            got = cube[key]
            assert got.shape == expected.shape, key
            assert got.tobytes() == numpy.ascontiguousarray(expected).tobytes(), key
        with pytest.raises(IndexError):
            w[37]
        with pytest.raises(IndexError, match="too many indices"):
            w[1, 2, 3]
        with pytest.raises(ValueError, match="zero"):
            w[::0]
        with pytest.raises(IndexError, match="single ellipsis"):
            w[..., ...]
        for key in ([1, 2], 1.5, True):   # advanced indexing, as safetensors refuses it
            with pytest.raises(TypeError) as info:
                w[key]
            assert isinstance(info.value, phx.SafetensorError)


def test_a_slice_reads_only_its_bytes(phx):
    from phoenix_gds._safetensors import slice_layout, slice_pieces

    # A column half of a [rows, cols] F16 weight at file offset 1000.
    pieces = slice_pieces((64, 128), 16, 1000, [(0, 64, 1), (64, 64, 1)])
    assert len(pieces) == 64
    assert sum(size for _, _, size in pieces) == 64 * 64 * 2
    assert pieces[0] == (1000 + 64 * 2, 0, 128) and pieces[1] == (1000 + 256 + 128, 128, 128)
    # A row half is one piece.
    assert slice_pieces((64, 128), 16, 1000, [(32, 32, 1), (0, 128, 1)]) == [(1000 + 32 * 256, 0,
                                                                             32 * 256)]
    assert slice_pieces((64, 128), 16, 0, [(0, 64, 1), (0, 0, 1)]) == []
    # Every 8th row of a [64, 1024] F32: 8 rows of 4 KiB, the 56 others skipped.
    assert slice_layout((64, 1024), 32, 0, [(0, 8, 8), (0, 1024, 1)]) == (0, 4096, (8,),
                                                                          (8 * 4096,))
    # Every 8th column from the 4th: 4-byte elements 32 bytes apart, across
    # rows too (a row is 128 of them), so one level.
    assert slice_layout((64, 1024), 32, 0, [(0, 64, 1), (3, 128, 8)]) == (12, 4, (8192,), (32,))
    # Every 8th row's every 8th column: a level of rows, one of elements.
    assert slice_layout((64, 1024), 32, 0, [(0, 8, 8), (0, 128, 8)]) == (0, 4, (8, 128),
                                                                         (8 * 4096, 32))


def test_a_slice_never_touches_bytes_outside_it(phx, tmp_path, weights):
    # The bytes outside the selected columns are cut out of the file
    # (a sparse hole reads as zeros): the slice must still be exact.
    from conftest import write_safetensors

    path = tmp_path / "holes.safetensors"
    w = numpy.arange(64 * 128, dtype=numpy.float32).reshape(64, 128)
    write_safetensors(path, {"w": w})
    with phx.safe_open(path, framework="np") as f:
        _, _, begin, _ = f._entry("w")
    raw = bytearray(path.read_bytes())
    for row in range(64):
        lo = begin + row * 512
        raw[lo:lo + 256] = b"\xff" * 256   # columns 0..63 spoiled
    path.write_bytes(bytes(raw))
    with phx.safe_open(path, framework="np") as f:
        assert f.get_slice("w")[:, 64:].tobytes() == w[:, 64:].tobytes()


def recorded_reads(f):
    """Wraps the reads of a safe_open's descriptors: [(call, file offset, bytes)]."""
    calls = []
    for file in (f._file, f._buffered):
        def pread(buf, size=None, file_offset=0, buf_offset=0, _orig=file.pread):
            calls.append(("pread", file_offset, size))
            return _orig(buf, size, file_offset, buf_offset)

        def read_ranges(buf, pieces, _orig=file.read_ranges):
            calls.append(("read_ranges", pieces[0][0], sum(p[2] for p in pieces)))
            return _orig(buf, pieces)

        file.pread = pread
        file.read_ranges = read_ranges
    return calls


def test_a_dense_slice_reads_its_span_a_sparse_one_its_pieces(phx, make_file):
    rng = numpy.random.default_rng(9)
    narrow = rng.standard_normal((64, 128)).astype(numpy.float32)   # rows of 512 bytes
    wide = rng.standard_normal((16, 8192)).astype(numpy.float32)    # rows of 32 KiB
    path = make_file("m.safetensors", {"narrow": narrow, "wide": wide}, gap=3)
    with phx.safe_open(path, framework="np") as f:
        calls = recorded_reads(f)
        assert f.get_slice("narrow")[:, 64:].tobytes() == narrow[:, 64:].tobytes()
        # Every page of the span holds selected bytes: the span, once.
        assert calls == [("pread", calls[0][1], 63 * 512 + 256)]
        calls.clear()
        got = f.get_slice("wide")[:, 100:116]
        assert got.tobytes() == numpy.ascontiguousarray(wide[:, 100:116]).tobytes()
        # One 64-byte piece per 32 KiB row: the pieces alone.
        assert calls == [("read_ranges", calls[0][1], 16 * 64)]


def test_tensor_parallel_example_runs(phx, tmp_path):
    import runpy
    import sys
    from pathlib import Path

    from conftest import write_safetensors

    example = Path(__file__).resolve().parents[2] / "examples" / "python" / "tensor_parallel.py"
    rng = numpy.random.default_rng(5)
    tensors = {f"layers.{i}.{kind}": rng.standard_normal((16, 24)).astype(numpy.float32)
               for i in range(2) for kind in ("q_proj.weight", "o_proj.weight")}
    path = tmp_path / "model.safetensors"
    write_safetensors(path, tensors)
    argv = sys.argv
    try:
        sys.argv = [str(example), str(path), "--world-size", "2", "--framework", "np",
                    "--verify"]
        runpy.run_path(str(example), run_name="__main__")
    finally:
        sys.argv = argv


def test_a_folder_and_its_index_are_checked_alike(phx, tmp_path):
    from conftest import write_safetensors

    a = random_tensors(1, prefix="a")
    b = random_tensors(2, prefix="b")
    write_safetensors(tmp_path / "s1.safetensors", a)
    write_safetensors(tmp_path / "s2.safetensors", b)
    weight_map = {name: "s1.safetensors" for name in a}
    weight_map.update({name: "s2.safetensors" for name in b})
    weight_map["ghost"] = "s2.safetensors"   # a tensor no shard has
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    for path in (index, tmp_path):
        with pytest.raises(OSError, match="ghost") as info:
            phx.load_safetensors(path, device="cpu")
        assert info.value.errno == errno.EINVAL
    del weight_map["ghost"]
    del weight_map["a.0.weight"]   # a shard tensor the index leaves out
    index.write_text(json.dumps({"weight_map": weight_map}))
    for path in (index, tmp_path):
        with pytest.raises(OSError, match="a.0.weight") as info:
            phx.load_safetensors(path, device="cpu")
        assert info.value.errno == errno.EINVAL
    # An index under another name is read as an index, not as a shard.
    weight_map["a.0.weight"] = "s1.safetensors"
    other = tmp_path / "weights.json"
    other.write_text(json.dumps({"weight_map": weight_map}))
    index.unlink()
    got = phx.load_safetensors(other, device="cpu", framework="np")
    assert sorted(got) == sorted(weight_map)


def test_errors_are_safetensor_errors_and_the_builtin_ones(phx, make_file, tmp_path, weights):
    # safetensors users catch SafetensorError; users of this face, and of
    # numpy, catch KeyError, OSError with errno, IndexError: each is both.
    import struct

    from phoenix_gds.numpy import load_file

    path = make_file("m.safetensors", weights)
    with phx.safe_open(path, framework="np") as f:
        for call in (f.get_tensor, f.get_slice):
            with pytest.raises(phx.SafetensorError, match="nope") as info:
                call("nope")
            assert isinstance(info.value, KeyError)
        with pytest.raises(phx.SafetensorError) as info:
            f.get_slice("w2d")[37]
        assert isinstance(info.value, IndexError)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 8) + b"{nonsen}")
    for call in (lambda: phx.safe_open(bad, framework="np"), lambda: load_file(bad)):
        with pytest.raises(phx.SafetensorError, match="JSON") as info:
            call()
        assert isinstance(info.value, OSError) and info.value.errno == errno.EINVAL
    for call in (lambda: phx.safe_open(tmp_path / "none", framework="np"),
                 lambda: load_file(tmp_path / "none")):
        with pytest.raises(FileNotFoundError) as info:
            call()
        assert isinstance(info.value, phx.SafetensorError) and info.value.errno == errno.ENOENT
    assert not issubclass(phx.SafetensorError, OSError)   # as safetensors': an Exception
    assert phx.SafetensorError.__module__ == "phoenix_gds"


def write_one(path, dtype, shape, data):
    """A file of one tensor "t", written by hand (any dtype name, any bytes)."""
    import struct

    header = json.dumps({"t": {"dtype": dtype, "shape": shape,
                               "data_offsets": [0, len(data)]}}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


# safetensors 0.8's dtypes past the byte-sized ones: F4 and F6 packed
# (shape x bits / 8 bytes), C64 two F32s.
NEWER_DTYPES = [("F4", [2, 4], 4), ("F4", [6], 3), ("F6_E2M3", [4], 3), ("F6_E3M2", [2, 4], 6),
                ("F8_E8M0", [2, 2], 4), ("F8_E4M3FNUZ", [3], 3), ("F8_E5M2FNUZ", [3], 3),
                ("C64", [2, 2], 32)]


def test_every_safetensors_dtype_is_read(phx, tmp_path):
    from phoenix_gds.numpy import load_file

    for k, (dtype, shape, nbytes) in enumerate(NEWER_DTYPES):
        data = bytes((7 * i + k) % 256 for i in range(nbytes))
        path = tmp_path / f"{k}.safetensors"
        write_one(path, dtype, shape, data)
        t = phx.load_safetensors(path, device="cpu")["t"]
        assert (t.dtype, list(t.shape), t.nbytes) == (dtype, shape, nbytes)
        assert numpy.from_dlpack(t.as_bytes()).tobytes() == data
        with phx.safe_open(path, framework="np") as f:
            assert f.get_slice("t").get_dtype() == dtype
            if dtype != "C64":
                # numpy has no such dtype: a clear TypeError, as safetensors' SafetensorError.
                with pytest.raises(TypeError, match=dtype) as info:
                    f.get_tensor("t")
                assert isinstance(info.value, phx.SafetensorError)
                continue
            expected = numpy.frombuffer(data, dtype=numpy.complex64).reshape(shape)
            for got, want in ((f.get_tensor("t"), expected), (f.get_slice("t")[1:], expected[1:]),
                              (load_file(path)["t"], expected)):
                assert got.dtype == numpy.complex64 and got.shape == want.shape
                assert got.tobytes() == want.tobytes()
    # Elements that end inside a byte are refused at the header, as safetensors does.
    for dtype, shape in (("F4", [3]), ("F6_E2M3", [2])):
        path = tmp_path / "odd.safetensors"
        write_one(path, dtype, shape, b"\0\0")
        with pytest.raises(phx.SafetensorError, match="whole number of bytes") as info:
            phx.safe_open(path, framework="np")
        assert info.value.errno == errno.EINVAL


def random_index(rng, shape):
    """A random basic numpy index for ``shape``: ints (negative too), slices
    with any bounds and steps (negative, past the ends), Ellipsis, None."""
    items = []
    for extent in shape:
        kind = rng.integers(0, 5)
        if kind == 0 and extent:
            items.append(int(rng.integers(-extent, extent)))
            continue
        bound = lambda: None if rng.random() < 0.3 else int(rng.integers(-extent - 3, extent + 4))
        step = None if rng.random() < 0.3 else int(rng.choice([-3, -2, -1, 1, 2, 3, 5, 8]))
        items.append(slice(bound(), bound(), step))
    while items and rng.random() < 0.3:
        items.pop()                                # trailing dimensions left whole
    if rng.random() < 0.4:
        at = int(rng.integers(0, len(items) + 1))
        cut = int(rng.integers(0, len(items) - at + 1))
        items[at:at + cut] = [Ellipsis]            # standing for 0 or more dimensions
    for _ in range(int(rng.integers(0, 3))):
        items.insert(int(rng.integers(0, len(items) + 1)), None)
    return tuple(items) if len(items) != 1 or rng.random() < 0.5 else items[0]


def test_get_slice_takes_every_basic_index_as_numpy(phx, tmp_path):
    rng = numpy.random.default_rng(53)
    dtypes = [numpy.float32, numpy.int16, numpy.uint8, numpy.float64, numpy.bool_]
    for case in range(60):
        shape = tuple(int(d) for d in rng.integers(0, 9, int(rng.integers(1, 5))))
        if rng.random() < 0.8:
            shape = tuple(max(d, 1) for d in shape)
        dtype = dtypes[case % len(dtypes)]
        array = (rng.standard_normal(shape) * 50).astype(dtype)
        path = tmp_path / f"{case}.safetensors"
        from conftest import write_safetensors

        write_safetensors(path, {"x": array, "after": numpy.ones(3, dtype=numpy.int8)}, gap=3)
        with phx.safe_open(path, framework="np") as f:
            x = f.get_slice("x")
            for _ in range(40):
                key = random_index(rng, shape)
                try:
                    expected = array[key]
                except IndexError:   # an int past a dimension the Ellipsis moved it to
                    with pytest.raises(IndexError):
                        x[key]
                    continue
                got = x[key]
                assert got.shape == expected.shape and got.dtype == expected.dtype, (shape, key)
                assert got.tobytes() == numpy.ascontiguousarray(expected).tobytes(), (shape, key)


def test_a_step_reads_only_the_rows_it_takes(phx, make_file):
    rng = numpy.random.default_rng(8)
    narrow = rng.standard_normal((64, 1024)).astype(numpy.float32)   # rows of 4 KiB
    wide = rng.standard_normal((64, 4096)).astype(numpy.float32)     # rows of 16 KiB
    path = make_file("m.safetensors", {"narrow": narrow, "wide": wide}, gap=3)
    with phx.safe_open(path, framework="np") as f:
        calls = recorded_reads(f)
        assert f.get_slice("narrow")[::8].tobytes() == narrow[::8].tobytes()
        # Every 8th row: the 8 rows alone, 32 KiB of the 256 KiB.
        assert calls == [("read_ranges", calls[0][1], 8 * 4096)]
        calls.clear()
        got = f.get_slice("wide")[::8, ::8]
        assert got.tobytes() == numpy.ascontiguousarray(wide[::8, ::8]).tobytes()
        # Each taken row's span of taken columns (every page of it holds
        # some), no other row.
        assert calls == [("read_ranges", calls[0][1], 8 * (511 * 32 + 4))]
        calls.clear()
        got = f.get_slice("narrow")[:, ::8]
        assert got.tobytes() == numpy.ascontiguousarray(narrow[:, ::8]).tobytes()
        # Every page holds taken columns: the span once.
        assert calls == [("pread", calls[0][1], 63 * 4096 + 1017 * 4)]
        calls.clear()
        got = f.get_slice("narrow")[-1:-20:-8, ::-1]
        assert got.tobytes() == numpy.ascontiguousarray(narrow[-1:-20:-8, ::-1]).tobytes()
        assert calls == [("read_ranges", calls[0][1], 3 * 4096)]


def test_numpy_save_writes_safetensors_format_and_load_reads_it(phx, tmp_path):
    # The bytes safetensors 0.8 writes for this dict, spelled out: compact
    # JSON, __metadata__ first, tensors by dtype (largest alignment first)
    # then name, data offsets from 0, padded with spaces to 8 bytes.
    from phoenix_gds.numpy import load, load_file, save, save_file

    tensors = {"b": numpy.array([1.5, -2], dtype=numpy.float32),
               "a": numpy.arange(3, dtype=numpy.uint8),
               "c": numpy.array([7], dtype=numpy.int64),
               "d": numpy.arange(4, dtype=numpy.float32)}
    header = ('{"__metadata__":{"k":"v"},'
              '"c":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},'
              '"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},'
              '"d":{"dtype":"F32","shape":[4],"data_offsets":[16,32]},'
              '"a":{"dtype":"U8","shape":[3],"data_offsets":[32,35]}}').encode()
    header += b" " * (-len(header) % 8)
    import struct

    expected = (struct.pack("<Q", len(header)) + header + tensors["c"].tobytes()
                + tensors["b"].tobytes() + tensors["d"].tobytes() + tensors["a"].tobytes())
    assert save(tensors, metadata={"k": "v"}) == expected
    path = tmp_path / "saved.safetensors"
    save_file(tensors, path, metadata={"k": "v"})
    assert path.read_bytes() == expected
    for got in (load(expected), load_file(path)):
        assert sorted(got) == sorted(tensors)
        for name, array in tensors.items():
            assert got[name].dtype == array.dtype and got[name].tobytes() == array.tobytes()
            assert got[name].flags.writeable
    with phx.safe_open(path, framework="np") as f:
        assert f.metadata() == {"k": "v"}
    assert save({}) == struct.pack("<Q", 8) + b"{}      "
    # A strided or big-endian array is written as its values, little endian.
    odd = {"t": numpy.arange(12, dtype=">f4").reshape(3, 4)[:, ::2]}
    assert load(save(odd))["t"].tobytes() == numpy.ascontiguousarray(odd["t"], "<f4").tobytes()


def test_numpy_save_and_load_refuse_as_safetensors(phx):
    from phoenix_gds.numpy import load, save

    x = numpy.zeros(2, dtype=numpy.float32)
    with pytest.raises(TypeError):
        save({"x": x}, metadata={"k": 1})
    with pytest.raises(phx.SafetensorError):
        save({"x": x.astype(numpy.complex128)})
    with pytest.raises(phx.SafetensorError):
        save({"__metadata__": x})
    with pytest.raises(phx.SafetensorError):
        save({"x": [1, 2]})
    for data in (b"\x08\0", b"\x08\0\0\0\0\0\0\0{garbage", b"\xff" * 16):
        with pytest.raises(phx.SafetensorError) as info:
            load(data)
        assert isinstance(info.value, OSError) and info.value.errno in (errno.EINVAL,
                                                                        errno.EOVERFLOW)
