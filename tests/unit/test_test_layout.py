"""The tests keep their shape: a test module imports helpers from ``tests.support`` or from its
own folder's ``conftest`` and helper modules, never from another ``test_*.py`` module (a helper
two test modules share is moved, not imported from where it was first written)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _module_name(path: Path) -> str:
    return ".".join(("tests", *path.relative_to(TESTS).with_suffix("").parts))


def _imported(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    """The dotted names ``node`` imports, relative imports resolved against ``module``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".")[: -node.level]
        base = ".".join([*package, *([base] if base else [])])
    # ``from . import test_x`` imports a module; ``from .test_x import y`` one of its names
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def imports_of_test_modules(text: str, module: str) -> list[str]:
    """``line: name`` for every import, in the source ``text`` of ``module``, of a ``test_*``
    module of the tests or of a name in one."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for name in _imported(node, module):
                if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith("test_"):
                    found.append(f"{node.lineno}: {name}")
                    break
    return found


def test_the_check_sees_the_tests() -> None:
    names = {p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py")}
    assert {"unit/test_layout.py", "integration/test_marker.py"} <= names


def test_the_import_check_can_fail() -> None:
    sample = (
        "from tests.support.trees import make_tree\n"
        "from .conftest import guard\n"
        "from tests.unit.test_dist import CFG\n"
        "from .test_build import GIB\n"
        "from . import test_arch\n"
        "import tests.unit.test_cpus\n"
        "from ..integration.cli.test_global_flags import x\n"
    )
    assert imports_of_test_modules(sample, "tests.unit.test_sample") == [
        "3: tests.unit.test_dist",
        "4: tests.unit.test_build",
        "5: tests.unit.test_arch",
        "6: tests.unit.test_cpus",
        "7: tests.integration.cli.test_global_flags",
    ]


def test_no_test_module_imports_another() -> None:
    offenders = {
        path.relative_to(TESTS).as_posix(): found
        for path in sorted(TESTS.rglob("*.py"))
        if (found := imports_of_test_modules(path.read_text(encoding="utf-8"), _module_name(path)))
    }
    assert offenders == {}, "move the shared helper into tests/support or the folder's helpers"
