"""``rocm wheels`` and its output folder: the temporaries a run that was still going away when
it started left are swept when it ends (as ``bundle`` does), also when it fails; and its
refusal of a link out of the tree names its own flag, not ``bundle``'s setting it does not read,
and comes from the plan, before any folder is made. Two-file trees: no library is read."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from rocm_build.bundle import rocmwheels
from rocm_build.common import tempfiles
from rocm_build.common.errors import BundleError


def _tree_with_a_link_out(tmp_path: Path) -> Path:
    tree = tmp_path / "rocm"
    (tree / ".info").mkdir(parents=True)
    (tree / ".info" / "version").write_text("5.2.3-65\n")
    (tree / "lib").mkdir()
    outside = tmp_path / "elsewhere" / "libamdhip64.so.5"
    outside.parent.mkdir()
    outside.write_bytes(b"not the tree's\n")
    (tree / "lib" / "libamdhip64.so.5").symlink_to(outside)
    return tree


def _tree_with_data(tmp_path: Path) -> Path:
    tree = tmp_path / "rocm"
    (tree / ".info").mkdir(parents=True)
    (tree / ".info" / "version").write_text("5.2.3-65\n")
    (tree / "lib").mkdir()
    (tree / "share" / "libdrm").mkdir(parents=True)
    (tree / "share" / "libdrm" / "amdgpu.ids").write_text("# GPU names\n")
    return tree


def test_rocm_wheels_sweeps_again_at_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = _tree_with_data(tmp_path)
    plan = rocmwheels.rocm_wheels_plan(tree, tmp_path / "out", level=1)
    out = tmp_path / "out"
    out.mkdir()
    # A temporary of a run that is still going away when this one starts: its lock is held
    # (here by this test, for it) and is released only while this run works.
    left = out / ".rocm_sdk_core-5.2.3.whl.rocm-build-4194305-x1.tmp"
    left.write_bytes(b"partial\n")
    held = os.open(left, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    real_sweep = tempfiles.sweep
    sweeps: list[bool] = []

    def sweep(where: Path) -> list[Path]:
        removed = real_sweep(where)
        sweeps.append(left.exists())
        if len(sweeps) == 1:
            os.close(held)  # the other run is gone now, while this one works
            # and this run fails: a file its plan named is gone when it is written
            (tree / "share" / "libdrm" / "amdgpu.ids").unlink()
        return removed

    monkeypatch.setattr(tempfiles, "sweep", sweep)
    try:
        with pytest.raises(FileNotFoundError):
            rocmwheels.rocm_wheels(plan)
    finally:
        if not sweeps:
            os.close(held)
    assert sweeps == [True, False]  # locked: kept at the start; swept at the end
    assert sorted(p.name for p in out.iterdir()) == []


def test_rocm_wheels_refusal_names_its_own_flag(tmp_path: Path) -> None:
    tree = _tree_with_a_link_out(tmp_path)
    with pytest.raises(BundleError) as err:
        rocmwheels.build_wheels(tree, tmp_path / "out", level=1)
    line = str(err.value)
    assert "lib/libamdhip64.so.5 in the ROCm tree is a symlink to" in line
    assert line.endswith("allow that folder with rocm wheels --allow-outside DIR"), line
    assert "bundle.allow_outside" not in line
    assert "ROCM_BUILD_BUNDLE_ALLOW_OUTSIDE" not in line
    assert not (tmp_path / "out").exists()  # refused by the plan: nothing made
