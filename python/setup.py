# SPDX-License-Identifier: MIT
"""pip install ./python (from the repository; --no-build-isolation on
machines without network): builds the _phoenix extension with the
repository's CMake build (libphoenix statically linked) and installs the
phoenix_gds package (distribution phoenix-gds: the name phoenix belongs to
arize-phoenix, which many machines have)."""

import os
import pathlib
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def version() -> str:
    text = (ROOT / "CMakeLists.txt").read_text(encoding="utf-8")
    return re.search(r"project\(phoenix VERSION ([0-9.]+)", text).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = pathlib.Path(self.build_temp).resolve() / "cmake"
        args = [f"-DPython_EXECUTABLE={sys.executable}", "-DPHX_BUILD_PYTHON=ON",
                "-DPHX_BUILD_TESTS=OFF", "-DPHX_BUILD_TOOLS=OFF", "-DPHX_BUILD_EXAMPLES=OFF",
                "-DPHX_WERROR=OFF", "-DCMAKE_BUILD_TYPE=Release"]
        try:
            import pybind11

            args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        except ImportError:
            pass  # the system's (Debian pybind11-dev)
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build), *args], check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "_phoenix", "-j",
                        str(os.cpu_count() or 2)], check=True)
        built = next((build / "python" / "phoenix_gds").glob("_phoenix*.so"))
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)


setup(
    name="phoenix-gds",
    version=version(),
    description="libphoenix: GPU Direct Storage reads and writes, and safetensors checkpoints "
                "straight into GPU memory (DLPack)",
    packages=["phoenix_gds"],
    package_data={"phoenix_gds": ["py.typed", "_phoenix.pyi"]},
    ext_modules=[Extension("phoenix_gds._phoenix", sources=[])],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    license="MIT",
    zip_safe=False,
)
