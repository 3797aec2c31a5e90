"""Build the GPU extension with the ROCm tree's clang from the hipified sources (csrc/*.hip).

Environment: ROCM_PATH (or ROCM_HOME) names the ROCm tree; PYTORCH_ROCM_ARCH the gfx targets
(';' separated); HIP_CLANG_PATH the folder holding clang++ (default: the tree's lib/llvm/bin);
VECADD_VERSION the package version.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class HipExtension(Extension):
    pass


class BuildHip(build_ext):
    def build_extension(self, ext: Extension) -> None:
        rocm = Path(os.environ.get("ROCM_PATH") or os.environ.get("ROCM_HOME") or "/opt/rocm")
        clang_dir = os.environ.get("HIP_CLANG_PATH")
        candidates = [Path(clang_dir)] if clang_dir else []
        candidates += [rocm / "lib" / "llvm" / "bin", rocm / "llvm" / "bin"]
        clang = next((d / "clang++" for d in candidates if (d / "clang++").exists()), None)
        if clang is None:
            raise SystemExit(f"vecadd: no clang++ in {', '.join(map(str, candidates))}")
        archs = [
            a for a in os.environ.get("PYTORCH_ROCM_ARCH", "").replace(",", ";").split(";") if a
        ]
        if not archs:
            raise SystemExit(
                "vecadd: set PYTORCH_ROCM_ARCH to the gfx targets (e.g. gfx90a;gfx1030)"
            )
        cuda = [s for s in ext.sources if s.endswith(".cu")]
        if cuda:
            raise SystemExit(f"vecadd: {cuda} are CUDA sources; run tools/hipify.py first")
        out = Path(self.get_ext_fullpath(ext.name))
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            str(clang),
            "-x",
            "hip",
            *(f"--offload-arch={a}" for a in archs),
            f"--rocm-path={rocm}",
            "-O2",
            "-fPIC",
            "-shared",
            "-std=c++17",
            f"-I{sysconfig.get_paths()['include']}",
            *ext.sources,
            f"-L{rocm / 'lib'}",
            "-lamdhip64",
            "-o",
            str(out),
        ]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)


# The hipified source once tools/hipify.py ran; the CUDA original otherwise (refused above).
SOURCE = "csrc/vecadd.hip" if Path("csrc/vecadd.hip").exists() else "csrc/vecadd.cu"

setup(
    version=os.environ.get("VECADD_VERSION", "1.0.0"),
    packages=["vecadd"],
    ext_modules=[HipExtension("vecadd._vecadd", sources=[SOURCE])],
    cmdclass={"build_ext": BuildHip},
)
