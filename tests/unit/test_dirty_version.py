"""A build of uncommitted changes: the local label's dirty marker, the refusal without
``allow_dirty``, and the reading of git's status (pure parts; the git side is in
tests/integration/building/test_dirty_checkout.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from rocm_build.building.version import Revision, mark_dirty, refuse_dirty
from rocm_build.common.errors import DirtyCheckout
from rocm_build.repo.worktree import WorkTree, build_output, parse_status
from tests.support.buildplans import build_plan, project_sources


@pytest.mark.parametrize(
    ("label", "marked"),
    [("+rocm6.4", "+rocm6.4.dirty"), ("rocm7.14", "+rocm7.14.dirty"), ("", "+dirty")],
)
def test_mark_dirty_appends_a_local_segment(label: str, marked: str) -> None:
    assert mark_dirty(label) == marked
    version = Version("2.9.1" + marked)
    assert version.local is not None
    assert version.local.endswith("dirty")
    assert version.public == "2.9.1"


def test_dirty_checkout_marks_the_versions_it_builds(tmp_path: Path) -> None:
    cfg, src = project_sources(tmp_path)
    dirty = WorkTree(head="a" * 40, paths=("setup.py",), fingerprint="f" * 64)
    torch, vision = build_plan(cfg, src, tmp_path, worktrees={"torch": dirty}).steps
    assert torch.version == torch.env["PYTORCH_BUILD_VERSION"] == "2.9.0+rocm6.4.dirty"
    assert torch.worktree == dirty
    assert vision.version == "0.24.0a0+rocm6.4"  # its own checkout is clean
    sha = "0123456789abcdef" * 2 + "01234567"
    dev = {"torch": Revision(commit=sha, ref="main")}
    torch, _ = build_plan(cfg, src, tmp_path / "b", revisions=dev, worktrees={"torch": dirty}).steps
    assert torch.version == "2.9.0+git01234567.rocm6.4.dirty"
    assert Version(torch.version).local == "git01234567.rocm6.4.dirty"


def test_dirty_checkout_is_refused_with_its_paths_unless_allowed() -> None:
    clean = WorkTree(head="a" * 40)
    paths = ("a.c", "b.c", "third_party/x/new.h", "z.txt")
    dirty = WorkTree(head="b" * 40, paths=paths, fingerprint="f" * 64)
    refuse_dirty({"torch": clean}, allow=False)
    refuse_dirty({"torch": dirty}, allow=True)
    with pytest.raises(DirtyCheckout) as err:
        refuse_dirty({"torch": clean, "torchvision": dirty}, allow=False)
    msg = str(err.value)
    assert err.value.exit_code == 6
    assert "\n" not in msg
    assert msg.startswith("torchvision: ")
    assert "a.c, b.c, third_party/x/new.h and 1 more" in msg
    assert "git stash" in msg
    assert "--allow-dirty" in msg


def test_status_entries_and_build_outputs() -> None:
    out = " M setup.py\0R  new name.c\0old name.c\0?? build/x.o\0?? notes.txt\0"
    assert parse_status(out) == [
        (" M", "setup.py"),
        ("R ", "new name.c"),
        ("??", "build/x.o"),
        ("??", "notes.txt"),
    ]
    for path in ("build/lib/x.so", "dist/a.whl", "torch.egg-info/PKG-INFO", "a/__pycache__/b.pyc"):
        assert build_output(path)
    for path in ("build", "builder/x.c", "src/build.py", "__pycache__"):
        assert not build_output(path)


def test_worktree_key_holds_the_dirty_fingerprint() -> None:
    clean = WorkTree(head="a" * 40, submodules=(("third_party/x", "c" * 40),))
    dirty = WorkTree(head="a" * 40, submodules=clean.submodules, paths=("n",), fingerprint="f")
    assert clean.as_key() != dirty.as_key()
    assert not clean.dirty
    assert dirty.dirty
