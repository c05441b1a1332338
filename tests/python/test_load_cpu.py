# SPDX-License-Identifier: MIT
"""phx.load_safetensors onto the CPU (host engine) against numpy."""

import errno
import json
import os
import threading

import pytest

from conftest import numpy, random_tensors, write_safetensors


def assert_same(loaded, expected):
    assert set(loaded) == set(expected)
    for name, array in expected.items():
        got = loaded[name]
        assert got.dtype == array.dtype, name
        assert got.shape == array.shape, name
        assert got.tobytes() == array.tobytes(), name


def test_unaligned_tensors_numpy(phx, make_file):
    tensors = random_tensors(1, count=7)
    tensors["flags"] = numpy.array([True, False, True])
    tensors["scalar"] = numpy.array(3.5, dtype=numpy.float64)
    tensors["empty"] = numpy.zeros((0, 4), dtype=numpy.float32)
    path = make_file("m.safetensors", tensors, gap=13, metadata={"format": "pt"})
    loaded = phx.load_safetensors(path, device="cpu", framework="numpy", chunk_size=65536)
    assert_same(loaded, tensors)


def test_dlpack_objects_and_capsules(phx, make_file):
    tensors = random_tensors(2)
    path = make_file("m.safetensors", tensors, gap=3)
    loaded = phx.load_safetensors(str(path), device="cpu")
    for name, array in tensors.items():
        t = loaded[name]
        assert isinstance(t, phx.Tensor)
        assert t.name == name
        assert t.shape == array.shape
        assert t.nbytes == array.nbytes
        assert t.device == "cpu"
        assert t.__dlpack_device__() == (1, 0)
        got = numpy.from_dlpack(t)
        assert got.tobytes() == array.tobytes()
        raw = numpy.from_dlpack(t.as_bytes())
        assert raw.dtype == numpy.uint8 and raw.tobytes() == array.tobytes()
    # The memory outlives the dict: numpy holds the capsule's owner.
    keep = numpy.from_dlpack(loaded["layer.0.weight"])
    del loaded
    assert keep.tobytes() == tensors["layer.0.weight"].tobytes()


