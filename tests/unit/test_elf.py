"""Pure parts of elf.py: offload entry ids."""

from __future__ import annotations

import pytest

from rocm_build.binary import elf


@pytest.mark.parametrize(
    ("bundle_id", "target"),
    [
        ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", "gfx90a"),
        ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", "gfx942"),
        ("hip-amdgcn-amd-amdhsa-gfx906", "gfx906"),
        ("hipv4-amdgcn-amd-amdhsa--gfx10-3-generic", "gfx10-3-generic"),
        ("openmp-amdgcn-amd-amdhsa--gfx1100", "gfx1100"),
        ("host-x86_64-unknown-linux-gnu-", None),
        ("hipv4-nvptx64-nvidia-cuda--sm_80", None),
    ],
)
def test_target_of_bundle_id(bundle_id: str, target: str | None) -> None:
    assert elf.target_of_bundle_id(bundle_id) == target
