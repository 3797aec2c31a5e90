"""The smoke suite's files: package data (``suite/``), copied next to the environment under test
and run there by that environment's pytest."""

from __future__ import annotations

import shutil
from pathlib import Path

from rocm_build.common.errors import ConfigError
from rocm_build.common.packagedata import data_folder

__all__ = ["SUITE_FILES", "copy_suite", "suite_dir"]

SUITE_FILES = ("conftest.py", "pytest.ini", "smoke_*.py", "test_*.py")


def suite_dir() -> Path:
    """The smoke suite, package data of ``rocm_build.smoke`` (its ``suite/`` folder) in a
    checkout, an editable install and a regular one alike. A real folder: it is copied next to
    the environment under test and run there by that environment's pytest."""
    suite = data_folder("rocm_build.smoke", "suite", "the smoke suite", "pytest can run")
    if not (suite / "conftest.py").is_file():
        msg = f"the smoke suite is not in {suite}; reinstall rocm-build"
        raise ConfigError(msg)
    return suite


def copy_suite(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    src = suite_dir()
    for pattern in SUITE_FILES:
        for file in sorted(src.glob(pattern)):
            shutil.copy2(file, dest / file.name)
