"""Builds a HIP extension against the torch installed in the build environment, as torchvision
does: imports torch at build time, compiles for PYTORCH_ROCM_ARCH, links torch's library, and pins
torch to PYTORCH_VERSION when that is set (torchvision's setup.py does the same)."""

import json
import os
import shlex
import subprocess
from pathlib import Path

import torch  # the freshly built fixture torch, installed in the build venv
from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
TORCH_DIR = Path(torch.__file__).parent


def run(cmd):
    print("+", shlex.join(cmd), flush=True)
    subprocess.run(cmd, check=True)


class BuildWithHip(build_py):
    def run(self):
        super().run()
        env = os.environ
        rocm = env["ROCM_PATH"]
        clang = str(Path(env["HIP_CLANG_PATH"]) / "clang++")
        launcher = shlex.split(env.get("CMAKE_HIP_COMPILER_LAUNCHER", ""))
        targets = [t for t in env.get("PYTORCH_ROCM_ARCH", "").split(";") if t]
        pkg = Path(self.build_lib) / "torchvision"
        pkg.mkdir(parents=True, exist_ok=True)
        obj = HERE / "build" / "nms.o"
        obj.parent.mkdir(parents=True, exist_ok=True)
        run(
            [
                *launcher,
                clang,
                "-x",
                "hip",
                f"--rocm-path={rocm}",
                *(f"--offload-arch={t}" for t in targets),
                "-fPIC",
                "-O1",
                f"-I{TORCH_DIR / 'include'}",
                "-c",
                str(HERE / "csrc" / "nms.hip"),
                "-o",
                str(obj),
            ]
        )
        run(
            [
                clang,
                "-shared",
                str(obj),
                "-o",
                str(pkg / "_C.so"),
                f"-L{TORCH_DIR / 'lib'}",
                "-ltorch_fixture_hip",
                f"-L{rocm}/lib",
                "-lamdhip64",
                "-Wl,-rpath,$ORIGIN/../torch/lib",
            ]
        )
        seen = {"env": dict(env), "torch_version": torch.__version__, "torch_file": torch.__file__}
        (pkg / "_build_env.json").write_text(json.dumps(seen, indent=1, sort_keys=True))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


torch_dep = "torch"
if os.environ.get("PYTORCH_VERSION"):
    torch_dep += "==" + os.environ["PYTORCH_VERSION"]

setup(
    name="torchvision",
    version=os.environ.get("BUILD_VERSION") or (HERE / "version.txt").read_text().strip(),
    packages=["torchvision"],
    install_requires=[torch_dep],
    cmdclass={"build_py": BuildWithHip},
    distclass=BinaryDistribution,
    zip_safe=False,
)
