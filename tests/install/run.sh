#!/usr/bin/env bash
# Usage: tests/install/run.sh BUILD_DIR SCRATCH_DIR
# Proves that an installed libphoenix is usable: installs BUILD_DIR into
# SCRATCH_DIR/prefix, builds tests/install/consumer against it with
# find_package(phoenix) (shared and static targets) and with pkg-config
# (shared, and --static), and runs every binary.  SCRATCH_DIR is wiped first.
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 BUILD_DIR SCRATCH_DIR" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$1" && pwd)
scratch=$2
rm -rf "$scratch"
mkdir -p "$scratch"
scratch=$(cd "$scratch" && pwd)
prefix=$scratch/prefix

step() { printf '\n== install test: %s\n' "$*"; }

# A sanitized library needs the sanitizer runtime in the program too.
flags=()
cache=$build/CMakeCache.txt
if grep -q '^PHX_SANITIZE:BOOL=ON' "$cache"; then
  flags=("-fsanitize=address,undefined")
elif grep -q '^PHX_TSAN:BOOL=ON' "$cache"; then
  flags=(-fsanitize=thread)
fi

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$scratch/install.log"
pc_file=$(find "$prefix" -path '*/pkgconfig/phoenix.pc' -print -quit)
if [[ -z $pc_file ]]; then
  echo "install test: no pkgconfig/phoenix.pc under $prefix" >&2
  exit 1
fi

generator=()
if command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi

step "find_package(phoenix): configure and build the consumer"
cmake -S "$here/consumer" -B "$scratch/cmake" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_FLAGS="${flags[*]}" -DCMAKE_EXE_LINKER_FLAGS="${flags[*]}" >"$scratch/configure.log" ||
  { cat "$scratch/configure.log"; exit 1; }
cmake --build "$scratch/cmake"

# The shared binary must load the installed library, the static one none.
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
check_linkage() {
  local binary=$1 kind=$2
  if needed "$binary" | grep -q '^libphoenix\.so'; then
    [[ $kind == shared ]] || { echo "install test: $binary loads libphoenix.so" >&2; exit 1; }
  else
    [[ $kind == static ]] || { echo "install test: $binary does not load libphoenix.so" >&2; exit 1; }
  fi
}

step "run the find_package(phoenix) consumers"
check_linkage "$scratch/cmake/consumer_shared" shared
check_linkage "$scratch/cmake/consumer_static" static
"$scratch/cmake/consumer_shared" "$scratch"
"$scratch/cmake/consumer_static" "$scratch"

export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc_file")
libdir=$(pkg-config --variable=libdir phoenix)
read -ra pc_shared <<<"$(pkg-config --cflags --libs phoenix)"
# -l:libphoenix.a picks the archive even though libphoenix.so sits beside it.
read -ra pc_static <<<"$(pkg-config --cflags --libs --static phoenix |
  sed -E 's/(^| )-lphoenix( |$)/\1-l:libphoenix.a\2/')"

step "pkg-config (shared): g++ ${pc_shared[*]}"
g++ -std=c++20 "${flags[@]}" "$here/consumer/main.cpp" -o "$scratch/pkgconfig_shared" \
  "${pc_shared[@]}" -Wl,-rpath,"$libdir"
check_linkage "$scratch/pkgconfig_shared" shared
"$scratch/pkgconfig_shared" "$scratch"

step "pkg-config --static: g++ ${pc_static[*]}"
g++ -std=c++20 "${flags[@]}" "$here/consumer/main.cpp" -o "$scratch/pkgconfig_static" \
  "${pc_static[@]}"
check_linkage "$scratch/pkgconfig_static" static
"$scratch/pkgconfig_static" "$scratch"

# libcufile.so.0 (lib/cufile_shim), when built: in a folder of its own, with
# cuFile's soname, found by a program through LD_LIBRARY_PATH.
shim=$(find "$prefix" -path '*/phoenix-cufile/libcufile.so.0' -print -quit)
if grep -q '^PHX_BUILD_CUFILE_SHIM:BOOL=ON' "$cache" && ! grep -q '^PHX_STATIC_EXECUTABLES:BOOL=ON' "$cache"; then
  step "libcufile.so.0: $shim"
  [[ -n $shim ]] || { echo "install test: no phoenix-cufile/libcufile.so.0 under $prefix" >&2; exit 1; }
  readelf -d "$shim" | grep -q 'SONAME.*\[libcufile\.so\.0\]' ||
    { echo "install test: $shim lacks the soname libcufile.so.0" >&2; exit 1; }
  if [[ -x $build/tests/cufile_dlopen_test ]]; then
    LD_LIBRARY_PATH=$(dirname "$shim") "$build/tests/cufile_dlopen_test"
  fi

  # libphxfile.so (lib/phxfile) next to libphoenix, found by name the way
  # LMCache looks for it: ctypes.util.find_library("phxfile").
  phxfile=$(find "$prefix" -name 'libphxfile.so' -print -quit)
  step "libphxfile.so: $phxfile"
  [[ -n $phxfile ]] || { echo "install test: no libphxfile.so under $prefix" >&2; exit 1; }
  readelf -d "$phxfile" | grep -q 'SONAME.*\[libphxfile\.so\.0\]' ||
    { echo "install test: $phxfile lacks the soname libphxfile.so.0" >&2; exit 1; }
  # By name only: a sanitized build's library cannot be loaded into Python.
  found=$(LD_LIBRARY_PATH=$(dirname "$phxfile") python3 -c \
    'import ctypes.util; print(ctypes.util.find_library("phxfile"))')
  [[ $found == libphxfile.so.0 ]] ||
    { echo "install test: find_library(\"phxfile\") gave '$found'" >&2; exit 1; }
  nm -D --defined-only "$phxfile" | grep -q ' T phxFileReadAsync$' ||
    { echo "install test: $phxfile does not export phxFileReadAsync" >&2; exit 1; }
fi

step "passed"