def write_sharded(folder, shards, count, seed, gap=lambda shard: 0):
    """A sharded checkpoint with its index in @p folder: ({name: array}, weight_map)."""
    weight_map = {}
    expected = {}
    for shard in range(shards):
        tensors = random_tensors(seed + shard, count=count, prefix=f"s{shard}")
        name = f"model-{shard + 1:05d}-of-{shards:05d}.safetensors"
        write_safetensors(folder / name, tensors, gap=gap(shard))
        weight_map.update({k: name for k in tensors})
        expected.update(tensors)
    with open(folder / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    return expected, weight_map


def test_sharded_index_and_folder(phx, tmp_path):
    expected, _ = write_sharded(tmp_path, 3, 5, 10, gap=lambda shard: shard)
    for target in (tmp_path / "model.safetensors.index.json", tmp_path):
        loaded = phx.load_safetensors(target, device="cpu", framework="numpy",
                                          parallel_files=2)
        assert_same(loaded, expected)


def test_keys_read_only_those_tensors(phx, tmp_path):
    # A device map that puts some tensors elsewhere loads the rest with keys=:
    # nothing else is returned, and bytes of shards holding none are not read.
    expected, weight_map = write_sharded(tmp_path, 2, 4, 20)
    wanted = sorted(k for k in expected if k.startswith("s1"))[:2]
    loader = phx.Loader("cpu")
    loaded = loader.load(tmp_path, framework="numpy", keys=iter(wanted))
    assert_same(loaded, {k: expected[k] for k in wanted})
    assert loader.stats["files"] == 1
    assert loader.stats["bytes_read"] < os.path.getsize(tmp_path / weight_map[wanted[0]])
    assert loader.load(tmp_path, framework="numpy", keys=[]) == {}
    with pytest.raises(OSError) as info:
        loader.load(tmp_path, keys=[wanted[0], "absent"])
    assert info.value.errno == errno.EINVAL and "absent" in str(info.value)
    with pytest.raises(OSError) as info:
        loader.load(tmp_path, keys=wanted[0])
    assert info.value.errno == errno.EINVAL


def test_several_paths_and_loader_reuse(phx, make_file):
    a = random_tensors(3, prefix="a")
    b = random_tensors(4, prefix="b")
    pa = make_file("a.safetensors", a)
    pb = make_file("b.safetensors", b, gap=7)
    loader = phx.Loader("cpu", cache="buffered")
    loader.warm_up([pa])
    seen = []
    first = loader.load([pa, pb], framework="numpy", progress=lambda d, t: seen.append((d, t)))
    assert_same(first, {**a, **b})
    assert seen and seen[-1][0] <= seen[-1][1]
    stats = loader.stats
    assert stats["files"] == 2 and stats["engines"] == {0: "host"}
    assert stats["bytes_read"] >= stats["tensor_bytes"] > 0
    assert 0 <= stats["allocate_seconds"] <= stats["seconds"]
    # Each file: how it was read and why (cache="buffered" said as the reason).
    assert [f["path"] for f in stats["per_file"]] == [str(pa), str(pb)]
    for f in stats["per_file"]:
        assert f["mode"] == "buffered" and f["why"] == "page cache: cache=buffered"
        assert f["resident"] is None and f["bytes"] > 0
        assert f["path_taken"] in ("queue", "engine") and f["threads"] >= 1
        assert f["request_bytes"] > 0 and f["depth"] >= 1
    second = loader.load([pb], framework="numpy")
    assert_same(second, b)


def test_file_read_into_numpy(phx, tmp_path):
    data = numpy.random.default_rng(5).integers(0, 255, 100_003, dtype=numpy.uint8)
    path = tmp_path / "blob.bin"
    data.tofile(path)
    f = phx.File(path)
    assert f.size == data.size
    dst = numpy.zeros(50_000, dtype=numpy.uint8)
    assert f.read_into(dst, 12_345) == 50_000
    assert dst.tobytes() == data[12_345:62_345].tobytes()
    # A raw capsule works too, and size limits the read.
    dst2 = numpy.zeros(1000, dtype=numpy.uint8)
    assert f.read_into(dst2.__dlpack__(), 7, size=10) == 10
    assert dst2[:10].tobytes() == data[7:17].tobytes() and not dst2[10:].any()
    # Short at the end of the file.
    dst3 = numpy.zeros(100, dtype=numpy.uint8)
    assert f.read_into(dst3, data.size - 40) == 40


def test_errors_carry_errno(phx, tmp_path, make_file):
    with pytest.raises(FileNotFoundError):
        phx.load_safetensors(tmp_path / "absent.safetensors", device="cpu")
    bad = tmp_path / "bad.safetensors"
    header = b'{"w":{"dtype":"F128","shape":[2],"data_offsets":[0,32]}}'
    bad.write_bytes(len(header).to_bytes(8, "little") + header + bytes(32))
    with pytest.raises(OSError) as info:
        phx.load_safetensors(bad, device="cpu")
    assert info.value.errno == 22 and "F128" in str(info.value) and str(bad) in str(info.value)
    with pytest.raises(OSError) as info:
        phx.load_safetensors(make_file("ok.safetensors", random_tensors(1)), device="gpu")
    assert info.value.errno == 22
    with pytest.raises(ValueError):
        phx.load_safetensors(make_file("ok2.safetensors", random_tensors(1)), device="cpu",
                                 framework="tensorflow")
    f = phx.File(make_file("ok3.safetensors", random_tensors(1)))
    strided = numpy.zeros((4, 4), dtype=numpy.float32)[:, ::2]
    with pytest.raises(OSError) as info:
        f.read_into(strided, 0)
    assert info.value.errno == 22
    dst = numpy.zeros(8, dtype=numpy.uint8)
    for offset, size, words in ((-1, None, ("offset -1",)), (0, -4, ("size -4",)),
                                (0, 9, ("size 9", "8 bytes"))):
        with pytest.raises(OSError) as info:
            f.read_into(dst, offset, size)
        assert info.value.errno == 22 and f.path in str(info.value)
        assert all(w in str(info.value) for w in words), str(info.value)
    assert not dst.any()
    # Past what a file offset can be, or not an integer: the same errors,
    # not pybind11's "incompatible function arguments".
    for offset, size, buf_offset in ((1 << 63, None, 0), (0, 1 << 64, 0), (0, None, 1 << 70)):
        with pytest.raises(OSError) as info:
            f.pread(dst, size, offset, buf_offset)
        assert info.value.errno == errno.EOVERFLOW and f.path in str(info.value)
    with pytest.raises(OSError) as info:
        f.pread_batch([(dst, None, 1 << 64)])
    assert info.value.errno == errno.EOVERFLOW and str(1 << 64) in str(info.value)
    for call in (lambda: f.pread(dst, 1.5), lambda: f.read_into(dst, "0"),
                 lambda: f.pread_batch([(dst, None, 0.0)])):
        with pytest.raises(TypeError, match="expected an integer"):
            call()
    assert not dst.any()
    for option, value in (("chunk_size", -1), ("queue_depth", 1 << 40), ("parallel_files", -2)):
        with pytest.raises(OSError) as info:
            phx.Loader("cpu", **{option: value})
        assert info.value.errno == errno.EINVAL and option in str(info.value)


def test_engine_for_cpu(phx):
    assert phx.engine_for("cpu") == "host"
    assert isinstance(phx.__version__, str)


def test_a_fifo_is_refused_without_waiting_for_a_writer(phx, tmp_path):
    # open() of a FIFO waits for a writer: a wrong path must fail, not hang.
    fifo = tmp_path / "fifo.safetensors"
    os.mkfifo(fifo)
    errors = {}

    def attempt(name, call):
        try:
            call()
        except OSError as e:
            errors[name] = e

    calls = {"load": lambda: phx.load_safetensors(fifo, device="cpu"),
             "file": lambda: phx.File(fifo)}
    for name, call in calls.items():
        worker = threading.Thread(target=attempt, args=(name, call))
        worker.start()
        worker.join(10)
        if worker.is_alive():
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # releases the open
            worker.join()
            pytest.fail(f"{name} waited for a writer on {fifo}")
    assert errors["load"].errno == errno.EINVAL and str(fifo) in str(errors["load"])
    assert errors["file"].errno == errno.ESPIPE and str(fifo) in str(errors["file"])
