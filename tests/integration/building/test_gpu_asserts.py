"""features.gpu_asserts reaches torch's CMake: the build plan for the fixture torch names the
shipped gpu_asserts.cmake in CMAKE_PROJECT_INCLUDE_BEFORE (a variable torch's setup.py forwards to
CMake as -D, where ROCM_FORCE_ENABLE_GPU_ASSERTS itself is not forwarded), and a real CMake run of
a project that reads the switch where torch's cmake/Dependencies.cmake does (after project())
sees it on with that -D and off without it. A user's own CMAKE_PROJECT_INCLUDE_BEFORE is refused
before anything is built."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import Workspace

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake"),
]

READS_THE_SWITCH = """cmake_minimum_required(VERSION 3.18)
project(reads_the_switch NONE)
if(ROCM_FORCE_ENABLE_GPU_ASSERTS)
  message(STATUS "kernel asserts: on")
else()
  message(STATUS "kernel asserts: off")
endif()
"""


def _configure(tmp_path: Path, name: str, *defines: str) -> str:
    src, build = tmp_path / name / "src", tmp_path / name / "build"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(READS_THE_SWITCH)
    res = subprocess.run(
        ["cmake", *defines, "-S", str(src), "-B", str(build)],
        capture_output=True,
        text=True,
        check=True,
    )
    return res.stdout


def _torch_env(workspace: Workspace, env: dict[str, str]) -> dict[str, str]:
    dry = workspace.build("torch", "--dry-run", as_json=True, env=env)
    assert dry.returncode == 0, dry.stderr
    (step,) = json.loads(dry.stdout)["projects"]
    got: dict[str, str] = step["env"]
    return got


def test_gpu_asserts_reach_torchs_cmake(workspace: Workspace, tmp_path: Path) -> None:
    on = _torch_env(workspace, {"ROCM_BUILD_FEATURES_GPU_ASSERTS": "1"})
    include = on["CMAKE_PROJECT_INCLUDE_BEFORE"]
    assert Path(include).is_file(), include
    # torch's setup.py hands every CMAKE_* variable of its environment to CMake as -DNAME=VALUE.
    out = _configure(tmp_path, "on", f"-DCMAKE_PROJECT_INCLUDE_BEFORE={include}")
    assert "kernel asserts: on" in out, out
    off = _torch_env(workspace, {})
    assert "CMAKE_PROJECT_INCLUDE_BEFORE" not in off  # torch's default: asserts off on ROCm
    assert "kernel asserts: off" in _configure(tmp_path, "off"), out


def test_a_users_own_project_include_is_refused(workspace: Workspace, tmp_path: Path) -> None:
    mine = tmp_path / "mine.cmake"
    mine.write_text("")
    env = {"ROCM_BUILD_FEATURES_GPU_ASSERTS": "1", "CMAKE_PROJECT_INCLUDE_BEFORE": str(mine)}
    res = workspace.build("torch", env=env)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert "features.gpu_asserts needs CMAKE_PROJECT_INCLUDE_BEFORE" in res.stderr, res.stderr
    assert not (workspace.root / ".rocm-build" / "logs" / "build-torch.log").exists()


def test_inspect_shows_what_the_fixture_torch_was_built_with(workspace: Workspace) -> None:
    # The fixture writes torch/include/caffe2/core/macros.h and torch/version.py as torch's
    # build does, from what its build saw (gpu asserts through the CMake include file).
    res = workspace.build("torch", env={"ROCM_BUILD_FEATURES_GPU_ASSERTS": "1"})
    assert res.returncode == 0, res.stderr
    wheel = workspace.wheel("torch")
    got = workspace.run_cli(["--json", "inspect", str(wheel)], cwd=workspace.root)
    assert got.returncode == 0, got.stderr
    features = json.loads(got.stdout)["build_features"]
    assert features["gpu_asserts"] is True
    assert features["rocm"] is True
    assert features["hip"] == features["rocm_version"]
    assert features["hip"].startswith("5.2"), features  # the Debian tree's ROCm
    assert features["flash_attention"] is False  # auto, and no aotriton at hand
    text = workspace.run_cli(["inspect", str(wheel)], cwd=workspace.root)
    assert "GPU kernel asserts: on" in text.stdout, text.stdout
    assert "flash attention (aotriton): off" in text.stdout, text.stdout
