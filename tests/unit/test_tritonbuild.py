"""Torch's Triton requirement: how it is composed, and the wheel check that it is there."""

from __future__ import annotations

import pytest

from rocm_build.building import tritonbuild
from rocm_build.errors import BuildFailed

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
