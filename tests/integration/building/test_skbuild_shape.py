"""torch 2.14's shape (scikit-build-core): GPU asserts reach CMake as ``-C cmake.define.X=ON``,
the route ``shapes`` gives that shape; the environment route of the setup.py shape
(``CMAKE_PROJECT_INCLUDE_BEFORE``) does not reach it at all.

Real parts: scikit-build-core, cmake and ninja from the package registry in a fresh venv, pip's
PEP 517 build with the command the plan makes (``shapes.pip_command``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rocm_build.building import shapes
from rocm_build.building.features import GPU_ASSERTS_CMAKE

FIXTURE = Path(__file__).parent / "skbuildproject"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def skbuild_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    venv = tmp_path_factory.mktemp("skbuild") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "-q", "scikit-build-core", "cmake", "ninja"]
    subprocess.run(pip, check=True)
    return python


def _asserts(python: Path, project: Path, env_add: dict[str, str]) -> str:
    shape = shapes.detect(project, "torch")
    assert shape.name == shapes.SCIKIT_BUILD_CORE
    env = {**os.environ, **env_add, "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}"}
    found = shapes.routes(shape, env, None)
    for key in found.drop:
        env.pop(key)
    wheels = project / "wheels"
    command = shapes.pip_command(python, wheels, found.config_settings)
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    (wheel,) = wheels.glob("skbdemo-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        return zf.read("skbdemo/asserts.txt").decode()


def test_gpu_asserts_reach_cmake_as_defines(tmp_path: Path, skbuild_python: Path) -> None:
    asked = {"CMAKE_PROJECT_INCLUDE_BEFORE": str(GPU_ASSERTS_CMAKE)}  # what the plan sets
    text = _asserts(skbuild_python, shutil.copytree(FIXTURE, tmp_path / "a"), asked)
    assert "USE_ROCM_KERNEL_ASSERT=ON" in text
    assert "TORCH_USE_HIP_DSA=ON" in text


def test_the_environment_route_never_reaches_scikit_build_core(
    tmp_path: Path, skbuild_python: Path
) -> None:
    """The control: the setup.py shape's route, kept as it is, changes nothing."""
    project = shutil.copytree(FIXTURE, tmp_path / "b")
    env = {**os.environ, "CMAKE_PROJECT_INCLUDE_BEFORE": str(GPU_ASSERTS_CMAKE)}
    env["PATH"] = f"{skbuild_python.parent}{os.pathsep}{env['PATH']}"
    command = shapes.pip_command(skbuild_python, project / "wheels", ())
    subprocess.run(command, cwd=project, env=env, check=True, capture_output=True)
    (wheel,) = (project / "wheels").glob("skbdemo-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        text = zf.read("skbdemo/asserts.txt").decode()
    assert "ROCM_FORCE_ENABLE_GPU_ASSERTS=OFF" in text
    assert "USE_ROCM_KERNEL_ASSERT=OFF" in text
