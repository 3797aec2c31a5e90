"""What each build feature needs, against the real ROCm 5.2.3 tree (no aotriton in it): doctor
says it per feature and blocks on a feature the run cannot serve (composable_kernel is torch's own
submodule, not the tree's), and a build whose torch checkout lacks that submodule stops before
anything is built."""

from __future__ import annotations

import json
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
    state = "off: no pre-fetched aotriton (build.aotriton = auto finds none)"
    assert features["flash_attention"]["state"] == state
    assert "aotriton" in features["flash_attention"]["needs"]
    assert "third_party/composable_kernel/include/ck/ck.hpp" in features["ck_sdpa"]["needs"]
    default = "the train's default for these targets"
    assert features["ck_sdpa"]["state"] == f"on ({default}); not checked out"
    assert features["mslk"]["state"] == "off (not supported on these targets)"
    assert features["gpu_asserts"]["state"] == "off"
    text = _doctor(rocm_tree, tmp_path, run_cli, {}, "torch").stdout
    assert "flash_attention" in text
    assert "composable_kernel" in text


def test_doctor_blocks_a_feature_the_tree_cannot_serve(
    rocm_tree: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    (tmp_path / "src" / "torch").mkdir(parents=True)  # a checkout without its submodules
    res = _doctor(rocm_tree, tmp_path, run_cli, {"ROCM_BUILD_FEATURES_CK_GEMM": "1"}, "torch")
    assert res.returncode == 8, res.stderr
    header = "third_party/composable_kernel/include/ck/ck.hpp"
    assert f"features.ck_gemm: on (user setting), but torch's checkout has no {header}" in (
        res.stderr
    )
    res = _doctor(
        rocm_tree,
        tmp_path,
        run_cli,
        {"ROCM_BUILD_FEATURES_FLASH_ATTENTION": "on", "ROCM_BUILD_FEATURES_CK_GEMM": "0"},
        "torch",
    )
    assert res.returncode == 2, res.stderr
    assert "on needs aotriton" in res.stderr


def test_a_ck_build_without_torchs_submodule_stops_before_building(workspace: Workspace) -> None:
    env = {"ROCM_BUILD_FEATURES_CK_SDPA": "1"}
    # With the submodule in the checkout, the plan writes the switch the user asked for.
    dry = workspace.build("torch", "--dry-run", as_json=True, env=env)
    assert dry.returncode == 0, dry.stderr
    (step,) = json.loads(dry.stdout)["projects"]
    assert step["env"]["USE_ROCM_CK_SDPA"] == "1"
    assert "USE_ROCM_CK_GEMM" not in step["env"]  # left to the train's default
    workspace.without_submodules()
    res = workspace.build("torch", env=env)
    assert res.returncode == 8, res.stderr
    assert "Traceback" not in res.stderr
    assert "ck_sdpa (user setting) and ck_gemm (the train's default" in res.stderr, res.stderr
    assert not (workspace.root / ".rocm-build" / "logs" / "build-torch.log").exists()
