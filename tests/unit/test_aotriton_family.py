"""Which aotriton image folder serves which target (``x`` is any digit)."""

from __future__ import annotations

from rocm_build.bundle.data import aotriton_family_serves, aotriton_images_out


def test_family_names() -> None:
    assert aotriton_family_serves("amd-gfx942", ["gfx942"])
    assert aotriton_family_serves("amd-gfx942", ["gfx942:sramecc+:xnack-"])
    assert aotriton_family_serves("amd-gfx11xx", ["gfx1151"])
    assert not aotriton_family_serves("amd-gfx11xx", ["gfx1201", "gfx90a"])
    assert aotriton_family_serves("amd-gfx120x", ["gfx1201"])
    assert not aotriton_family_serves("amd-gfx942", ["gfx950"])
    assert aotriton_family_serves("amd-gfx942", ["gfx9-4-generic"])  # a generic's members
    assert aotriton_family_serves("amd-gfx942", [])  # no targets: keep all
    assert aotriton_family_serves("README", ["gfx90a"])  # another shape: kept


def test_members_out() -> None:
    members = [
        "torch/lib/aotriton.images/amd-gfx942/flash/a.aks2",
        "torch/lib/aotriton.images/amd-gfx90a/flash/a.aks2",
        "torch/lib/aotriton.images/README",
        "torch/lib/libaotriton_v2.so.0",
    ]
    out, families = aotriton_images_out(members, ["gfx90a"])
    assert out == ("torch/lib/aotriton.images/amd-gfx942/flash/a.aks2",)
    assert families == ("amd-gfx942",)
