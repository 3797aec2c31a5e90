"""Triton built beside torch against the real ROCm 5.2.3 tree: the Triton-shaped fixture (a real
setup.py with a real C extension that versions itself as Triton does) first, then the fixture
torch told to require exactly the wheel just built. No GPU is needed to build."""

from __future__ import annotations

import json
from email.parser import HeaderParser
from pathlib import Path

import pytest

from .conftest import Workspace, add_triton, read_member, shared_lib

pytestmark = pytest.mark.slow

MARKER = 'platform_system == "Linux"'


def _requires(wheel: Path) -> list[str]:
    meta = HeaderParser().parsestr(read_member(wheel, ".dist-info/METADATA").decode())
    return meta.get_all("Requires-Dist") or []


def test_triton_first_then_torch_requires_exactly_that_wheel(
    workspace: Workspace, tmp_path: Path
) -> None:
    commits = add_triton(workspace, tmp_path)
    # flash attention needs aotriton: a pre-fetched one in the cache, so the build never
    # downloads it (without one, auto turns attention off: see test_real_shapes)
    cache = tmp_path / "xdg-cache"
    shared_lib(
        cache / "rocm-build" / "aotriton" / "rocm5.2.3" / "lib" / "libaotriton_v2.so.0.9",
        "libaotriton_v2.so.0",
    )
    user = {"PYTORCH_EXTRA_INSTALL_REQUIREMENTS": "numpy>=1.0", "XDG_CACHE_HOME": str(cache)}
    dry = workspace.build("torch", "triton", "--dry-run", as_json=True, env=user)
    assert dry.returncode == 0, dry.stderr
    steps = json.loads(dry.stdout)["projects"]
    assert [s["name"] for s in steps] == ["triton", "torch"]
    # at torch's CI pin the ROCm label is one more segment after Triton's +git<sha>
    assert steps[0]["env"]["TRITON_WHEEL_VERSION_SUFFIX"] == ".rocm5.2"
    assert steps[0]["env"]["TRITON_APPEND_CMAKE_ARGS"] == (
        "-DCMAKE_FIND_USE_CMAKE_ENVIRONMENT_PATH=FALSE"
    )
    # gfx90a requested and aotriton at hand: flash attention on by torch's own default
    # (features.flash_attention = auto writes nothing).
    assert "USE_FLASH_ATTENTION" not in steps[1]["env"]
    assert "USE_MEM_EFF_ATTENTION" not in steps[1]["env"]
    flash = next(f for f in steps[1]["features"] if f["name"] == "flash_attention")
    assert flash["on"]
    assert steps[1]["env"]["PYTORCH_EXTRA_INSTALL_REQUIREMENTS"] == (
        f"numpy>=1.0|triton==<version of triton>; {MARKER}"
    )

    # The user's own extra requirement stays, before Triton's.
    res = workspace.build("torch", "triton", env=user)
    assert res.returncode == 0, res.stderr
    version = f"3.5.0+git{commits['pin'][:8]}.rocm5.2"  # Triton's own, read from its wheel
    triton_whl = workspace.wheel("triton")
    assert triton_whl.name.startswith(f"triton-{version}-")
    seen = read_member(triton_whl, "triton/_build_env.txt").decode()
    assert "TRITON_APPEND_CMAKE_ARGS=-DCMAKE_FIND_USE_CMAKE_ENVIRONMENT_PATH=FALSE" in seen
    requires = _requires(workspace.wheel("torch"))
    assert f"triton=={version}; {MARKER}" in requires, requires
    assert "numpy>=1.0" in requires, requires
    report = workspace.report()["projects"]
    assert report["triton"]["version"] == version  # type: ignore[index]


def test_a_torch_wheel_without_the_triton_requirement_fails_the_check(
    workspace: Workspace, tmp_path: Path
) -> None:
    add_triton(workspace, tmp_path)
    workspace.configure(
        torch='build_env = ["PYTORCH_BUILD_NUMBER=1", "FIXTURE_IGNORE_EXTRA_REQUIREMENTS=1"]'
    )
    res = workspace.build("triton", "torch")
    assert res.returncode == 9, res.stderr
    assert "Traceback" not in res.stderr
    assert "wheel does not require the Triton built in this run" in res.stderr, res.stderr
    assert not list(workspace.wheels.glob("torch-*.whl"))


