# SPDX-License-Identifier: MIT
"""Real cuFile clients on Phoenix's libcufile.so.0 (lib/cufile_shim), on a
GPU machine: kvikio with its compat mode off, so every read and write goes
through cuFile, and PyTorch's torch.cuda.gds.GdsFile.  Each client runs in a
child process started with LD_PRELOAD and LD_LIBRARY_PATH naming the shim
(the loader must see them at start), writes and reads a file through cuFile
and checks every byte; the child also proves the calls reached the shim
(its cuFileUseCount, or its phx_cufile_last_error symbol).

Run by scripts/gpu-check, which sets PHX_CUFILE_SHIM to the built
libcufile.so.0.  Each test skips, saying why, where its client, CUDA or a
GPU is missing.

Pinned clients (wheels in .whl/, fetched for Python 3.12 / manylinux_2_28):
  kvikio-cu13 26.10.0, libkvikio-cu13 26.10.0, rapids-logger 0.3.0,
  cuda-pathfinder 1.9.1; installed with `pip install --no-deps .whl/*.whl`.
  kvikio also wants cupy-cuda13x; without it the test uses torch tensors,
  which kvikio takes through __cuda_array_interface__.
  torch 2.11 (cu130) as installed on the GPU machine.
"""

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def shim_path():
    env = os.environ.get("PHX_CUFILE_SHIM")
    candidates = [Path(env)] if env else []
    candidates += [Path("/tmp/phx-gpu-build/lib/cufile_shim/libcufile.so.0"),
                   HERE.parents[1] / "build/default/lib/cufile_shim/libcufile.so.0"]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    pytest.skip("libcufile.so.0 from lib/cufile_shim not built (set PHX_CUFILE_SHIM)")


def have(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def scratch_dir(tmp_path):
    # O_DIRECT needs a real file system: /tmp is often tmpfs.
    base = Path(os.environ.get("PHX_CUFILE_TEST_DIR", "/var/tmp"))
    return base if base.is_dir() and os.access(base, os.W_OK) else tmp_path


def run_client(script, shim, tmp_dir, extra_env=None):
    env = dict(os.environ)
    env["LD_PRELOAD"] = str(shim) + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env["LD_LIBRARY_PATH"] = str(shim.parent) + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["PHX_CUFILE_TEST_FILE_DIR"] = str(tmp_dir)
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=600)
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        result = json.loads(last[0])
    except json.JSONDecodeError:
        result = None
    if result is None or proc.returncode != 0:
        pytest.fail(f"client exited {proc.returncode}\nstdout:\n{proc.stdout}\n"
                    f"stderr:\n{proc.stderr}")
    if "skip" in result:
        pytest.skip(result["skip"])
    return result


# The child's common part: which library serves cuFile calls.
PRELUDE = r"""
import ctypes, json, os, sys
def finish(**kw):
    print(json.dumps(kw)); sys.exit(0)
shim = ctypes.CDLL(os.environ["LD_PRELOAD"].split(":")[0])
shim.cuFileUseCount.restype = ctypes.c_long
"""

