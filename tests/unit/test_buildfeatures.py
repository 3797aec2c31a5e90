"""torch's build features: left to the train's default unless set (nothing written), a setting
of true or false written either way, each feature's on/off with its reason, and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.building import featureneeds, features
from rocm_build.common.errors import ConfigError


@pytest.mark.parametrize(
    ("targets", "expected"),
    [
        (["gfx90a"], True),
        (["gfx1030", "gfx1100"], True),
        (["gfx1201"], True),
        (["gfx950"], True),
        (["gfx1030"], False),  # no aotriton kernels for gfx103X
    ],
)
def test_auto_follows_the_targets_not_triton(targets: list[str], expected: bool) -> None:
    assert features.flash_attention("auto", targets=targets) is expected


def test_explicit_on_needs_a_target_with_kernels() -> None:
    with pytest.raises(ConfigError, match="no target has aotriton kernels"):
        features.flash_attention("on", targets=["gfx1030"])
    assert features.flash_attention("on", targets=["gfx942"])
    assert not features.flash_attention("off", targets=["gfx942"])


def test_the_defaults_write_nothing_and_say_why(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    assert cfg.features.ck_sdpa is None
    assert cfg.features.mslk is None
    assert features.torch_env(cfg.features, targets=["gfx942", "gfx1100"]) == {}
    got = {f.name: f for f in features.decide(cfg.features, targets=["gfx942", "gfx1100"])}
    default = "the train's default for these targets"
    for name in ("flash_attention", "ck_sdpa", "ck_gemm", "mslk"):
        assert (got[name].on, got[name].why, dict(got[name].env)) == (True, default, {}), name
    assert got["gpu_asserts"].describe() == f"gpu_asserts: off ({default})"
    # MSLK's kernels are for gfx942 and gfx950 only; gfx103X has no aotriton kernels.
    other = {f.name: f for f in features.decide(cfg.features, targets=["gfx1030"])}
    assert other["mslk"].describe() == "mslk: off (not supported on these targets)"
    assert not other["flash_attention"].on
    assert other["ck_sdpa"].on


@pytest.mark.parametrize("value", ["false", "0", "off"])
def test_false_still_turns_a_feature_off(tmp_path: Path, value: str) -> None:
    env = {f"ROCM_BUILD_FEATURES_{n}": value for n in ("CK_SDPA", "CK_GEMM", "MSLK")}
    cfg = config.load(cwd=tmp_path, env={**env, "ROCM_BUILD_FEATURES_FLASH_ATTENTION": "off"})
    got = features.torch_env(cfg.features, targets=["gfx942"])
    assert got == {
        "USE_FLASH_ATTENTION": "0",
        "USE_MEM_EFF_ATTENTION": "0",
        "USE_ROCM_CK_SDPA": "0",
        "USE_ROCM_CK_GEMM": "0",
        "USE_MSLK": "0",
        "USE_FBGEMM_GENAI": "0",
    }
    for feature in features.decide(cfg.features, targets=["gfx942"])[:4]:
        assert (feature.on, feature.why) == (False, "user setting"), feature


def test_true_is_written_and_the_unset_default_reads_back(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_FEATURES_CK_GEMM": "1"})
    got = features.torch_env(cfg.features, targets=["gfx1100"])
    assert got == {"USE_ROCM_CK_GEMM": "1"}
    unset = config.load(cwd=tmp_path, env={"ROCM_BUILD_FEATURES_MSLK": "default"})
    assert unset.features.mslk is None
    with pytest.raises(ConfigError, match='true, false or ""'):
        config.load(cwd=tmp_path, env={"ROCM_BUILD_FEATURES_MSLK": "maybe"})


def test_the_users_own_variable_wins_and_is_named(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    (mslk,) = [f for f in features.decide(cfg.features, targets=["gfx942"]) if f.name == "mslk"]
    mine = features.given_wins(mslk, {"USE_MSLK": "OFF"})
    assert (mine.on, mine.why, dict(mine.env)) == (False, "user setting (USE_MSLK=OFF)", {})


def test_ck_needs_torchs_submodule_not_the_tree(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    decided = features.decide(cfg.features, targets=["gfx942"])
    torch = tmp_path / "src" / "torch"
    torch.mkdir(parents=True)
    problem = featureneeds.ck_problem(decided, torch)
    assert "third_party/composable_kernel/include/ck/ck.hpp is missing" in problem
    assert "features.ck_sdpa and features.ck_gemm to false" in problem
    header = torch / features.CK_HEADER
    header.parent.mkdir(parents=True)
    header.write_text("#pragma once\n")
    assert featureneeds.ck_problem(decided, torch) == ""
    off = config.load(
        cwd=tmp_path,
        env={"ROCM_BUILD_FEATURES_CK_SDPA": "false", "ROCM_BUILD_FEATURES_CK_GEMM": "false"},
    )
    empty = tmp_path / "empty"
    assert featureneeds.ck_problem(features.decide(off.features, targets=[]), empty) == ""


def test_gpu_asserts_name_the_shipped_cmake_file(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_FEATURES_GPU_ASSERTS": "1"})
    got = features.torch_env(cfg.features, targets=["gfx1030"])
    include = Path(got["CMAKE_PROJECT_INCLUDE_BEFORE"])
    assert include == features.GPU_ASSERTS_CMAKE
    assert "set(ROCM_FORCE_ENABLE_GPU_ASSERTS ON" in include.read_text()
    default = config.load(cwd=tmp_path, env={})
    assert not default.features.gpu_asserts
    off = features.torch_env(default.features, targets=["gfx1030"])
    assert "CMAKE_PROJECT_INCLUDE_BEFORE" not in off


def test_gpu_asserts_refuse_a_users_project_include(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_FEATURES_GPU_ASSERTS": "1"})
    with pytest.raises(ConfigError, match="already set"):
        features.torch_env(
            cfg.features,
            targets=["gfx1030"],
            given={"CMAKE_PROJECT_INCLUDE_BEFORE": "/x.cmake"},
        )