def test_a_release_branch_gets_the_local_label_not_a_second_plus(
    workspace: Workspace, tmp_path: Path
) -> None:
    add_triton(workspace, tmp_path, release=True)
    res = workspace.build("triton")
    assert res.returncode == 0, res.stderr
    assert workspace.wheel("triton").name.startswith("triton-3.5.0+rocm5.2-")


def test_an_older_branch_builds_from_its_python_folder(
    workspace: Workspace, tmp_path: Path
) -> None:
    """ROCm's older Triton branches keep setup.py and requirements.txt under python/."""
    commits = add_triton(workspace, tmp_path, layout="python")
    dry = workspace.build("triton", "--dry-run", as_json=True)
    assert dry.returncode == 0, dry.stderr
    (step,) = json.loads(dry.stdout)["projects"]
    src = workspace.root / "src" / "triton"
    assert step["build_dir"] == str(src / "python")
    assert step["requirement_files"] == [str(src / "python" / "requirements.txt")]
    res = workspace.build("triton")
    assert res.returncode == 0, res.stderr
    version = f"3.5.0+git{commits['pin'][:8]}.rocm5.2"
    assert workspace.wheel("triton").name.startswith(f"triton-{version}-")
    logs = workspace.root / ".rocm-build" / "logs"
    assert "pip>=1.0" in (logs / "requirements-triton.txt").read_text()


def test_flash_attention_on_without_aotriton_stops_before_building(workspace: Workspace) -> None:
    # Triton in the run is no longer asked for (PyTorch builds attention on by default); an
    # aotriton at hand still is, so the build does not download it mid-build.
    env = {"ROCM_BUILD_FEATURES_FLASH_ATTENTION": "on"}
    res = workspace.build("torch", env=env)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert "features.flash_attention = on needs aotriton" in res.stderr, res.stderr
    assert not (workspace.root / ".rocm-build" / "logs" / "build-torch.log").exists()
    dry = workspace.build("torch", "--dry-run", as_json=True)
    assert dry.returncode == 0, dry.stderr
    (step,) = json.loads(dry.stdout)["projects"]
    assert step["env"]["USE_FLASH_ATTENTION"] == "0"  # auto, and no aotriton at hand


def test_flash_attention_without_aotriton(workspace: Workspace, tmp_path: Path) -> None:
    """Triton is built and gfx90a requested, but no aotriton is pre-fetched: auto turns attention
    off (the build would download aotriton), on stops before building, and a user's own
    USE_FLASH_ATTENTION wins over the feature (its download is announced)."""
    add_triton(workspace, tmp_path)
    empty = {"XDG_CACHE_HOME": str(tmp_path / "empty-cache")}
    dry = workspace.build("torch", "triton", "--dry-run", as_json=True, env=empty)
    assert dry.returncode == 0, dry.stderr
    torch = json.loads(dry.stdout)["projects"][1]
    assert torch["env"]["USE_FLASH_ATTENTION"] == "0"
    assert torch["env"]["USE_MEM_EFF_ATTENTION"] == "0"
    on = {**empty, "ROCM_BUILD_FEATURES_FLASH_ATTENTION": "on"}
    res = workspace.build("torch", "triton", "--dry-run", env=on)
    assert res.returncode == 2, res.stderr
    assert "features.flash_attention = on needs aotriton" in res.stderr
    assert "Traceback" not in res.stderr
    mine = {**empty, "USE_FLASH_ATTENTION": "1", "USE_MEM_EFF_ATTENTION": "1"}
    res = workspace.build("torch", "triton", "--dry-run", as_json=True, env=mine)
    assert res.returncode == 0, res.stderr
    assert "torch's CMake downloads aotriton during the build" in res.stderr
    torch = json.loads(res.stdout)["projects"][1]
    assert "USE_FLASH_ATTENTION" not in torch["env"]  # the user's, not rocm-build's
