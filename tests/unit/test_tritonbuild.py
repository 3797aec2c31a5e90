"""Torch's Triton requirement: how it is composed, and the wheel check that it is there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from rocm_build import config
from rocm_build.building import tritonbuild
from rocm_build.common.errors import BuildFailed

BUILD = tritonbuild.TritonBuild("triton", ("torch",), "triton", 'platform_system == "Linux"')
V = "3.5.0+git2757cc23"
REQ = f'triton=={V}; platform_system == "Linux"'


def test_requirement_follows_the_users_own_and_replaces_an_older_triton() -> None:
    env = {tritonbuild.EXTRA_REQUIREMENTS: "numpy>=1|triton==3.0.0|pytorch-triton-rocm==2.1"}
    got = tritonbuild.requirement_env(env, BUILD, V)[tritonbuild.EXTRA_REQUIREMENTS]
    assert got == f"numpy>=1|pytorch-triton-rocm==2.1|{REQ}"
    # The plan's placeholder is replaced by the version read from the wheel.
    placeholder = tritonbuild.requirement_env({}, BUILD, tritonbuild.PLACEHOLDER)
    assert tritonbuild.requirement_env(placeholder, BUILD, V) == {
        tritonbuild.EXTRA_REQUIREMENTS: REQ
    }


def test_no_marker_no_semicolon() -> None:
    bare = tritonbuild.TritonBuild("triton", ("torch",), "triton-rocm", "")
    assert tritonbuild.requirement(bare, V) == f"triton-rocm=={V}"


@pytest.mark.parametrize(
    "requires",
    [
        (),
        ("triton==3.5.0",),  # another version
        (f"triton=={V}",),  # no marker
        (f'pytorch-triton-rocm=={V}; platform_system == "Linux"',),  # another name
    ],
)
def test_check_requires_refuses_anything_but_the_exact_requirement(
    requires: tuple[str, ...],
) -> None:
    env = {tritonbuild.EXTRA_REQUIREMENTS: REQ}
    with pytest.raises(BuildFailed, match="does not require the Triton built in this run"):
        tritonbuild.check_requires(BUILD, env, "torch", requires)


def test_check_requires_takes_the_exact_one() -> None:
    env = {tritonbuild.EXTRA_REQUIREMENTS: REQ}
    tritonbuild.check_requires(BUILD, env, "torch", ("numpy", f"triton=={V} ; {BUILD.marker}"))


def test_a_second_plus_is_an_invalid_triton_version() -> None:
    with pytest.raises(BuildFailed, match="not valid"):
        tritonbuild.check_triton_wheel("triton", "3.5.0+git2757cc23+rocm7.1", "triton")
    tritonbuild.check_triton_wheel("triton", V, "triton")


# Triton's version suffix: the build's ROCm label at a release branch and at torch's CI pin.
SETTINGS = config.load(cwd=Path("/nonexistent-cwd"), env={}).triton


def _suffix(tmp_path: Path, ref: str, label: str) -> str:
    manifest = {"format": 1, "projects": {"triton": {"ref": ref}}}
    (tmp_path / "rocm-build-sources.json").write_text(json.dumps(manifest))
    adds, build = tritonbuild.configure(["triton", "torch"], SETTINGS, tmp_path, label)
    assert build is not None
    assert build.requirers == ("torch",)
    return adds["triton"]["TRITON_WHEEL_VERSION_SUFFIX"]


@pytest.mark.parametrize("label", ["+rocm7.14", "+rocm10.0", "+rocm7.14.gfx94x"])
def test_ci_pin_and_release_branch_both_carry_the_label(tmp_path: Path, label: str) -> None:
    pin = _suffix(tmp_path, "0123456789abcdef0123456789abcdef01234567", label)
    assert pin == "." + label[1:]
    # what Triton makes of it: +git<sha> then the suffix, a valid version either way
    assert Version(f"3.5.0+git01234567{pin}").local == f"git01234567{pin}"
    assert _suffix(tmp_path, "release/3.5.x", label) == label


def test_two_rocm_versions_make_two_triton_names(tmp_path: Path) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"
    a = Version("3.5.0+git01234567" + _suffix(tmp_path, sha, "+rocm7.13"))
    b = Version("3.5.0+git01234567" + _suffix(tmp_path, sha, "+rocm7.14"))
    assert a != b
