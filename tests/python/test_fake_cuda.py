# SPDX-License-Identifier: MIT
"""phoenix_gds's CUDA path (compat engine) on the fake CUDA driver
(tests/fakecuda): a __cuda_array_interface__ buffer in fake device memory,
which the CPU cannot touch, read and written byte for byte, registered once,
shared by threads.  Runs itself in a child process, since the driver is
chosen once per process; skipped where the build has no fake driver."""

import os
import pathlib
import subprocess
import sys

import pytest

FAKE = os.environ.get("PHX_FAKE_CUDA_LIBRARY", "")


def run_child(tmp_path, part):
    """Runs child part ``part`` in a process of its own on the fake driver."""
    if not FAKE or not pathlib.Path(FAKE).is_file():
        pytest.skip("no fake CUDA driver (PHX_FAKE_CUDA_LIBRARY: ctest sets it)")
    env = dict(os.environ, PHX_CUDA_DRIVER=FAKE, PHX_FAKE_CUDA_DEVICES="2", PHX_ENGINE="auto")
    run = subprocess.run([sys.executable, __file__, str(tmp_path), part], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"fake cuda {part}: ok" in run.stdout


def test_cuda_array_interface_on_the_fake_driver(tmp_path):
    run_child(tmp_path, "file")


def test_compat_mode_picks_the_engine_of_a_new_cufile(tmp_path):
    run_child(tmp_path, "kvikio")


def test_cold_files_in_the_rules_shape_or_a_forced_one(tmp_path):
    run_child(tmp_path, "cold")


def fake_gpu():
    """The fake driver, initialised, and a class of its device buffers."""
    import ctypes

    import numpy

    lib = ctypes.CDLL(os.environ["PHX_CUDA_DRIVER"])

    def ok(result, what):
        assert result == 0, f"{what}: CUDA error {result}"

    ok(lib.cuInit(0), "cuInit")
    context = ctypes.c_void_p()
    ok(lib.cuDevicePrimaryCtxRetain(ctypes.byref(context), 0), "cuDevicePrimaryCtxRetain")
    ok(lib.cuCtxPushCurrent_v2(context), "cuCtxPushCurrent")

    class FakeCudaArray:
        """Bytes of fake device memory on CUDA ordinal 0."""

        def __init__(self, n):
            p = ctypes.c_ulonglong()
            ok(lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)), "cuMemAlloc")
            self.ptr, self.n = p.value, n
            self.__cuda_array_interface__ = {"data": (self.ptr, False), "shape": (n,),
                                             "typestr": "|u1", "strides": None, "version": 3}

        def __dlpack_device__(self):
            return (2, 0)

        def host(self):
            out = numpy.zeros(self.n, dtype=numpy.uint8)
            ok(lib.cuMemcpyDtoH_v2(out.ctypes.data_as(ctypes.c_void_p),
                                   ctypes.c_ulonglong(self.ptr), ctypes.c_size_t(self.n)),
               "cuMemcpyDtoH")
            return out

    return FakeCudaArray


def child_file(scratch):
    import numpy

    import phoenix_gds as phx
    from conftest import read_parts_in_threads

    FakeCudaArray = fake_gpu()
    size = (4 << 20) + 4099
    data = numpy.random.default_rng(51).integers(0, 256, size, dtype=numpy.uint8)
    path = pathlib.Path(scratch) / "blob.bin"
    data.tofile(path)
    gpu = FakeCudaArray(size)

    with phx.Device("cuda:0") as dev, phx.File(path) as f:
        assert dev.engine == "compat", dev.engine_reason
        assert dev.id == 1  # the fake GPUs' bus order is the reverse of CUDA's
        for file_offset, n, buf_offset in [(0, 1 << 20, 0), (1, 4095, 3), (4097, 3 << 20, 511)]:
            assert f.pread(gpu, n, file_offset, buf_offset) == n
            got = gpu.host()[buf_offset:buf_offset + n]
            assert got.tobytes() == data[file_offset:file_offset + n].tobytes()
        before = dev.stats["registered"]
        with dev.register(gpu) as reg:
            assert reg.device == "cuda:0" and reg.nbytes == size
            done = read_parts_in_threads(f, gpu, size)
            assert f.pread_batch([(gpu, size - done, done, done), (gpu, 4096, 0, 0)]) == \
                [size - done, 4096]
            assert dev.stats["registered"] == before + 1
        assert gpu.host().tobytes() == data.tobytes()
        try:
            dev.register(numpy.zeros(8, dtype=numpy.uint8))
            raise AssertionError("a host buffer registered on cuda:0")
        except ValueError:
            pass

    # Unregistered, from several threads at once: shared, not EEXIST.
    other = FakeCudaArray(size)
    with phx.File(path) as f:
        futures = [f.pread_async(other, size, 0, 0) for _ in range(6)]
        assert [fut.get() for fut in futures] == [size] * 6
    assert other.host().tobytes() == data.tobytes()

    out = pathlib.Path(scratch) / "out.bin"
    with phx.File(out, "w") as f:
        assert f.pwrite(gpu, size - 1, 0, 1) == size - 1
    assert out.read_bytes() == data[1:].tobytes()

    # Pieces gathered into device memory (the shape of a column slice), through the compat engine.
    pieces = [(k * 8192 + 100, k * 1000, 1000) for k in range(64)]
    target = FakeCudaArray(64 * 1000)
    with phx.File(path) as f:
        assert f.read_ranges(target, pieces) == 64 * 1000
    expect = b"".join(data[o:o + n].tobytes() for o, _, n in pieces)
    assert target.host().tobytes() == expect
    # A write that the read-only file refuses says its reason once.
    with phx.File(path) as f:
        try:
            f.pwrite(gpu, 4096, 0, 0)
            raise AssertionError("wrote through a read-only file")
        except OSError as error:
            assert str(error).count(os.strerror(error.errno)) == 1, str(error)

    # Every Device is closed: the GPU's engine stays set up until released.
    assert phx.release_idle_engines() == 1
    assert phx.release_idle_engines() == 0
    again = FakeCudaArray(size)
    with phx.File(path) as f:
        assert f.pread(again, size, 0, 0) == size  # a new engine
    assert again.host().tobytes() == data.tobytes()
    assert phx.release_idle_engines() == 1


