"""torch 2.13's shape in small: setup.py runs CMake (whose CMakeLists.txt enables HIP), handing it
every BUILD_*/USE_*/CMAKE_* variable of the environment as -DNAME=VALUE, as torch's setup.py does.
The scikit-build-core shape (2.14) builds the same CMake project from skbuild-pyproject.toml."""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
FORWARDED = ("BUILD_", "USE_", "CMAKE_")


class BuildWithCMake(build_py):
    def run(self) -> None:
        build = HERE / "build" / "cmake"
        defines = [f"-D{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(FORWARDED)]
        configure = ["cmake", "-G", "Ninja", "-S", str(HERE), "-B", str(build)]
        subprocess.run([*configure, "-DCMAKE_BUILD_TYPE=Release", *defines], check=True)
        subprocess.run(["cmake", "--build", str(build)], check=True)
        super().run()
        dest = Path(self.build_lib) / "torch" / "lib"
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build / "libhipshape_kernels.so", dest)


class PlatformDistribution(Distribution):
    def has_ext_modules(self) -> bool:  # a platform wheel: it carries a shared library
        return True


setup(
    name="torch",
    version="0.1.0",
    packages=["torch"],
    cmdclass={"build_py": BuildWithCMake},
    distclass=PlatformDistribution,
)
