"""The smoke suite's files: package data (``suite/``), copied next to the environment under test
and run there by that environment's pytest."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from rocm_build.errors import ConfigError

__all__ = ["SUITE_FILES", "copy_suite", "suite_dir"]

SUITE_FILES = ("conftest.py", "pytest.ini", "smoke_*.py", "test_*.py")


def suite_dir() -> Path:
    """The smoke suite, package data of ``rocm_build.smoke`` (its ``suite/`` folder) in a
    checkout, an editable install and a regular one alike. A real folder: it is copied next to
    the environment under test and run there by that environment's pytest."""
    suite = resources.files("rocm_build.smoke") / "suite"
    if not isinstance(suite, Path):
        msg = (
            f"the smoke suite is inside an archive ({suite}), not a folder pytest can run; "
            "install rocm-build as a regular package (pip install rocm-build)"
        )
        raise ConfigError(msg)
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
