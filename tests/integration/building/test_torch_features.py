"""torch's ROCm features at the references' defaults, through the fixture torch whose CMake takes
PyTorch's defaults (composable-kernel SDPA and GEMM on, built from the checkout's
third_party/composable_kernel; MSLK on for gfx942/gfx950) and stops on a value nobody asked for."""

from __future__ import annotations

import json
from typing import Any

from .conftest import Workspace, read_member

SWITCHES = ("USE_ROCM_CK_SDPA", "USE_ROCM_CK_GEMM", "USE_MSLK", "USE_FBGEMM_GENAI")


def _features(workspace: Workspace) -> dict[str, bool]:
    seen: dict[str, bool] = json.loads(
        read_member(workspace.wheel("torch"), "torch/_features.json")
    )
    return seen


def test_the_default_torch_has_the_trains_own_features(workspace: Workspace) -> None:
    res = workspace.build("torch")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    # Nothing forced: torch's CMake decides, CK from its own submodule, no MSLK for gfx90a/gfx1030.
    assert _features(workspace) == {
        "USE_ROCM_CK_SDPA": True,
        "USE_ROCM_CK_GEMM": True,
        "USE_MSLK": False,
        "USE_FBGEMM_GENAI": False,
    }
    seen = json.loads(read_member(workspace.wheel("torch"), "torch/_build_env.json"))
    assert not [k for k in SWITCHES if k in seen]
    projects: dict[str, dict[str, Any]] = workspace.report()["projects"]  # type: ignore[assignment]
    features = {f["name"]: f for f in projects["torch"]["features"]}
    assert features["ck_sdpa"]["on"] is True
    assert features["ck_sdpa"]["why"] == "the train's default for these targets"
    assert features["mslk"]["on"] is False


def test_a_false_setting_turns_a_feature_off(workspace: Workspace) -> None:
    env = {
        "ROCM_BUILD_FEATURES_CK_GEMM": "false",
        "ROCM_BUILD_FEATURES_MSLK": "false",
        "FIXTURE_USER_SWITCHES": "USE_ROCM_CK_GEMM USE_MSLK USE_FBGEMM_GENAI",
    }
    res = workspace.build("torch", env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert _features(workspace) == {
        "USE_ROCM_CK_SDPA": True,
        "USE_ROCM_CK_GEMM": False,
        "USE_MSLK": False,
        "USE_FBGEMM_GENAI": False,
    }


def test_the_dry_run_says_each_feature_and_why(workspace: Workspace) -> None:
    res = workspace.build("torch", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "  features:\n" in res.stdout, res.stdout
    for line in (
        "ck_sdpa: on (the train's default for these targets)",
        "ck_gemm: on (the train's default for these targets)",
        "mslk: off (not supported on these targets)",
        "flash_attention: off (no aotriton at hand: the build would download it mid-build",
        "gpu_asserts: off (the train's default for these targets)",
    ):
        assert f"    {line}" in res.stdout, res.stdout


def test_ck_without_torchs_submodule_stops_before_building(workspace: Workspace) -> None:
    workspace.without_submodules()
    res = workspace.build("torch")
    assert res.returncode == 8, res.stdout[-3000:] + res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    assert "third_party/composable_kernel/include/ck/ck.hpp" in res.stderr
    assert not (workspace.root / ".rocm-build" / "logs" / "build-torch.log").exists()
    # Both backends turned off: no submodule needed, and the build goes through.
    env = {
        "ROCM_BUILD_FEATURES_CK_SDPA": "false",
        "ROCM_BUILD_FEATURES_CK_GEMM": "false",
        "FIXTURE_USER_SWITCHES": "USE_ROCM_CK_SDPA USE_ROCM_CK_GEMM",
    }
    res = workspace.build("torch", env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert _features(workspace)["USE_ROCM_CK_SDPA"] is False
