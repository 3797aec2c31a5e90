"""The ROCm a wheel was built with, read from its version label, and the relabelling that
``bundle --allow-rocm-mismatch`` does (pure functions; the bundles are in
tests/integration/modern/test_rocm_mismatch.py)."""

from __future__ import annotations

import pytest
from packaging.version import Version

from rocm_build.bundle.rocmlabel import built_with, ordering_warning, relabel, same_release


@pytest.mark.parametrize(
    ("version", "record", "built"),
    [
        ("2.9.0+rocm5.2.3", {}, "5.2.3"),
        ("2.9.0+rocm7.0.gfx942", {}, "7.0"),  # the matrix's per-group label
        ("0.24.0+gfx942.rocm6.4", {}, "6.4"),
        ("2.9.0+ROCm6.4.3", {}, "6.4.3"),
        ("2.9.0", {"rocm_version": "6.4.3\n"}, "6.4.3"),  # an earlier bundle's record
        ("2.9.0+cu121", {}, ""),
        ("2.9.0+myrocm5", {}, ""),  # not a rocm label of its own
        ("2.9.0", {}, ""),
    ],
)
def test_built_with(version: str, record: dict[str, str], built: str) -> None:
    assert built_with(version, record) == built


def test_same_release_compares_as_far_as_both_go() -> None:
    assert same_release("5.2", "5.2.3")
    assert same_release("6.4.3", "6.4.3")
    assert not same_release("5.2.3", "5.4.2")
    assert not same_release("6.4", "7.0.0")


@pytest.mark.parametrize(
    ("version", "new"),
    [
        ("2.9.0+rocm5.2.3", "2.9.0+rocm6.4"),
        ("2.9.0+rocm7.0.gfx942", "2.9.0+rocm6.4.gfx942"),
        ("2.9.0+local", "2.9.0+local.rocm6.4"),
        ("2.9.0", "2.9.0+rocm6.4"),
    ],
)
def test_relabel(version: str, new: str) -> None:
    assert relabel(version, "6.4.3") == new


@pytest.mark.parametrize(
    ("version", "warned"),
    [
        ("2.14.0+rocm10.0", True),
        ("2.14.0+rocm10.0.gfx94x", True),
        ("2.14.0+gfx942.rocm11.1", True),
        ("2.14.0+rocm7.14", False),
        ("2.14.0+rocm.10.0", False),  # "10" a segment of its own: compared as a number
        ("2.14.0", False),
    ],
)
def test_ordering_warning_for_rocm10_labels(version: str, warned: bool) -> None:
    text = ordering_warning(version)
    assert (text is not None) is warned
    if warned:
        assert "exact version" in str(text)
    # the rule it warns about, as packaging applies it
    assert Version("2.14.0+rocm10.0") < Version("2.14.0+rocm7.14")
    assert Version("2.14.0+rocm7.14") > Version("2.14.0+rocm7.9")
