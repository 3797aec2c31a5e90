"""rocm-build build against the real ROCm 5.2.3 tree: real HIP code compiled by its clang for two
targets, real wheels, a real build venv. No GPU is needed to build; nothing here fakes one."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from rocm_build.binary import elf
from tests.conftest import GIT_IDENTITY

from .conftest import Workspace, extract_member, read_member, requires_dist

pytestmark = pytest.mark.slow

USER_ENV = {
    # A user's own settings that must be extended, and stray ones that must not leak in.
    "CMAKE_PREFIX_PATH": "/my/prefix",
    "LD_LIBRARY_PATH": "/my/lib",
    "CXXFLAGS": "-DUSER_FLAG=1",
    "LDFLAGS": "-L/my/ldpath",
    "ROCM_PATH": "/nonexistent/other-rocm",
    "HIP_VISIBLE_DEVICES": "0",
    "CUDA_HOME": "/usr/local/cuda",
}


def test_torch_then_extension_for_two_targets(workspace: Workspace, tmp_path: Path) -> None:
    result = workspace.build("torch", "torchvision", env=USER_ENV)
    assert result.returncode == 0, result.stderr
    tree = str(workspace.tree.resolve())

    torch_whl = workspace.wheel("torch")
    assert torch_whl.name.startswith("torch-2.9.1+rocm5.2-")
    lib = extract_member(torch_whl, "torch/lib/libtorch_fixture_hip.so", tmp_path)
    assert elf.offload_targets(lib) == {"gfx90a", "gfx1030"}
    assert "libamdhip64.so.5" in elf.read_elf(lib).needed

    seen = json.loads(read_member(torch_whl, "torch/_build_env.json"))
    assert seen["ROCM_PATH"] == seen["ROCM_HOME"] == seen["HIP_PATH"] == tree
    assert seen["HIP_CLANG_PATH"] == f"{tree}/lib/llvm/bin"
    assert seen["HIP_DEVICE_LIB_PATH"] == f"{tree}/lib/llvm/amdgcn/bitcode"
    assert seen["HIP_PLATFORM"] == "amd"
    assert seen["PYTORCH_ROCM_ARCH"] == "gfx90a;gfx1030"
    assert (seen["USE_ROCM"], seen["USE_CUDA"], seen["FORCE_CUDA"]) == ("1", "0", "1")
    assert seen["BUILD_TEST"] == "0"
    assert seen["MAX_JOBS"] == seen["CMAKE_BUILD_PARALLEL_LEVEL"]
    assert int(seen["MAX_JOBS"]) >= 1
    assert seen["PYTORCH_BUILD_VERSION"] == "2.9.1+rocm5.2"
    assert seen["PYTORCH_BUILD_NUMBER"] == "1"
    assert seen["CMAKE_PREFIX_PATH"] == f"{tree}:/my/prefix"
    assert seen["LD_LIBRARY_PATH"].endswith(":/my/lib")
    assert seen["CXXFLAGS"].startswith("-DUSER_FLAG=1 ")
    assert seen["LDFLAGS"].startswith("-L/my/ldpath ")
    assert seen["PATH"].split(":")[:2] == [str(workspace.venv / "bin"), f"{tree}/bin"]
    assert "HIP_VISIBLE_DEVICES" not in seen
    assert "CUDA_HOME" not in seen

    vision_whl = workspace.wheel("torchvision")
    assert vision_whl.name.startswith("torchvision-0.24.0+rocm5.2-")
    ext = extract_member(vision_whl, "torchvision/_C.so", tmp_path)
    assert elf.offload_targets(ext) == {"gfx90a", "gfx1030"}
    assert {"libamdhip64.so.5", "libtorch_fixture_hip.so"} <= set(elf.read_elf(ext).needed)
    vision_seen = json.loads(read_member(vision_whl, "torchvision/_build_env.json"))
    # Built after torch, against that torch installed in the build venv (never an index's).
    assert vision_seen["torch_version"] == "2.9.1+rocm5.2"
    assert vision_seen["torch_file"].startswith(str(workspace.venv))
    assert vision_seen["env"]["PYTORCH_VERSION"] == "2.9.1+rocm5.2"
    assert vision_seen["env"]["BUILD_VERSION"] == "0.24.0+rocm5.2"
    assert "torch==2.9.1+rocm5.2" in requires_dist(vision_whl)

    report = workspace.report()
    projects = report["projects"]
    assert isinstance(projects, dict)
    assert report["targets"] == ["gfx90a", "gfx1030"]
    for name, wheel in (("torch", torch_whl), ("torchvision", vision_whl)):
        entry = projects[name]
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=workspace.root / "src" / name,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert entry["commit"] == commit
        assert entry["gfx_targets"] == ["gfx1030", "gfx90a"]
        assert entry["rocm_version"] == "5.2.3"
        assert entry["wheel"] == wheel.name
        assert entry["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
        assert entry["pinned"] == []
    assert (workspace.root / ".rocm-build" / "logs" / "build-torch.log").is_file()
    assert not list(workspace.wheels.glob(".*.tmp"))


def test_extension_that_does_not_pin_gets_pinned(workspace: Workspace) -> None:
    workspace.configure(torchvision="pin_env = []")
    result = workspace.build("torch", "torchvision")
    assert result.returncode == 0, result.stderr
    assert "did not pin torch" in result.stderr
    vision_whl = workspace.wheel("torchvision")
    assert "torch==2.9.1+rocm5.2" in requires_dist(vision_whl)
    assert "torch" not in requires_dist(vision_whl)
    with zipfile.ZipFile(vision_whl) as zf:
        assert zf.testzip() is None
    assert workspace.report()["projects"]["torchvision"]["pinned"]  # type: ignore[index]


def test_cpu_only_build_is_refused(workspace: Workspace) -> None:
    workspace.configure(torch='build_env = ["PYTORCH_BUILD_NUMBER=1", "FIXTURE_CPU_ONLY=1"]')
    result = workspace.build("torch")
    assert result.returncode == 9, result.stderr
    assert "built without ROCm" in result.stderr
    assert not list(workspace.wheels.glob("torch-*.whl"))


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ("FIXTURE_DROP_ARCH=gfx1030", "missing gfx1030"),
        ("FIXTURE_EXTRA_ARCH=gfx906", "unexpected target gfx906"),
    ],
)
def test_wrong_targets_are_refused(workspace: Workspace, knob: str, message: str) -> None:
    workspace.configure(torch=f'build_env = ["PYTORCH_BUILD_NUMBER=1", "{knob}"]')
    result = workspace.build("torch")
    assert result.returncode == 9, result.stderr
    assert message in result.stderr
    assert not list(workspace.wheels.glob("torch-*.whl"))


def test_compile_killed_for_memory_is_retried_with_half_the_jobs(workspace: Workspace) -> None:
    workspace.configure(
        torch='build_env = ["PYTORCH_BUILD_NUMBER=1", "FIXTURE_KILL_WHEN_PARALLEL=1"]'
    )
    result = workspace.build("torch", "--jobs", "2")
    assert result.returncode == 0, result.stderr
    assert "killed" in result.stderr
    assert "1 jobs instead of 2" in result.stderr
    log = (workspace.root / ".rocm-build" / "logs" / "build-torch.log").read_text()
    assert "Killed signal terminated program" in log
    assert workspace.report()["projects"]["torch"]["retried_with_jobs"] == 1  # type: ignore[index]
    seen = json.loads(read_member(workspace.wheel("torch"), "torch/_build_env.json"))
    assert seen["MAX_JOBS"] == "1"


def test_failed_compile_shows_the_log_tail_and_is_not_retried(workspace: Workspace) -> None:
    workspace.configure(torch='build_env = ["PYTORCH_BUILD_NUMBER=1", "FIXTURE_FAIL=1"]')
    result = workspace.build("torch", "--jobs", "2")
    assert result.returncode == 4, result.stderr
    assert "instead of" not in result.stderr
    assert "fixture compile error on purpose" in result.stderr  # the log's last lines
    assert "build-torch.log" in result.stderr


def test_unchanged_inputs_are_not_rebuilt_and_rebuilds_hit_the_cache(
    workspace: Workspace, tmp_path: Path
) -> None:
    env = {"CCACHE_DIR": str(tmp_path / "fresh-ccache")}

    def rebuild_line(*args: str) -> str:
        res = workspace.build("torch", "--cache", "ccache", "--dry-run", *args, env=env)
        assert res.returncode == 0, res.stderr
        return next(ln.strip() for ln in res.stdout.splitlines() if "rebuild:" in ln)

    assert rebuild_line() == (
        "rebuild: would build: no previous wheel (it was not built in this work folder)"
    )
    first = workspace.build("torch", "--cache", "ccache", env=env, as_json=True)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["cache"]["hits"] == 0
    wheel = workspace.wheel("torch")
    built_at = wheel.stat().st_mtime_ns
    assert rebuild_line() == f"rebuild: up to date: keeps {wheel.name}"
    assert rebuild_line("--arch", "gfx90a") == (
        f"rebuild: would build: changed since {wheel.name}: the build environment, the gfx targets"
    )

    again = workspace.build("torch", "--cache", "ccache", env=env)
    assert again.returncode == 0, again.stderr
    assert "unchanged since the last build" in again.stderr
    assert "unchanged, not rebuilt" in again.stdout
    assert "ccache: 0 hits, 0 misses" in again.stdout
    assert wheel.stat().st_mtime_ns == built_at

    # A new commit (not touching the compiled files) is a new input: rebuilt, from the cache.
    src = workspace.root / "src" / "torch"
    (src / "NOTES.md").write_text("a change\n")
    subprocess.run(["git", "add", "-A"], cwd=src, check=True, env={**os.environ, **GIT_IDENTITY})
    subprocess.run(
        ["git", "commit", "-qm", "notes"], cwd=src, check=True, env={**os.environ, **GIT_IDENTITY}
    )
    changed = (
        f"rebuild: would build: changed since {wheel.name}: "
        "the checkout (its commits or uncommitted changes)"
    )
    assert rebuild_line().startswith(changed)  # (its version, from git, is in the environment)
    third = workspace.build("torch", "--cache", "ccache", env=env, as_json=True)
    assert third.returncode == 0, third.stderr
    data = json.loads(third.stdout)
    assert data["projects"][0]["reused"] is False
    stats = data["cache"]
    assert stats["kind"] == "ccache"
    assert stats["hits"] >= 2
    assert stats["misses"] == 0
    forced = workspace.build("torch", "--force", "--dry-run")
    assert forced.returncode == 0, forced.stderr


def test_dry_run_shows_env_command_and_folder(workspace: Workspace) -> None:
    result = workspace.build("torch", "torchvision", "--dry-run", "--jobs", "3", env=USER_ENV)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    tree = str(workspace.tree.resolve())
    assert f"folder:  {workspace.root / 'src' / 'torch'}" in out
    assert "-m pip wheel -v --no-build-isolation --no-deps" in out
    assert "setup.py bdist_wheel" in out
    assert f"ROCM_PATH={tree}" in out
    assert "PYTORCH_ROCM_ARCH=gfx90a;gfx1030" in out
    assert "MAX_JOBS=3" in out
    assert f"CMAKE_PREFIX_PATH={tree}:/my/prefix" in out
    assert "PYTORCH_VERSION=<version of torch>" in out
    removed = next(ln for ln in out.splitlines() if "removed from the environment:" in ln)
    assert {"CUDA_HOME", "HIP_VISIBLE_DEVICES", "ROCM_PATH"} <= set(removed.split(":")[1].split())
    assert not workspace.wheels.exists()
    assert not (workspace.root / ".rocm-build" / "logs").exists()


def test_target_and_tree_errors(workspace: Workspace) -> None:
    result = workspace.build("torch", "--dry-run", arch="gfx90b")
    assert result.returncode == 2
    assert "did you mean" in result.stderr
    result = workspace.build("torch", "--dry-run", arch="")
    assert result.returncode == 2
    assert "pass --arch" in result.stderr
    workspace.configure(torch='cmake_packages = ["hip", "rocblas", "miopen"]')
    result = workspace.build("torch", "--dry-run", arch="gfx1100;gfx90a")
    assert result.returncode == 8
    assert "rocblas, miopen" in result.stderr
    assert "cannot target gfx1100" in result.stderr
