"""The series rocm-build ships (rocm_build/sources/shipped_patches/, package data): one folder
per release train, each series well-formed (no network: the CI job ci/shipped-patches.yml applies
them to their upstream); it and the smoke suite (rocm_build/smoke/suite/) are in the built wheel
and found by an installed rocm-build; a user's own series win over them, and save-patches never
writes into the shipped copy."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from rocm_build import config, smoke
from rocm_build.common.errors import FileAccessError, RocmBuildError
from rocm_build.sources import patches
from tests.conftest import REPO, CliRunner
from tests.support.cicalls import rocm_build_calls, unknown_calls
from tests.support.installed import installed_locations, run_away

SHIPPED = REPO / "rocm_build" / "sources" / "shipped_patches"
SUITE = REPO / "rocm_build" / "smoke" / "suite"
GOOD = """From 0123456789abcdef0123456789abcdef01234567 Mon Sep 17 00:00:00 2001
From: A <a@example.org>
Subject: [PATCH] fix

---
 a.txt | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/a.txt b/a.txt
--- a/a.txt
+++ b/a.txt
@@ -1 +1 @@
-old
+new
"""


DEFAULTS = config.load_defaults()


def series_problems(root: Path, project_folders: set[str]) -> list[str]:
    """What is wrong with the shipped tree ``root`` (a patches/ folder): per train, a README.md
    or a series; each project folder a known project's; each series a patch series."""
    problems: list[str] = []
    for train in sorted(p for p in root.iterdir() if p.is_dir()):
        projects = [p for p in train.iterdir() if p.is_dir()]
        if not projects and not (train / "README.md").is_file():
            problems.append(f"{train.name}: neither a series nor a README.md")
        for project in projects:
            if project.name not in project_folders:
                problems.append(f"{train.name}/{project.name}: no such project")
                continue
            try:
                series = patches.list_series(project)
                for patch in series:
                    patches._mails_in(patch, project.name)
            except RocmBuildError as exc:
                problems.append(f"{train.name}/{project.name}: {exc}")
                continue
            if not series:
                problems.append(f"{train.name}/{project.name}: an empty series folder")
            for patch in series:
                parsed = subprocess.run(
                    ["git", "apply", "--numstat", str(patch.path)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if parsed.returncode != 0:
                    problems.append(f"{patch.path}: {parsed.stderr.strip()}")
    return problems


def test_every_known_train_has_a_shipped_folder() -> None:
    trains = set(DEFAULTS["trains"])
    assert trains, "defaults.toml lists no release trains"
    shipped = {p.name for p in SHIPPED.iterdir() if p.is_dir()}
    assert shipped == trains
    assert (SHIPPED / "README.md").is_file()


def test_every_shipped_series_is_well_formed() -> None:
    folders = {str(spec["patches"]) for spec in DEFAULTS["projects"].values()}
    assert series_problems(SHIPPED, folders) == []


def test_the_series_check_finds_what_is_wrong(tmp_path: Path) -> None:
    """The check can fail: a train with nothing, a stray project, a file holding no diff, a
    patch outside base/ or hipified/, a diff git cannot parse."""
    (tmp_path / "2.9").mkdir()
    (tmp_path / "2.10" / "nosuch").mkdir(parents=True)
    (tmp_path / "2.11" / "torch" / "base").mkdir(parents=True)
    (tmp_path / "2.11" / "torch" / "base" / "0001-x.patch").write_text("just words\n")
    (tmp_path / "2.12" / "torch").mkdir(parents=True)
    (tmp_path / "2.12" / "torch" / "0001-loose.patch").write_text(GOOD)
    (tmp_path / "2.13" / "torch" / "base").mkdir(parents=True)
    (tmp_path / "2.13" / "torch" / "base" / "0001-cut.patch").write_text(GOOD[:-12])
    (tmp_path / "2.14" / "torch" / "base").mkdir(parents=True)
    (tmp_path / "2.14" / "torch" / "base" / "0001-good.patch").write_text(GOOD)
    problems = series_problems(tmp_path, {"torch"})
    assert [p.split(":")[0] for p in problems] == [
        "2.10/nosuch",
        "2.11/torch",
        "2.12/torch",
        str(tmp_path / "2.13" / "torch" / "base" / "0001-cut.patch"),
        "2.9",
    ]


# --- package data: a built wheel holds both folders, an installed rocm-build finds them --------

#: The package data that ships as folders (rel. to the repository), by the lookup that finds them.
PACKAGE_DATA = {"suite_dir": SUITE, "shipped_dir": SHIPPED}


def data_files(folder: Path) -> list[str]:
    """Every file of a package-data folder, relative to it."""
    return [
        p.relative_to(folder).as_posix()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    ]


def wheel_problems(names: set[str]) -> list[str]:
    """What a wheel of rocm-build (its member names) lacks of the package data, or holds where
    a data-files install would put it (``*.data/``, not found by importlib.resources)."""
    expected = [
        f"{folder.relative_to(REPO).as_posix()}/{f}"
        for folder in PACKAGE_DATA.values()
        for f in data_files(folder)
    ]
    problems = [f"missing: {f}" for f in expected if f not in names]
    problems += [f"data-files: {n}" for n in sorted(names) if ".data/" in n]
    return problems


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rocm-build's wheel, built by ``python -m build`` from a copy of the package sources (the
    build writes build/ and *.egg-info beside them)."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(
        REPO / "rocm_build", src / "rocm_build", ignore=shutil.ignore_patterns("__pycache__")
    )
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(out), str(src)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = out.glob("rocm_build-*.whl")
    return wheel


