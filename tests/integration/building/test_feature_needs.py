"""What each build feature needs, against the real ROCm 5.2.3 tree (no composable_kernel headers
in it, no aotriton): doctor says it per feature and blocks on a feature the run cannot serve, and
a build asked for the composable-kernel backends stops before anything is built."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.conftest import CliRunner

from .conftest import Workspace

WIDE = {"COLUMNS": "300"}


def _doctor(rocm: Path, cwd: Path, run_cli: CliRunner, env: dict[str, str], *names: str):  # type: ignore[no-untyped-def]
    (cwd / "rocm-build.toml").write_text('[projects.torch]\ncmake_packages = ["hip"]\n')
    args = ["doctor", *names, "--rocm", str(rocm), "--arch", "gfx90a;gfx1030"]
    return run_cli(args, cwd=cwd, env={**WIDE, **env})


def test_doctor_says_what_each_feature_needs(
    rocm_tree: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    res = _doctor(rocm_tree, tmp_path, run_cli, {}, "--json", "torch")
    assert res.returncode == 0, res.stderr
    features = {f["name"]: f for f in json.loads(res.stdout)["features"]}
    assert features["flash_attention"]["state"] == "off (no Triton in this run)"
    assert "aotriton" in features["flash_attention"]["needs"]
    assert "include/ck/ck.hpp" in features["ck_sdpa"]["needs"]
    assert features["gpu_asserts"]["state"] == "off"
    text = _doctor(rocm_tree, tmp_path, run_cli, {}, "torch").stdout
    assert "flash_attention" in text
    assert "composable_kernel" in text


def test_doctor_blocks_a_feature_the_tree_cannot_serve(
    rocm_tree: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    res = _doctor(rocm_tree, tmp_path, run_cli, {"ROCM_BUILD_FEATURES_CK_GEMM": "1"}, "torch")
    assert res.returncode == 8, res.stderr
    assert "features.ck_gemm: asked for, but the tree has no include/ck/ck.hpp" in res.stderr
    res = _doctor(
        rocm_tree, tmp_path, run_cli, {"ROCM_BUILD_FEATURES_FLASH_ATTENTION": "on"}, "torch"
    )
    assert res.returncode == 2, res.stderr
    assert "needs Triton built in the same run" in res.stderr


def test_a_ck_build_without_ck_headers_stops_before_building(
    workspace: Workspace, tmp_path: Path
) -> None:
    env = {"ROCM_BUILD_FEATURES_CK_SDPA": "1"}
    res = workspace.build("torch", env=env)
    assert res.returncode == 8, res.stderr
    assert "Traceback" not in res.stderr
    assert "features.ck_sdpa need composable_kernel's headers" in res.stderr, res.stderr
    assert not (workspace.root / ".rocm-build" / "logs" / "build-torch.log").exists()
    # With the headers in (a copy of) the tree, the plan takes it.
    tree = tmp_path / "tree-with-ck"
    shutil.copytree(workspace.tree, tree, symlinks=True)
    (tree / "include" / "ck").mkdir(parents=True)
    (tree / "include" / "ck" / "ck.hpp").write_text("#pragma once\n")
    workspace.tree = tree
    dry = workspace.build("torch", "--dry-run", as_json=True, env=env)
    assert dry.returncode == 0, dry.stderr
    (step,) = json.loads(dry.stdout)["projects"]
    assert step["env"]["USE_ROCM_CK_SDPA"] == "1"
