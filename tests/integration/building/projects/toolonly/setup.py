"""Shaped like torchvision: no [build-system] table in pyproject.toml, and a C extension built by
setuptools' build_ext that links HIP device code compiled for PYTORCH_ROCM_ARCH with the ROCm
tree's clang (torch.utils.cpp_extension does the same through its own build_ext)."""

import os
import shlex
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


class BuildExtWithHip(build_ext):
    def build_extensions(self):
        env = os.environ
        rocm = env["ROCM_PATH"]
        clang = str(Path(env["HIP_CLANG_PATH"]) / "clang++")
        targets = [t for t in env.get("PYTORCH_ROCM_ARCH", "").split(";") if t]
        obj = Path(self.build_temp).resolve() / "kernels.o"
        obj.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            clang,
            "-x",
            "hip",
            f"--rocm-path={rocm}",
            *(f"--offload-arch={t}" for t in targets),
            "-fPIC",
            "-O1",
            "-c",
            str(HERE / "csrc" / "kernels.hip"),
            "-o",
            str(obj),
        ]
        print("+", shlex.join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        for ext in self.extensions:
            ext.extra_objects.append(str(obj))
            ext.library_dirs.append(f"{rocm}/lib")
            ext.libraries.append("amdhip64")
        super().build_extensions()


setup(
    name="toolonly",
    version=(HERE / "version.txt").read_text().strip(),
    packages=["toolonly"],
    ext_modules=[Extension("toolonly._C", [str(Path("csrc") / "module.c")])],
    cmdclass={"build_ext": BuildExtWithHip},
    zip_safe=False,
)
