#!/usr/bin/env bash
# Usage: tests/install/pip.sh SOURCE_DIR SCRATCH_DIR [PYTHON]
# The Python package the way docs/model-loading.md installs it without a
# build tree: `pip install ./python` into a fresh virtual environment, with
# no network and no build isolation (setuptools, wheel, pybind11 and numpy
# from the system, as on a Debian machine with scripts/setup's packages).
# Then, from a folder outside the sources, the installed package loads a
# checkpoint and every tensor must equal the bytes written.  The sources are
# copied first: setuptools builds in the source tree it is given.
#
# Nothing is fetched: a machine that lacks a build dependency (a GPU machine
# without network or dev packages) skips, exit 77, naming what is missing.
# Packages that scripts/offline-bundle unpacked into SOURCE_DIR/.deps/root
# count where the system has none, as in scripts/gpu-check.
set -euo pipefail

if (($# < 2 || $# > 3)); then
  echo "usage: $0 SOURCE_DIR SCRATCH_DIR [PYTHON]" >&2
  exit 2
fi
source_dir=$(cd "$1" && pwd)
scratch=$2
python=${3:-python3}
rm -rf "$scratch"
mkdir -p "$scratch/src" "$scratch/run"
scratch=$(cd "$scratch" && pwd)

# The tree without build outputs, git data or the rig's downloads.
tar -C "$source_dir" --exclude=./build --exclude='./build-*' --exclude=./.git \
  --exclude=./out --exclude=./.deps --exclude=./.cache -cf - . | tar -C "$scratch/src" -xf -

if [[ -d $source_dir/.deps/root ]] &&
  ! env -u PKG_CONFIG_PATH -u PKG_CONFIG_SYSROOT_DIR pkg-config --exists liburing 2>/dev/null; then
  deps=$source_dir/.deps/root
  export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig PKG_CONFIG_SYSROOT_DIR=$deps
  export CMAKE_PREFIX_PATH=$deps/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi

# What the offline build needs, each looked for where the build looks.
missing=()
"$python" -c 'import setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 61)' \
  2>/dev/null || missing+=("setuptools>=61 for $python")
"$python" -c 'import wheel' 2>/dev/null || missing+=("wheel for $python")
"$python" -c 'import numpy' 2>/dev/null || missing+=("numpy for $python")
command -v cmake >/dev/null || missing+=("cmake")
command -v c++ >/dev/null || missing+=("a C++ compiler (c++)")
pkg-config --exists 'liburing >= 2.0' 2>/dev/null || missing+=("liburing >= 2.0 (pkg-config; Debian liburing-dev)")
prefixes=(/usr /usr/local)
IFS=: read -r -a extra <<<"${CMAKE_PREFIX_PATH:-}"
prefixes+=("${extra[@]}")
found() {  # found RELATIVE-PATH...: whether one lies under any prefix
  local prefix rel
  for prefix in "${prefixes[@]}"; do
    for rel in "$@"; do
      [[ -n $prefix && -e $prefix/$rel ]] && return 0
    done
  done
  return 1
}
pkg-config --exists nlohmann_json 2>/dev/null || found include/nlohmann/json.hpp ||
  missing+=("nlohmann-json (Debian nlohmann-json3-dev)")
found include/dlpack/dlpack.h || missing+=("dlpack/dlpack.h (Debian libdlpack-dev)")
"$python" -m pybind11 --cmakedir >/dev/null 2>&1 ||
  found share/cmake/pybind11/pybind11Config.cmake lib/cmake/pybind11/pybind11Config.cmake ||
  missing+=("pybind11 (pip's for $python, or Debian pybind11-dev)")
if ((${#missing[@]} > 0)); then
  printf 'SKIP: pip install ./python offline needs, and this machine lacks:\n' >&2
  printf '  %s\n' "${missing[@]}" >&2
  exit 77
fi

"$python" -m venv --system-site-packages "$scratch/venv"
# Where PYTHON is itself a virtual environment (the H200's torch), the new
# one sees the base interpreter's packages only: a .pth adds PYTHON's own,
# after the new environment's (the installed phoenix_gds still comes first).
"$python" -c 'import site; print("\n".join(site.getsitepackages()))' \
  >"$("$scratch/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/outer-environment.pth"
PIP_DISABLE_PIP_VERSION_CHECK=1 "$scratch/venv/bin/pip" install --no-build-isolation \
  --no-index --no-deps --quiet "$scratch/src/python"

cd "$scratch/run"
"$scratch/venv/bin/python" - "$scratch/venv" <<'PY'
import json
import pathlib
import struct
import sys

import numpy
import phoenix_gds as phx

venv = pathlib.Path(sys.argv[1]).resolve()
where = pathlib.Path(phx.__file__).resolve()
assert venv in where.parents, f"phoenix_gds imported from {where}, not the environment {venv}"

rng = numpy.random.default_rng(7)
tensors = {"embed": rng.standard_normal((33, 7)).astype(numpy.float32),
           "bias": rng.integers(-100, 100, 5, dtype=numpy.int16),
           "mask": rng.integers(0, 2, 11, dtype=numpy.uint8)}
codes = {numpy.float32: "F32", numpy.int16: "I16", numpy.uint8: "U8"}
header, data = {}, b""
for name, t in tensors.items():
    header[name] = {"dtype": codes[t.dtype.type], "shape": list(t.shape),
                    "data_offsets": [len(data), len(data) + t.nbytes]}
    data += t.tobytes()
text = json.dumps(header).encode()
pathlib.Path("model.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + data)

got = phx.load_safetensors("model.safetensors", device="cpu", framework="numpy")
assert set(got) == set(tensors), sorted(got)
for name, t in tensors.items():
    g = numpy.asarray(got[name])
    assert g.dtype == t.dtype and g.shape == t.shape, (name, g.dtype, g.shape)
    assert g.tobytes() == t.tobytes(), f"{name} differs"
# The distribution is phoenix-gds, with its type information, and the
# I/O API works from the installed package too.
import importlib.metadata
assert importlib.metadata.version("phoenix-gds") == phx.__version__
for typed in ("py.typed", "_phoenix.pyi"):
    assert (where.parent / typed).is_file(), f"{typed} not installed"
blob = rng.integers(0, 256, 10_000, dtype=numpy.uint8)
with phx.File("blob.bin", "w") as f, phx.Device("cpu") as dev:
    with dev.register(blob):
        assert f.pwrite(blob) == blob.size
        back = numpy.zeros(9_000, dtype=numpy.uint8)
        assert f.pread(back, file_offset=999) == 9_000
        assert back.tobytes() == blob[999:9_999].tobytes()
print(f"pip install: phoenix_gds {phx.__version__} from {where.parent}: "
      f"{len(tensors)} tensors equal, byte for byte")
PY
