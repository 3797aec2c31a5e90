"""Each option that several commands take is declared once, in ``rocm_build/cli/options.py``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[2] / "rocm_build" / "cli"

SHARED = (
    "--rocm",
    "--arch",
    "--src-dir",
    "--patches-dir",
    "--patchset",
    "--output-dir",
    "--work-dir",
    "--train",
    "--ref",
    "--origin",
    "--find-links",
    "--offline",
    "--python",
    "--junit",
    "--cache",
    "--dry-run",
    "--force",
    "--mirror",
    "--config",
    "--verbose",
    "--quiet",
    "--json",
    "--no-wait",
    "--debug-traceback",
)


#: The same flag name for another setting: matrix's lists of trains and Pythons, and the .deb
#: cache of ``rocm debian`` (not the compiler cache).
OTHER_MEANING = {("matrix.py", "--train"), ("matrix.py", "--python"), ("rocm.py", "--cache")}


def declarations(flag: str, source: str) -> int:
    """How often ``source`` declares ``flag`` (as a click option or a global flag's names)."""
    opener = r'(?:click\.option\(|\(\s*\()\s*(?:"-\w",\s*)?'
    return len(re.findall(opener + rf'"{re.escape(flag)}"', source))


@pytest.mark.parametrize("flag", SHARED)
def test_shared_option_is_declared_once_in_options(flag: str) -> None:
    where = {
        path.name: declarations(flag, path.read_text(encoding="utf-8"))
        for path in sorted(CLI.glob("*.py"))
        if (path.name, flag) not in OTHER_MEANING
    }
    assert {name: n for name, n in where.items() if n} == {"options.py": 1}


def test_build_jobs_is_declared_once() -> None:
    """``-j/--jobs`` (compile jobs) once in options.py; checkout's old spelling is its own."""
    options = (CLI / "options.py").read_text(encoding="utf-8")
    assert options.count('"-j", "--jobs"') == 1
    others = {p.name for p in CLI.glob("*.py") if '"-j"' in p.read_text(encoding="utf-8")}
    assert others == {"options.py"}


def test_no_module_over_600_lines() -> None:
    for path in CLI.glob("*.py"):
        assert len(path.read_text(encoding="utf-8").splitlines()) <= 600, path.name


def test_no_function_over_80_lines() -> None:
    for path in CLI.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                assert length <= 80, f"{path.name}: {node.name} has {length} lines"