@pytest.mark.slow
def test_the_wheel_holds_the_suite_and_the_series_as_package_data(built_wheel: Path) -> None:
    with zipfile.ZipFile(built_wheel) as wheel:
        names = set(wheel.namelist())
    assert all(data_files(folder) for folder in PACKAGE_DATA.values())
    assert wheel_problems(names) == []


@pytest.mark.slow
def test_the_wheel_check_can_fail(built_wheel: Path) -> None:
    """A file package-data's globs do not match (pytest.ini, a README) and a data-files entry."""
    with zipfile.ZipFile(built_wheel) as wheel:
        names = set(wheel.namelist())
    left_out = ["rocm_build/smoke/suite/pytest.ini", "rocm_build/sources/shipped_patches/README.md"]
    odd = "rocm_build-0.2.0.data/data/share/rocm-build/patches/README.md"
    assert wheel_problems(names - set(left_out) | {odd}) == [
        *(f"missing: {f}" for f in left_out),
        f"data-files: {odd}",
    ]


@pytest.mark.slow
def test_an_installed_rocm_build_finds_the_suite_and_the_series(
    built_wheel: Path, tmp_path: Path
) -> None:
    """The wheel installed (not editable) into a fresh venv, its dependencies this Python's:
    suite_dir() and shipped_dir() are folders of the installed package holding every file, and
    save-patches may not write into them."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(sysconfig.get_paths(vars={"base": str(venv)})["purelib"])
    here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "deps.pth").write_text("".join(f"{p}\n" for p in sorted(here)))
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    installed = subprocess.run(
        [*pip, "--no-deps", "--no-index", str(built_wheel)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    found = {k: Path(v) for k, v in installed_locations(python, tmp_path).items()}
    package = found.pop("package").parent
    assert package == site / "rocm_build"
    for name, folder in PACKAGE_DATA.items():
        assert found[name] == package / folder.relative_to(REPO / "rocm_build"), name
        assert data_files(found[name]) == data_files(folder), name
    save = "from rocm_build.sources import patches as p; p.check_save_root(p.shipped_dir())"
    refused = run_away(python, tmp_path, save)
    assert "FileAccessError" in refused.stderr
    assert "pass --patches-dir" in refused.stderr


def test_the_shipped_folder_of_a_source_checkout_is_its_patches() -> None:
    assert patches.shipped_dir() == SHIPPED


def test_the_smoke_suite_of_a_source_checkout_is_its_own() -> None:
    assert smoke.suite_dir() == SUITE


def _series(root: Path, name: str) -> Path:
    path = root / "2.11" / "torch" / "base" / name
    path.parent.mkdir(parents=True)
    path.write_text(GOOD)
    return root / "2.11" / "torch"


def test_the_users_series_wins_over_the_shipped_one(tmp_path: Path) -> None:
    shipped = _series(tmp_path / "shipped", "0001-shipped.patch").parent.parent
    own = _series(tmp_path / "own", "0001-own.patch").parent.parent
    assert patches.find_root(own, "2.11", "torch", shipped=shipped) == own / "2.11" / "torch"


def test_an_empty_folder_of_the_user_turns_the_shipped_series_off(tmp_path: Path) -> None:
    shipped = _series(tmp_path / "shipped", "0001-shipped.patch").parent.parent
    (tmp_path / "own" / "2.11" / "torch").mkdir(parents=True)
    root = patches.find_root(tmp_path / "own", "2.11", "torch", shipped=shipped)
    assert patches.list_series(root) == ()


def test_without_a_series_of_the_user_the_shipped_one_is_applied(tmp_path: Path) -> None:
    shipped = _series(tmp_path / "shipped", "0001-shipped.patch").parent.parent
    root = patches.find_root(tmp_path / "own", "2.11", "torch", shipped=shipped)
    assert root == shipped / "2.11" / "torch"
    assert [p.path.name for p in patches.list_series(root)] == ["0001-shipped.patch"]
    # No series anywhere: the user's folder (absent), where save-patches would write it.
    other = patches.find_root(tmp_path / "own", "2.11", "torchvision", shipped=shipped)
    assert other == tmp_path / "own" / "2.11" / "torchvision"


@pytest.mark.parametrize("rel", ["", "2.11/torch", "2.11/../2.9/torch"])
def test_save_patches_never_writes_into_the_installed_series(rel: str) -> None:
    target = patches.installed_dir() / rel
    with pytest.raises(FileAccessError, match="pass --patches-dir"):
        patches.check_save_root(target)
    assert not (patches.installed_dir() / "2.11" / "torch").exists()


def test_save_patches_writes_into_a_folder_of_the_user(tmp_path: Path) -> None:
    patches.check_save_root(tmp_path / "patches" / "2.11" / "torch")


def test_the_ci_job_applies_the_shipped_series_with_flags_that_exist(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    """ci/shipped-patches.yml checks out each shipped series with rocm-build: the commands and
    flags it calls exist, and it reads the series from the shipped folder."""
    workflow = yaml.safe_load((REPO / "ci" / "shipped-patches.yml").read_text())
    calls = rocm_build_calls(workflow)
    unknown, seen = unknown_calls(run_cli, calls, tmp_path)
    assert unknown == []
    assert seen == {"checkout"}
    assert "rocm_build/sources/shipped_patches/*/" in yaml.safe_dump(workflow)