def child_kvikio(scratch):
    """kvikio's compat mode is the engine a CuFile opened afterwards moves
    CUDA memory with: ON compat, OFF direct (which this machine lacks: the
    read fails, as kvikio's does without cuFile), AUTO what detection finds."""
    import numpy

    import phoenix_gds as phx

    FakeCudaArray = fake_gpu()
    size = (1 << 20) + 11
    data = numpy.random.default_rng(52).integers(0, 256, size, dtype=numpy.uint8)
    path = pathlib.Path(scratch) / "kv.bin"
    data.tofile(path)
    gpu = FakeCudaArray(size)

    def registered():
        with phx.Device("cuda:0", "compat") as dev:
            return dev.stats["registered"]

    for mode in (phx.CompatMode.ON, phx.CompatMode.AUTO):
        with phx.defaults.set("compat_mode", mode):
            before = registered()
            with phx.CuFile(path) as f:
                assert f.read(gpu, task_size=256 << 10) == size
            assert gpu.host().tobytes() == data.tobytes()
            assert registered() > before, mode  # the compat engine moved it
    with phx.defaults.set("compat_mode", phx.CompatMode.OFF):
        before = registered()
        with phx.CuFile(path) as f:
            try:
                f.read(gpu)
                raise AssertionError("compat mode OFF read through the compat engine")
            except RuntimeError as error:
                assert isinstance(error, OSError) and "phxfs" in str(error), error
        assert registered() == before
    # The mode of the file's opening stays the file's.
    with phx.defaults.set("compat_mode", phx.CompatMode.ON):
        f = phx.CuFile(path)
    with f, phx.defaults.set("compat_mode", phx.CompatMode.OFF):
        assert f.raw_read(gpu) == size


def child_cold(scratch):
    """A cold file (dropped from the page cache) loaded onto the fake GPU by
    the rule's reader threads and by forced shapes, byte for byte; stats say
    the shape and why."""
    import ctypes

    import numpy

    import phoenix_gds as phx
    from conftest import random_tensors, write_safetensors

    lib = ctypes.CDLL(os.environ["PHX_CUDA_DRIVER"])
    path = pathlib.Path(scratch) / "cold.safetensors"
    tensors = random_tensors(52, count=8)
    tensors["big.weight"] = numpy.arange(3 << 20, dtype=numpy.uint32)
    write_safetensors(path, tensors, gap=3)
    for shape in ({}, {"cold_reader": "uring", "cold_request": 1 << 20, "cold_in_flight": 3},
                  {"cold_reader": "threads", "cold_request": 64 << 10, "cold_in_flight": 5},
                  {"cold_reader": "stripes", "cold_request": 128 << 10, "cold_in_flight": 7}):
        fd = os.open(path, os.O_RDONLY)
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        loader = phx.Loader("cuda:0", engine="compat", **shape)
        loaded = loader.load(path)
        for name, want in tensors.items():
            got = numpy.zeros(want.nbytes, dtype=numpy.uint8)
            assert lib.cuMemcpyDtoH_v2(got.ctypes.data_as(ctypes.c_void_p),
                                       ctypes.c_ulonglong(loaded[name].data_ptr),
                                       ctypes.c_size_t(want.nbytes)) == 0
            assert got.tobytes() == want.tobytes(), (shape, name)
        (fs,) = loader.stats["per_file"]
        if fs["mode"] != "direct":
            continue  # a file system without O_DIRECT: no cold reader
        assert fs["path_taken"] == ("stream" if shape.get("cold_reader") == "uring"
                                    else "readers"), fs
        if shape:
            assert fs["request_bytes"] == shape["cold_request"], fs
            assert fs["depth"] == shape["cold_in_flight"], fs
            assert "forced:" in fs["why"], fs
        else:
            assert fs["why"].split("; ")[-1].startswith("rule: "), fs
            assert fs["threads"] == fs["depth"] >= 2, fs


if __name__ == "__main__":
    {"file": child_file, "kvikio": child_kvikio, "cold": child_cold}[sys.argv[2]](sys.argv[1])
    print(f"fake cuda {sys.argv[2]}: ok")
