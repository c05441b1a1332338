#!/usr/bin/env python3
"""Compiles the README's C and C++ examples against the public headers.

Usage: readme_examples_test.py README CC CXX LIBPHOENIX INCLUDE_DIR... [--cuda-include DIR]

Every fenced block marked ```c or ```cpp is written to a file and compiled
with warnings as errors; a block with a main() is also linked against
LIBPHOENIX.  A block that includes a CUDA header is skipped (and says so)
when no CUDA include directory is given.  Exits 0 when every block that
could be compiled compiled, 77 (skip) when none could, 1 otherwise.
"""
import pathlib
import re
import subprocess
import sys
import tempfile

FENCE = re.compile(r"^```(c|cpp)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def main(argv: list[str]) -> int:
    cuda_include = None
    if "--cuda-include" in argv:
        i = argv.index("--cuda-include")
        cuda_include = argv[i + 1]
        del argv[i:i + 2]
    if len(argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    readme, cc, cxx, library = pathlib.Path(argv[1]), argv[2], argv[3], argv[4]
    includes = [f"-I{d}" for d in argv[5:]]
    blocks = FENCE.findall(readme.read_text())
    if not blocks:
        print(f"{readme}: no ```c or ```cpp blocks", file=sys.stderr)
        return 1
    compiled = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for n, (lang, code) in enumerate(blocks, 1):
            name = f"{readme.name} block {n} ({lang})"
            flags = list(includes)
            if re.search(r"#include <cuda", code):
                if cuda_include is None:
                    print(f"SKIP {name}: includes a CUDA header, built without CUDA")
                    continue
                flags.append(f"-I{cuda_include}")
            src = pathlib.Path(tmp) / f"block{n}.{lang}"
            src.write_text(code)
            if lang == "c":
                cmd = [cc, "-std=c11"]
            else:
                cmd = [cxx, "-std=c++20"]
            cmd += ["-Wall", "-Wextra", "-Werror", *flags, str(src)]
            if re.search(r"\bint\s+main\s*\(", code):
                cmd += ["-o", str(src.with_suffix(".out")), library]
            else:
                cmd += ["-c", "-o", str(src.with_suffix(".o"))]
            result = subprocess.run(cmd, capture_output=True, text=True)
            if result.returncode == 0:
                print(f"ok   {name}")
                compiled += 1
            else:
                print(f"FAIL {name}: {' '.join(cmd)}\n{result.stderr}")
                failed += 1
    if failed:
        return 1
    return 0 if compiled else 77


if __name__ == "__main__":
    sys.exit(main(sys.argv))
