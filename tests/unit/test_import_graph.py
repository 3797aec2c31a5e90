"""The package has no import circles: every ``from . import x`` / ``from .x import y`` (also inside
functions and ``TYPE_CHECKING`` blocks) points from a higher module to a lower one."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rocm_build"


def module_name(path: Path) -> str:
    parts = ["rocm_build", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path, module: str) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imported(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports, by name."""
    module = module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_of(path, module).split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # "from .a import b": b may be a module of package a, or a name in module a.
            subs = {f"{target}.{alias.name}" for alias in node.names} & modules
            names_only = len(subs) < len(node.names)
            found |= subs | ({target} if names_only or not subs else set())
    return (found & modules) - {module}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): imported(p, modules) for p in paths}


def test_the_graph_sees_the_package() -> None:
    graph = import_graph()
    assert "rocm_build.common.errors" in graph["rocm_build.common.proc"]
    assert "rocm_build.config" in graph["rocm_build.commands.pipeline"]
    assert (
        "rocm_build.building" in graph["rocm_build.commands.pipeline"]
    )  # from . import build as build_mod


def test_no_import_circles() -> None:
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as err:
        pytest.fail(f"import circle: {' -> '.join(err.args[1])}")


STAGES = ("sources", "building", "bundle", "smoke")


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def test_no_stage_imports_another() -> None:
    """The four stages sit on one floor: what two of them share lives below them."""
    crossings = [
        f"{m} -> {d}"
        for m, deps in import_graph().items()
        for d in deps
        if _stage(m) and _stage(d) and _stage(d) != _stage(m)
    ]
    assert crossings == []


def test_only_the_command_layer_reaches_up_into_the_stages() -> None:
    allowed = ("rocm_build.cli", "rocm_build.commands")
    upward = [
        f"{m} -> {d}"
        for m, deps in import_graph().items()
        if not _stage(m) and not m.startswith(allowed)
        for d in deps
        if _stage(d)
    ]
    assert upward == []


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def package_graph() -> dict[str, set[str]]:
    """The import graph with every module folded into its package (``rocm_build.<package>``)."""
    graph: dict[str, set[str]] = {}
    for module, deps in import_graph().items():
        here = _package(module)
        graph.setdefault(here, set()).update(_package(d) for d in deps if _package(d) != here)
    return graph


def test_no_circles_between_packages() -> None:
    try:
        graphlib.TopologicalSorter(package_graph()).prepare()
    except graphlib.CycleError as err:
        pytest.fail(f"package circle: {' -> '.join(err.args[1])}")


def test_the_shared_services_import_nothing_above_them() -> None:
    assert package_graph()["rocm_build.common"] == set()


def test_the_config_layer_imports_only_the_shared_services() -> None:
    assert package_graph()["rocm_build.config"] <= {"rocm_build.common"}
