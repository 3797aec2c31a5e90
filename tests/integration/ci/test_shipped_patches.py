"""The series rocm-build ships (top-level patches/): one folder per release train, each series
well-formed (no network: the CI job ci/shipped-patches.yml applies them to their upstream), all
of it in the installed package; a user's own series win over them, and save-patches never
writes into the installed copy."""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from rocm_build import config
from rocm_build.errors import FileAccessError, RocmBuildError
from rocm_build.sources import patches
from tests.conftest import REPO, CliRunner
from tests.integration.ci.test_checks import rocm_build_calls, unknown_calls

SHIPPED = REPO / "patches"
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


def test_every_shipped_file_is_installed_with_the_package() -> None:
    """pyproject's data-files list each folder: a file under patches/ none of them matches
    would be missing from a pip-installed rocm-build."""
    data_files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "data-files"
    ]
    globs = [g for target, gs in data_files.items() if "patches" in target for g in gs]
    for target, gs in data_files.items():
        for g in gs:
            if g.startswith("patches/"):
                assert target == "share/rocm-build/" + str(Path(g).parent), (target, g)
    files = [p.relative_to(REPO).as_posix() for p in SHIPPED.rglob("*") if p.is_file()]
    assert files
    missing = [f for f in files if not any(fnmatch.fnmatchcase(f, g) for g in globs)]
    assert missing == []


def test_the_shipped_folder_of_a_source_checkout_is_its_patches() -> None:
    assert patches.shipped_dir() == SHIPPED


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
    flags it calls exist, and it reads the series from the shipped patches/ folder."""
    workflow = yaml.safe_load((REPO / "ci" / "shipped-patches.yml").read_text())
    calls = rocm_build_calls(workflow)
    unknown, seen = unknown_calls(run_cli, calls, tmp_path)
    assert unknown == []
    assert seen == {"checkout"}
    assert "patches/*/" in yaml.safe_dump(workflow)
