"""Builds a host-only extension against the torch installed in the build environment, as the real
torchaudio >= 2.9 does on ROCm (its device sources are built only when CUDA is on): imports torch
at build time, links torch's library, and pins torch to PYTORCH_VERSION when that is set. The
wheel carries no HIP code objects and no dependency on libamdhip64."""

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


class BuildHostOnly(build_py):
    def run(self):
        super().run()
        env = os.environ
        clang = str(Path(env["HIP_CLANG_PATH"]) / "clang++")
        launcher = shlex.split(env.get("CMAKE_CXX_COMPILER_LAUNCHER", ""))
        pkg = Path(self.build_lib) / "torchaudio" / "lib"
        pkg.mkdir(parents=True, exist_ok=True)
        obj = HERE / "build" / "lfilter.o"
        obj.parent.mkdir(parents=True, exist_ok=True)
        include = f"-I{TORCH_DIR / 'include'}"
        source = str(HERE / "csrc" / "lfilter.cpp")
        run([*launcher, clang, "-fPIC", "-O1", include, "-c", source, "-o", str(obj)])
        run(
            [
                clang,
                "-shared",
                str(obj),
                "-o",
                str(pkg / "_torchaudio.so"),
                f"-L{TORCH_DIR / 'lib'}",
                "-ltorch_fixture_hip",
                "-Wl,-rpath,$ORIGIN/../../torch/lib",
            ]
        )
        seen = {"env": dict(env), "torch_version": torch.__version__}
        (pkg.parent / "_build_env.json").write_text(json.dumps(seen, indent=1, sort_keys=True))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


torch_dep = "torch"
if os.environ.get("PYTORCH_VERSION"):
    torch_dep += "==" + os.environ["PYTORCH_VERSION"]

setup(
    name="torchaudio",
    version=os.environ.get("BUILD_VERSION") or (HERE / "version.txt").read_text().strip(),
    packages=["torchaudio"],
    install_requires=[torch_dep],
    cmdclass={"build_py": BuildHostOnly},
    distclass=BinaryDistribution,
    zip_safe=False,
)
