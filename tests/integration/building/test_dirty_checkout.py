"""Uncommitted changes in a checkout (tracked edits, untracked files, in a submodule too) are never
answered with the last clean wheel: ``build`` stops with exit 6 before anything is built, and
``--allow-dirty`` builds the working tree into a wheel marked ``.dirty`` that the report says is
dirty. Real git repositories, the fixture torch built against the real ROCm tree."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

from tests.conftest import GIT_IDENTITY

from .conftest import Workspace

pytestmark = pytest.mark.slow


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_IDENTITY}
    cmd = ["git", "-c", "protocol.file.allow=always", *args]
    return subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def status(repo: Path) -> str:
    return git(repo, "status", "--porcelain", "--untracked-files=all", "--ignore-submodules=none")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "uncommitted changes" in line]


def test_tracked_edit_stops_the_build_and_changes_nothing(workspace: Workspace) -> None:
    src = workspace.root / "src" / "torch"
    (src / "version.txt").write_text("2.9.0a0\n# an edit\n")
    before = status(src)
    result = workspace.build("torch")
    assert result.returncode == 6, result.stderr
    (line,) = error_lines(result.stderr)
    assert "torch: its checkout has uncommitted changes (version.txt)" in line
    assert "git stash" in line
    assert "--allow-dirty" in line
    assert not workspace.wheels.exists()
    assert not (workspace.root / ".rocm-build" / "logs").exists()
    assert status(src) == before
    assert (src / "version.txt").read_text() == "2.9.0a0\n# an edit\n"
    assert workspace.build("torch", "--dry-run").returncode == 6  # the plan refuses it too


def test_untracked_file_in_a_submodule_counts_and_ignored_files_do_not(
    workspace: Workspace, tmp_path: Path
) -> None:
    dep = tmp_path / "dep"
    dep.mkdir()
    (dep / "dep.h").write_text("#define DEP 1\n")
    git(dep, "init", "-q")
    git(dep, "add", "-A")
    git(dep, "commit", "-qm", "dep")
    src = workspace.root / "src" / "torch"
    git(src, "submodule", "add", "-q", str(dep), "third_party/dep")
    (src / ".gitignore").write_text("*.log\n")
    git(src, "add", "-A")
    git(src, "commit", "-qm", "a submodule")
    # As a checkout leaves it: the parent does not look into its submodules.
    git(src, "config", "submodule.third_party/dep.ignore", "all")
    (src / "compile.log").write_text("ignored\n")
    (src / "build").mkdir()
    (src / "build" / "CMakeCache.txt").write_text("a build's own output\n")
    (src / "third_party" / "dep" / "dep.o").write_bytes(b"\0")
    (src / "third_party" / "dep" / ".gitignore").write_text("*.o\n")
    git(src / "third_party" / "dep", "add", ".gitignore")
    git(src / "third_party" / "dep", "commit", "-qm", "ignore objects")
    clean = workspace.build("torch", "--dry-run")
    assert clean.returncode == 0, clean.stderr

    (src / "third_party" / "dep" / "new.h").write_text("#define NEW 1\n")
    assert "third_party" not in git(src, "status", "--porcelain")  # the parent sees nothing
    result = workspace.build("torch", "--dry-run")
    assert result.returncode == 6, result.stderr
    (line,) = error_lines(result.stderr)
    assert "(third_party/dep/new.h)" in line
    shown = workspace.build("torch", "--dry-run", "--allow-dirty")
    assert shown.returncode == 0, shown.stderr
    assert "uncommitted: third_party/dep/new.h" in shown.stdout


def test_allow_dirty_rebuilds_marks_the_wheel_and_a_commit_clears_it(
    workspace: Workspace,
) -> None:
    first = workspace.build("torch")
    assert first.returncode == 0, first.stderr
    clean_wheel = workspace.wheel("torch")
    assert workspace.report()["projects"]["torch"]["dirty"] is False  # type: ignore[index]

    src = workspace.root / "src" / "torch"
    (src / "NOTES.md").write_text("an untracked note\n")
    dirty = workspace.build("torch", "--allow-dirty", as_json=True)
    assert dirty.returncode == 0, dirty.stderr
    (project,) = json.loads(dirty.stdout)["projects"]
    assert project["reused"] is False  # not the clean wheel of the same commit
    assert project["version"] == "2.9.1+rocm5.2.dirty"
    assert Version(project["version"]).local == "rocm5.2.dirty"
    assert Path(project["wheel"]).name.startswith("torch-2.9.1+rocm5.2.dirty-")
    entry = workspace.report()["projects"]["torch"]  # type: ignore[index]
    assert entry["dirty"] is True
    assert entry["dirty_paths"] == ["NOTES.md"]
    assert len(entry["dirty_fingerprint"]) == 64
    fingerprint = entry["dirty_fingerprint"]

    # The same dirty state is the same input; another edit is a new one.
    again = workspace.build("torch", "--allow-dirty", as_json=True)
    assert json.loads(again.stdout)["projects"][0]["reused"] is True
    (src / "NOTES.md").write_text("an edited note\n")
    edited = workspace.build("torch", "--allow-dirty", as_json=True)
    assert edited.returncode == 0, edited.stderr
    assert json.loads(edited.stdout)["projects"][0]["reused"] is False
    assert workspace.report()["projects"]["torch"]["dirty_fingerprint"] != fingerprint  # type: ignore[index]

    git(src, "add", "-A")
    git(src, "commit", "-qm", "notes")
    head = git(src, "rev-parse", "HEAD").strip()
    committed = workspace.build("torch", as_json=True)
    assert committed.returncode == 0, committed.stderr
    (project,) = json.loads(committed.stdout)["projects"]
    assert project["reused"] is False
    assert project["version"] == f"2.9.0a0+git{head[:8]}.rocm5.2"  # past the tag: a dev build
    entry = workspace.report()["projects"]["torch"]  # type: ignore[index]
    assert (entry["dirty"], entry["dirty_fingerprint"], entry["commit"]) == (False, "", head)
    assert clean_wheel.is_file()
