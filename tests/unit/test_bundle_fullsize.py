"""Data trees at full size: the place a library looks for its data (a link in the tree names it),
data trees with nothing for a requested target, and why a written wheel needs ZIP64."""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from rocm_build.bundle.data import data_target_gaps, looked_up_at, select_data
from rocm_build.bundle.lines import warning_lines
from rocm_build.bundle.model import BundleResult, Closure
from rocm_build.wheel import wheelfile, zipformat


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """rocBLAS data as the Debian tree has it: lib/rocblas/library and a versioned link to it."""
    root = tmp_path / "rocm"
    data = root / "lib/rocblas/library"
    data.mkdir(parents=True)
    for name in ("Kernels.so-000-gfx1100.hsaco", "Kernels.so-000-gfx90a.hsaco", "fallback.dat"):
        (data / name).write_bytes(b"x" * 10)
    (root / "lib/rocblas/4.4.1").mkdir()
    (root / "lib/rocblas/4.4.1/library").symlink_to("../library")
    blaslt = root / "lib/hipblaslt/library"
    blaslt.mkdir(parents=True)
    (blaslt / "TensileLibrary_gfx942.dat").write_bytes(b"y")
    return root


def test_data_goes_where_a_link_in_the_tree_says_the_library_looks(tree: Path) -> None:
    assert looked_up_at(tree, "lib/rocblas/library") == "lib/rocblas/4.4.1/library"
    assert looked_up_at(tree, "lib/hipblaslt/library") == "lib/hipblaslt/library"
    assert looked_up_at(tree, "share/miopen/db") == "share/miopen/db"
    trees = ["lib/rocblas/library", "lib/hipblaslt/library"]
    names = ["librocblas.so.4", "libhipblaslt.so.1"]
    files, skipped = select_data(tree, trees, "torch/lib", names, ["gfx1100"])
    assert sorted(f.arcname for f in files) == [
        "torch/lib/rocblas/4.4.1/library/Kernels.so-000-gfx1100.hsaco",
        "torch/lib/rocblas/4.4.1/library/fallback.dat",
    ]
    assert skipped == 2  # gfx90a's kernel, hipBLASLt's gfx942 file


def test_data_trees_without_files_for_a_target_are_named(tree: Path) -> None:
    trees = ["lib/rocblas/library", "lib/hipblaslt/library", "share/miopen/db"]
    names = ["librocblas.so.4", "libhipblaslt.so.1", "libMIOpen.so.1"]
    gaps = data_target_gaps(tree, trees, names, ["gfx942", "gfx1100"])
    assert gaps == (("lib/rocblas/library", ("gfx942",)), ("lib/hipblaslt/library", ("gfx1100",)))
    assert data_target_gaps(tree, trees, names, []) == ()  # every target's data kept
    assert data_target_gaps(tree, trees, ["libMIOpen.so.1"], ["gfx942"]) == ()
    closure = Closure(
        "in.whl", "out.whl", "x", "1", "x/lib", (), (), (), (), 0, (), (), (), "", "", ""
    )
    result = BundleResult("in.whl", "out.whl", "planned", 0.1, replace(closure, data_missing=gaps))
    lines = list(warning_lines(result))
    assert "lib/rocblas/library has no files for gfx942" in lines[0]
    big = BundleResult("in.whl", "/o/out.whl", "bundled", 1.0, None, ("2 of 5 members ...",))
    assert list(warning_lines(big)) == ["note: out.whl needs ZIP64: 2 of 5 members ..."]


def test_zip64_reasons_name_the_first_member_past_the_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "w.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(5):
            zf.writestr(f"m{i}", b"z" * 100)
    assert wheelfile.zip64_reasons(path) == []
    monkeypatch.setattr(zipformat, "ZIP32_LIMIT", 250)  # as if 4 GiB were 250 bytes
    reasons = wheelfile.zip64_reasons(path)
    assert reasons[0].startswith("3 of 5 members start past 4 GiB, from m2 at offset 264")
    assert reasons[1].startswith("the central directory starts at offset")
