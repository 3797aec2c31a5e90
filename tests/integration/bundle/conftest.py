"""Fixtures for bundle/inspect tests: a HIP extension wheel compiled with the real ROCm tree's
clang, per-test hard-link copies of the tree (so it can be moved out of reach), venvs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .helpers import cc_shared, make_wheel

KERNEL = r"""
#include <hip/hip_runtime.h>

__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

extern "C" int device_count_status(int *count) {
    return (int)hipGetDeviceCount(count);
}

extern "C" int launch_status(void) {
    float *x = nullptr;
    hipError_t err = hipMalloc(&x, 16 * sizeof(float));
    if (err != hipSuccess) return (int)err;
    hipLaunchKernelGGL(scale, dim3(1), dim3(16), 0, 0, x, 2.0f, 16);
    return (int)hipGetLastError();
}
"""

INIT = """
import ctypes, os
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "_kern.so"))

def device_count_status():
    n = ctypes.c_int(-1)
    return _lib.device_count_status(ctypes.byref(n)), n.value
"""

ARCHS = ("gfx90a", "gfx1030")


def compile_hip(tree: Path, source: str, out: Path, archs: tuple[str, ...] = ARCHS) -> Path:
    src = out.with_suffix(".hip")
    src.write_text(source)
    cmd = [
        str(tree / "lib/llvm/bin/clang++"),
        "-x",
        "hip",
        *(f"--offload-arch={a}" for a in archs),
        "-fPIC",
        "-shared",
        "-O1",
        f"--rocm-path={tree}",
        f"-L{tree}/lib",
        "-lamdhip64",
        str(src),
        "-o",
        str(out),
    ]
    subprocess.run(cmd, check=True, env={"PATH": "/usr/bin:/bin", "HIP_PLATFORM": "amd"})
    return out


@pytest.fixture(scope="session")
def hip_ext_so(rocm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real HIP host library (gfx90a + gfx1030 device code) linked to libamdhip64.so.5."""
    out = tmp_path_factory.mktemp("hipext") / "_kern.so"
    return compile_hip(rocm_tree, KERNEL, out)


@pytest.fixture
def hip_ext_wheel(hip_ext_so: Path, tmp_path: Path) -> Path:
    return make_wheel(
        tmp_path / "dist",
        "hipext",
        "1.0.0",
        {"hipext/__init__.py": INIT.encode(), "hipext/_kern.so": hip_ext_so},
    )


@pytest.fixture
def rand_wheel(hip_ext_so: Path, rocm_tree: Path, tmp_path: Path) -> Path:
    """hipext (its own gfx90a + gfx1030 code) with a library that NEEDs ROCm's rocRAND
    (gfx803 ... gfx90a:xnack+/-, gfx1030)."""
    user = cc_shared(
        tmp_path / "build" / "_rand.so",
        "int rocrand_create_generator(void *, int);\n"
        "int use(void) { return rocrand_create_generator(0, 0); }\n",
        libs=[rocm_tree / "lib/librocrand.so.1"],
    )
    files: dict[str, bytes | Path] = {
        "hipext/__init__.py": INIT.encode(),
        "hipext/_kern.so": hip_ext_so,
        "hipext/_rand.so": user,
    }
    return make_wheel(tmp_path / "dist", "hipext", "1.0.0", files)


@pytest.fixture
def tree_copy(rocm_tree: Path, tmp_path: Path) -> Path:
    """A hard-link copy of the ROCm tree that a test may move away or change."""
    dest = tmp_path / "rocm"
    subprocess.run(["cp", "-al", str(rocm_tree), str(dest)], check=True)
    return dest


def make_venv(path: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def pip_install(python: Path, wheel: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            str(wheel),
        ],
        check=True,
    )


@pytest.fixture(scope="session")
def auditwheel() -> str:
    found = shutil.which("auditwheel", path=str(Path(sys.executable).parent))
    assert found, "auditwheel is a dependency of rocm-build"
    return found
