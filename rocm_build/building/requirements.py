"""What a project's build environment needs before its build runs: the ``[build-system]
requires`` of its pyproject.toml (the PEP 517 default without one), plus what its backend would
ask for (``read_build_requirements``), and a requirement's project name (``req_name``)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from rocm_build.common.errors import BuildFailed
from rocm_build.config.loader import ProjectSpec
from rocm_build.repo import checkoutfile

__all__ = ["DEFAULT_BUILD_REQUIRES", "LEGACY_BACKEND", "read_build_requirements", "req_name"]

#: PEP 517/518's fallback for a pyproject.toml without a [build-system] table (torchvision's and
#: torchaudio's have tool settings only) or without ``requires``/``build-backend`` in it; pip does
#: the same.
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0",)
LEGACY_BACKEND = "setuptools.build_meta:__legacy__"


def read_build_requirements(source: Path, spec: ProjectSpec) -> tuple[str, ...]:
    """What the build environment needs before the build runs: the ``[build-system] requires``
    of the project (the PEP 517 default without one), plus what its backend would ask for.

    A build without isolation (``pip wheel --no-build-isolation``, ``setup.py bdist_wheel``)
    never asks the backend (``get_requires_for_build_wheel``): setuptools' backend asks for
    ``wheel``, which setuptools before 70.1 needs for bdist_wheel (Python 3.11's venvs come with
    setuptools 65), so it is added here whenever setuptools builds the wheel."""
    pyproject = source / "pyproject.toml"
    data: dict[str, Any] = {}
    text = checkoutfile.read_text(source, "pyproject.toml", f"{spec.name}'s pyproject.toml")
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = f"{pyproject}: not valid TOML ({exc})"
            raise BuildFailed(msg) from None
    table = data.get("build-system")
    table = table if isinstance(table, dict) else {}
    raw = table.get("requires")
    requires = [str(r) for r in raw] if isinstance(raw, list) else list(DEFAULT_BUILD_REQUIRES)
    backend = str(table.get("build-backend") or LEGACY_BACKEND)
    by_setuptools = spec.build_tool == "setup.py" or backend.startswith("setuptools.build_meta")
    if by_setuptools and not any(req_name(r) == "wheel" for r in requires):
        requires.append("wheel")
    return tuple(requires)


def req_name(line: str) -> str | None:
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return None
