"""Hostile or awkward inputs on the source side: manifests of the wrong types, a read-only patch
folder, build output the project's .gitignore does not hide. Each is one line with a
documented exit code, or (build output) no reason to stop at all."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocm_build.sources.patches import installed_dir

from .sources_fixture import Project, commit_files, git, make_project, tree_bytes

pytestmark = pytest.mark.slow

MANIFEST = Path("src") / "rocm-build-sources.json"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, Path]:
    base = tmp_path_factory.mktemp("inputs")
    p = make_project(base)
    p.rb("checkout")
    shutil.copytree(p.work, base / "checked-out", symlinks=True)
    return p, base / "checked-out"


@pytest.fixture
def project(made: tuple[Project, Path]) -> Project:
    p, initial = made
    shutil.rmtree(p.work)
    shutil.copytree(initial, p.work, symlinks=True)
    return p


def _one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


BAD_ENTRIES: list[tuple[str, Any]] = [
    ("depth", "deep"),
    ("depth", None),  # fine: the config's depth
    ("submodules", "sub"),
    ("submodules", [{"path": 1}]),
    ("patches", [{"file": "x.patch"}]),
    ("patches", {"file": "x"}),
    ("hipify_command", "python"),
    ("head", 12),
    ("complete", "yes"),
    ("origin", ["file:///x"]),
]


@pytest.mark.parametrize(("key", "value"), BAD_ENTRIES)
def test_a_manifest_of_the_wrong_types_is_one_line(
    project: Project, key: str, value: object
) -> None:
    path = project.work / MANIFEST
    data = json.loads(path.read_text())
    data["projects"]["proj"][key] = value
    replay = project.base / "replay.json"
    replay.write_text(json.dumps(data))
    runs = [("checkout", "--manifest", str(replay))]
    if key != "depth" or value is not None:
        path.write_text(json.dumps(data))
        runs += [("checkout",), ("save-patches",)]
    for args in runs:
        res = project.rb(*args, check=False)
        if key == "depth" and value is None:
            assert res.returncode == 0, res.stderr
            continue
        assert res.returncode == 2, f"{args}: {res.stderr}"
        assert f"'{key}'" in _one_line(res.stderr), args


def test_a_replayed_manifest_without_a_commit_is_one_line(project: Project) -> None:
    data = json.loads((project.work / MANIFEST).read_text())
    del data["projects"]["proj"]["commit"]
    replay = project.base / "replay.json"
    replay.write_text(json.dumps(data))
    res = project.rb("checkout", "--manifest", str(replay), check=False)
    assert res.returncode == 2, res.stderr
    assert "commit" in _one_line(res.stderr)


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    mounted: list[Path] = []
    yield mounted
    for point in reversed(mounted):
        subprocess.run(["umount", str(point)], check=False)


def test_save_patches_into_a_read_only_patch_folder(project: Project, mounts: list[Path]) -> None:
    commit_files(project.src, {"NOTES": "new\n"}, "hipified: notes")
    patches = project.work / "patches"
    before = tree_bytes(patches)
    try:
        subprocess.run(
            ["mount", "--bind", "-o", "ro", str(patches), str(patches)],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount here (needs root and mount rights): {exc}")
    mounts.append(patches)
    res = project.rb("save-patches", check=False)
    assert res.returncode == 14, res.stderr
    line = _one_line(res.stderr)
    assert "cannot write the patch folder" in line
    assert "Read-only file system" in line
    assert tree_bytes(patches) == before


def test_save_patches_never_writes_into_the_series_installed_with_rocm_build(
    project: Project,
) -> None:
    """The shipped series (package data of the rocm_build that runs: the checkout's here)
    belong to the installation: save-patches stops before writing there."""
    commit_files(project.src, {"NOTES": "new\n"}, "hipified: notes")
    installed = installed_dir()
    before = tree_bytes(installed)
    try:
        res = project.rb("save-patches", "--patches-dir", str(installed), check=False)
        assert tree_bytes(installed) == before
    finally:  # a save-patches without the guard wrote into the package: take it out again
        for rel in set(tree_bytes(installed)) - set(before):
            (installed / rel).unlink()
        for folder in sorted(installed.rglob("*"), reverse=True):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    assert res.returncode == 14, res.stderr
    line = _one_line(res.stderr)
    assert "the series installed with rocm-build" in line
    assert "pass --patches-dir" in line


def test_save_patches_does_not_ask_to_commit_build_output(project: Project) -> None:
    """setuptools' build/ and *.egg-info/ in a project whose .gitignore lacks them: not work
    to save, so save-patches neither stops for them nor touches them."""
    commit_files(project.src, {"NOTES": "new\n"}, "hipified: notes")
    outputs = [
        project.src / "build" / "lib" / "k.so",
        project.src / "proj.egg-info" / "PKG-INFO",
        project.src / "sub" / "build" / "temp" / "s.o",
    ]
    for path in outputs:
        path.parent.mkdir(parents=True)
        path.write_bytes(b"built\n")
    res = project.rb("save-patches", check=False)
    assert res.returncode == 0, res.stderr
    assert all(path.read_bytes() == b"built\n" for path in outputs)
    assert any(project.series.rglob("*-notes.patch"))
    # A real edit next to them still stops it, naming the edit, not the build output.
    (project.src / "README.md").write_text("edited\n")
    (project.src / "build" / "more.txt").write_text("x\n")
    res = project.rb("save-patches", check=False)
    assert res.returncode == 6, res.stderr
    line = _one_line(res.stderr)
    assert "README.md" in line
    assert "build/" not in line
    assert git(project.src, "status", "--porcelain", "--", "README.md")
