"""Only the wheel analysis walks a wheel's members looking for ELF files: the build's wheel
check, ``inspect`` and ``bundle`` use it, and nothing reaches into the bundle's private
helpers."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "rocm_build"


def sources() -> dict[str, str]:
    """rocm_build's modules; not the smoke suite (package data run in the environment under
    test, with its own stdlib ELF reader: it cannot import rocm_build)."""
    suite = PACKAGE / "smoke" / "suite"
    return {
        p.relative_to(PACKAGE).as_posix(): p.read_text()
        for p in PACKAGE.rglob("*.py")
        if not p.is_relative_to(suite)
    }


def test_only_the_analysis_looks_for_elf_magic() -> None:
    users = sorted(name for name, text in sources().items() if "ELF_MAGIC" in text)
    # binary/ parses one file it was handed (elf reads it, kpacksplit rewrites it): no walk
    assert [u for u in users if not u.startswith("binary/")] == ["wheel/analyze.py"]


def test_the_three_callers_use_the_analysis() -> None:
    text = sources()
    assert "analyze_path(wheel)" in text["building/wheelcheck.py"]
    assert "analyze(reader, pe_files=True)" in text["bundle/report.py"]
    assert "analyze(reader, device_code=" in text["bundle/linux.py"]


def private_bundle_names(text: str) -> list[str]:
    """``bundle._x`` and ``from .bundle[.mod] import _x`` in a module's source."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            if isinstance(node.value, ast.Name) and node.value.id == "bundle":
                found.append(node.attr)
        elif isinstance(node, ast.ImportFrom) and "bundle" in (node.module or "").split("."):
            found += [a.name for a in node.names if a.name.startswith("_")]
    return found


def test_no_module_reaches_into_the_bundle_private_helpers() -> None:
    assert private_bundle_names("from .bundle import _x\nbundle._y()\n") == ["_x", "_y"]
    outside = [name for name, text in sources().items() if not name.startswith("bundle/")]
    found = {name: private_bundle_names(sources()[name]) for name in outside}
    assert {name: names for name, names in found.items() if names} == {}
