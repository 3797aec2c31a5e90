"""Patch-series layout: which files belong to which repository and stage (no processes)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rocm_build.common.errors import ConfigError
from rocm_build.sources import patches


def _write(root: Path, rel: str, text: str = "patch\n") -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_series_root_layout(tmp_path: Path) -> None:
    assert patches.series_root(tmp_path, "2.9", "torch") == tmp_path / "2.9" / "torch"


def test_list_series_sorts_by_repo_stage_and_number(tmp_path: Path) -> None:
    root = tmp_path / "2.9" / "torch"
    _write(root, "hipified/0001-after.patch")
    _write(root, "base/0002-second.patch")
    _write(root, "base/0001-first.patch", "first\n")
    _write(root, "third_party/gloo/base/0001-gloo.patch")
    _write(root, "third_party/a/b/hipified/0001-nested.patch")
    _write(root, ".torch.new-123/base/0001-staging.patch")  # an interrupted save
    _write(root, "README.md", "notes\n")
    series = patches.list_series(root)
    assert [(p.repo, p.stage, p.path.name) for p in series] == [
        (".", "base", "0001-first.patch"),
        (".", "base", "0002-second.patch"),
        (".", "hipified", "0001-after.patch"),
        ("third_party/a/b", "hipified", "0001-nested.patch"),
        ("third_party/gloo", "base", "0001-gloo.patch"),
    ]
    assert series[0].sha256 == hashlib.sha256(b"first\n").hexdigest()
    assert series[0].rel == "base/0001-first.patch"
    assert series[4].rel == "third_party/gloo/base/0001-gloo.patch"
    assert series[4].as_json()["repo"] == "third_party/gloo"


def test_missing_series_is_empty(tmp_path: Path) -> None:
    assert patches.list_series(tmp_path / "nope") == ()


def test_patch_outside_a_stage_folder_is_an_error(tmp_path: Path) -> None:
    _write(tmp_path, "third_party/gloo/0001-stray.patch")
    with pytest.raises(ConfigError, match=r"not in a base/ or hipified/ folder"):
        patches.list_series(tmp_path)


def test_by_repo_groups_one_stage(tmp_path: Path) -> None:
    _write(tmp_path, "base/0001-a.patch")
    _write(tmp_path, "sub/base/0001-b.patch")
    _write(tmp_path, "sub/hipified/0001-c.patch")
    grouped = patches.by_repo(patches.list_series(tmp_path), "base")
    assert {k: [p.path.name for p in v] for k, v in grouped.items()} == {
        ".": ["0001-a.patch"],
        "sub": ["0001-b.patch"],
    }


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("base/0001-a.patch", True),
        ("x/y/hipified/0001-a.patch", True),
        ("README.md", False),
        ("base/notes.txt", False),
        ("0001-a.patch", False),
    ],
)
def test_series_file_recognition(rel: str, expected: bool) -> None:
    assert patches._is_series_file(rel) is expected
