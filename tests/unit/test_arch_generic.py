"""LLVM's generic processors (gfx9-4-generic ...): which targets their code and data serve."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build.bundle.data import data_target_gaps, gfx_tokens, select_data
from rocm_build.common import arch


@pytest.mark.parametrize(
    ("generic", "member"),
    [
        ("gfx9-generic", "gfx906"),
        ("gfx9-generic", "gfx90c"),
        ("gfx9-4-generic", "gfx942"),
        ("gfx9-4-generic", "gfx950"),
        ("gfx10-1-generic", "gfx1013"),
        ("gfx10-3-generic", "gfx1036"),
        ("gfx11-generic", "gfx1100"),
        ("gfx11-generic", "gfx1153"),
        ("gfx12-generic", "gfx1201"),
    ],
)
def test_generic_code_serves_its_members(generic: str, member: str) -> None:
    assert arch.serves(generic, member)
    assert arch.serves(generic, f"{member}:xnack-")
    assert not arch.serves(member, generic)  # one member's code does not run on the others
    assert arch.overlaps(member, generic)
    assert arch.covered(member, {"gfx1030", generic})


@pytest.mark.parametrize(
    ("generic", "other"),
    [
        ("gfx9-generic", "gfx90a"),  # not in gfx9-generic (nor gfx908)
        ("gfx9-generic", "gfx942"),
        ("gfx9-4-generic", "gfx90a"),
        ("gfx10-1-generic", "gfx1030"),
        ("gfx10-3-generic", "gfx1100"),
        ("gfx11-generic", "gfx1200"),
        ("gfx12-generic", "gfx1151"),
    ],
)
def test_generic_code_does_not_serve_others(generic: str, other: str) -> None:
    assert not arch.serves(generic, other)
    assert not arch.overlaps(generic, other)
    assert not arch.covered(other, {generic})


def test_names_in_paths() -> None:
    names = "Kernels.so-000-gfx9-4-generic.hsaco lib/gfx10-3-generic/x_gfx942.dat gfx1100:xnack-"
    assert arch.gfx_tokens(names) == {"gfx9-4-generic", "gfx10-3-generic", "gfx942", "gfx1100"}
    # a generic name is one token, not "gfx10" or "gfx11"
    assert arch.gfx_tokens("TensileLibrary_gfx11-generic.dat") == {"gfx11-generic"}
    assert arch.gfx_tokens("gfx12-generic_gfx9-generic") == {"gfx12-generic", "gfx9-generic"}
    assert gfx_tokens("a/GFX90A/b.co") == {"gfx90a"}


def test_keeps() -> None:
    assert arch.keeps({"gfx9-4-generic"}, ["gfx942"])
    assert arch.keeps({"gfx942"}, ["gfx9-4-generic"])  # data for one member of a requested family
    assert not arch.keeps({"gfx11-generic"}, ["gfx942", "gfx1030"])
    assert arch.keeps(set(), ["gfx942"])
    assert arch.keeps({"gfx90a"}, [])


def test_bundle_keeps_generic_data_for_a_member(tmp_path: Path) -> None:
    lib = tmp_path / "lib" / "rocblas" / "library"
    lib.mkdir(parents=True)
    for name in (
        "TensileLibrary_gfx9-4-generic.dat",
        "TensileLibrary_gfx11-generic.dat",
        "TensileLibrary_gfx942.dat",
        "TensileLibrary_gfx1030.dat",
        "TensileLibrary_fallback.dat",
    ):
        (lib / name).write_bytes(b"x")
    files, skipped = select_data(
        tmp_path, ["lib/rocblas/library"], "torch/lib", ["librocblas.so.4"], ["gfx942"]
    )
    kept = sorted(Path(f.arcname).name for f in files)
    assert kept == [
        "TensileLibrary_fallback.dat",
        "TensileLibrary_gfx9-4-generic.dat",
        "TensileLibrary_gfx942.dat",
    ]
    assert skipped == 2
    gaps = data_target_gaps(
        tmp_path, ["lib/rocblas/library"], ["librocblas.so.4"], ["gfx950", "gfx1100", "gfx90a"]
    )
    assert gaps == (("lib/rocblas/library", ("gfx90a",)),)