KVIKIO_CLIENT = PRELUDE + r"""
try:
    import torch
except ImportError as e:
    finish(skip=f"torch not importable: {e}")
if not torch.cuda.is_available():
    finish(skip="no CUDA GPU")
try:
    import kvikio, kvikio.defaults
except Exception as e:  # ImportError, or libkvikio failing to load cuFile
    finish(skip=f"kvikio not importable: {e!r}")
try:
    import cupy as xp
    def rand(n, seed): return xp.random.RandomState(seed).randint(0, 256, n, dtype=xp.uint8)
    def empty(n): return xp.zeros(n, dtype=xp.uint8)
    def equal(a, b): return bool((a == b).all())
except ImportError:
    def rand(n, seed):
        g = torch.Generator(device="cuda"); g.manual_seed(seed)
        return torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda", generator=g)
    def empty(n): return torch.zeros(n, dtype=torch.uint8, device="cuda")
    def equal(a, b): return bool(torch.equal(a, b))

preferred = getattr(kvikio.defaults, "is_compat_mode_preferred", None)
assert preferred is None or not preferred(), "KVIKIO_COMPAT_MODE=OFF was not honoured"
path = os.path.join(os.environ["PHX_CUFILE_TEST_FILE_DIR"], f"phx-kvikio-{os.getpid()}.bin")
checked = []
try:
    for size in (4096, 1 << 20, (32 << 20) + 4097):
        src = rand(size, size)
        with kvikio.CuFile(path, "w") as f:
            assert f.write(src) == size                        # sync
        with kvikio.CuFile(path, "r") as f:
            dst = empty(size)
            assert f.read(dst) == size
            assert equal(src, dst), f"sync read differs at {size}"
            dst = empty(size)
            futures = [f.pread(dst[o:o + (size // 4)], file_offset=o)   # futures
                       for o in range(0, size - size % 4, size // 4)]
            tail = size - size % 4
            if tail < size:
                futures.append(f.pread(dst[tail:], file_offset=tail))
            assert sum(fu.get() for fu in futures) == size
            assert equal(src, dst), f"pread differs at {size}"
        with kvikio.CuFile(path, "r+") as f:
            half = empty(size // 2)
            assert f.pwrite(src[: size // 2], file_offset=size // 2).get() == size // 2
            assert f.pread(half, file_offset=size // 2).get() == size // 2
            assert equal(src[: size // 2], half), f"pwrite/pread differs at {size}"
        checked.append(size)
finally:
    if os.path.exists(path):
        os.unlink(path)
served = shim.cuFileUseCount()
mapped = [l.split()[-1] for l in open("/proc/self/maps") if "libcufile" in l]
assert served > 0, "no cuFile call reached the shim (cuFileUseCount() == 0)"
finish(sizes=checked, use_count=served, libcufile=sorted(set(mapped)),
       kvikio=kvikio.__version__)
"""

TORCH_CLIENT = PRELUDE + r"""
try:
    import torch, torch.cuda.gds as gds
except ImportError as e:
    finish(skip=f"torch or torch.cuda.gds not importable: {e}")
if not torch.cuda.is_available():
    finish(skip="no CUDA GPU")
path = os.path.join(os.environ["PHX_CUFILE_TEST_FILE_DIR"], f"phx-torch-{os.getpid()}.bin")
try:
    src1 = torch.randn(1024, device="cuda")
    src2 = torch.randn(3, 4099, device="cuda")           # not a multiple of 4 KiB
    try:
        f = gds.GdsFile(path, os.O_CREAT | os.O_RDWR)
    except RuntimeError as e:
        if "not supported on this platform" in str(e):
            finish(skip=f"this torch is built without cuFile: {e}")
        raise
    f.save_storage(src1.untyped_storage(), offset=0)
    f.save_storage(src2.untyped_storage(), offset=src1.nbytes)
    dst1 = torch.empty_like(src1)
    dst2 = torch.empty_like(src2)
    gds.gds_register_buffer(dst2.untyped_storage())      # registered and unregistered
    f.load_storage(dst1.untyped_storage(), offset=0)
    f.load_storage(dst2.untyped_storage(), offset=src1.nbytes)
    torch.cuda.synchronize()
    assert torch.equal(src1, dst1), "first tensor differs"
    assert torch.equal(src2, dst2), "second tensor differs"
    gds.gds_deregister_buffer(dst2.untyped_storage())
    f.deregister_handle()
    del f
    with open(path, "rb") as raw:                         # bytes as the host sees them
        on_disk = raw.read()
    assert on_disk[: src1.nbytes] == src1.cpu().numpy().tobytes()
finally:
    if os.path.exists(path):
        os.unlink(path)
mapped = [l.split()[-1] for l in open("/proc/self/maps") if "libcufile" in l]
finish(use_count=shim.cuFileUseCount(), libcufile=sorted(set(mapped)), torch=torch.__version__)
"""


def test_kvikio_through_the_shim(tmp_path):
    shim = shim_path()
    if not have("kvikio"):
        pytest.skip("kvikio not installed (pip install --no-deps .whl/*.whl)")
    if not have("torch") and not have("cupy"):
        pytest.skip("neither torch nor cupy for GPU buffers")
    result = run_client(KVIKIO_CLIENT, shim, scratch_dir(tmp_path),
                        {"KVIKIO_COMPAT_MODE": "OFF"})
    assert result["sizes"] == [4096, 1 << 20, (32 << 20) + 4097]
    assert str(shim) in result["libcufile"], result


def test_torch_gdsfile_through_the_shim(tmp_path):
    shim = shim_path()
    if not have("torch"):
        pytest.skip("torch not installed")
    result = run_client(TORCH_CLIENT, shim, scratch_dir(tmp_path))
    assert str(shim) in result["libcufile"], result
