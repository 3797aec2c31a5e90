"""Folders rocm-build ships as package data (the smoke suite, the shipped patch series), found
the same way in a checkout, an editable install and a regular one."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from rocm_build.common.errors import ConfigError

__all__ = ["data_folder"]


def data_folder(package: str, name: str, what: str, used_by: str) -> Path:
    """``<package>/<name>`` as a real folder; inside an archive (a zipped install) it is a
    ``ConfigError`` naming ``what`` it holds and what needs a folder (``used_by``)."""
    folder = resources.files(package) / name
    if not isinstance(folder, Path):
        msg = (
            f"{what} {'are' if what.endswith('s') else 'is'} inside an archive ({folder}), not a "
            f"folder {used_by}; install rocm-build as a regular package (pip install rocm-build)"
        )
        raise ConfigError(msg)
    return folder
