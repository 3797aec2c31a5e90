"""torch's build features: flash attention's auto rule (TheRock's) and its refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.building import buildfeatures
from rocm_build.errors import ConfigError


@pytest.mark.parametrize(
    ("targets", "triton", "expected"),
    [
        (["gfx90a"], True, True),
        (["gfx1030", "gfx1100"], True, True),
        (["gfx1201"], True, True),
        (["gfx950"], True, True),
        (["gfx1030"], True, False),  # no aotriton kernels for gfx103X
        (["gfx942"], False, False),  # no Triton built: off
    ],
)
def test_auto(targets: list[str], triton: bool, expected: bool) -> None:
    assert buildfeatures.flash_attention("auto", triton=triton, targets=targets) is expected


def test_explicit_on_needs_triton_and_a_target() -> None:
    with pytest.raises(ConfigError, match="needs Triton"):
        buildfeatures.flash_attention("on", triton=False, targets=["gfx942"])
    with pytest.raises(ConfigError, match="no target has aotriton kernels"):
        buildfeatures.flash_attention("on", triton=True, targets=["gfx1030"])
    assert buildfeatures.flash_attention("on", triton=True, targets=["gfx942"])
    assert not buildfeatures.flash_attention("off", triton=True, targets=["gfx942"])


def test_torch_env_from_the_settings(tmp_path: Path) -> None:
    env = {"ROCM_BUILD_FEATURES_CK_GEMM": "1"}
    cfg = config.load(cwd=tmp_path, env=env)
    got = buildfeatures.torch_env(cfg.features, triton=True, targets=["gfx942"])
    assert got == {
        "USE_FLASH_ATTENTION": "1",
        "USE_MEM_EFF_ATTENTION": "1",
        "USE_ROCM_CK_SDPA": "0",
        "USE_ROCM_CK_GEMM": "1",
    }


def test_gpu_asserts_name_the_shipped_cmake_file(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_FEATURES_GPU_ASSERTS": "1"})
    got = buildfeatures.torch_env(cfg.features, triton=False, targets=["gfx1030"])
    include = Path(got["CMAKE_PROJECT_INCLUDE_BEFORE"])
    assert include == buildfeatures.GPU_ASSERTS_CMAKE
    assert "set(ROCM_FORCE_ENABLE_GPU_ASSERTS ON" in include.read_text()
    default = config.load(cwd=tmp_path, env={})
    assert not default.features.gpu_asserts
    off = buildfeatures.torch_env(default.features, triton=False, targets=["gfx1030"])
    assert "CMAKE_PROJECT_INCLUDE_BEFORE" not in off


def test_gpu_asserts_refuse_a_users_project_include(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_FEATURES_GPU_ASSERTS": "1"})
    with pytest.raises(ConfigError, match="already set"):
        buildfeatures.torch_env(
            cfg.features,
            triton=False,
            targets=["gfx1030"],
            given={"CMAKE_PROJECT_INCLUDE_BEFORE": "/x.cmake"},
        )
