"""The package keeps its shape: short modules, short functions with few parameters, settings
read only through ``config``'s typed sections. The stages' interface (``plan`` and
``execute``) is checked by behaviour, in ``test_stage_contract.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "rocm_build"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8

#: Modules that another, separate change splits; these checks pass once it lands.
PENDING_LINES: dict[str, pytest.MarkDecorator] = {}
PENDING_FUNCTIONS: dict[str, pytest.MarkDecorator] = {}


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _params(pending: dict[str, pytest.MarkDecorator]) -> list[object]:
    out: list[object] = []
    for path in _modules():
        rel = path.relative_to(PACKAGE).as_posix()
        mark = pending.get(rel)
        out.append(pytest.param(path, id=rel, marks=[mark] if mark else []))
    return out


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``name (N lines)`` for every function or method in ``path`` longer than ``limit``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append(f"{node.name} ({lines} lines)")
    return found


def test_the_checks_see_the_package() -> None:
    names = {p.relative_to(PACKAGE).as_posix() for p in _modules()}
    assert {"config/loader.py", "commands/pipeline.py", "cli/__init__.py"} <= names


def test_the_function_check_can_fail(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    sample = tmp_path / "sample.py"
    sample.write_text(f"def short():\n    pass\n\n\ndef long():\n{body}\n", encoding="utf-8")
    assert long_functions(sample) == [f"long ({MAX_FUNCTION_LINES + 1} lines)"]


@pytest.mark.parametrize("path", _params(PENDING_LINES))
def test_no_module_over_600_lines(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_MODULE_LINES, f"{path.name} has {lines} lines; split it along a seam"


@pytest.mark.parametrize("path", _params(PENDING_FUNCTIONS))
def test_no_function_over_80_lines(path: Path) -> None:
    assert long_functions(path) == []


def wide_functions(path: Path, limit: int = MAX_PARAMETERS) -> list[str]:
    """``name (N parameters)`` for every function or method in ``path`` that takes more than
    ``limit`` (positional, ordinary and keyword-only; a method's ``self`` or ``cls`` not
    counted)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
            if names[:1] in (["self"], ["cls"]):
                names = names[1:]
            if len(names) > limit:
                found.append(f"{node.name} ({len(names)} parameters)")
    return found


def test_the_parameter_check_can_fail(tmp_path: Path) -> None:
    many = ", ".join(f"x{i}" for i in range(MAX_PARAMETERS))
    sample = tmp_path / "sample.py"
    sample.write_text(
        f"class C:\n    def fits(self, {many}):\n        pass\n\n\n"
        f"def wide(a, /, {many}, *, k):\n    pass\n",
        encoding="utf-8",
    )
    assert wide_functions(sample) == [f"wide ({MAX_PARAMETERS + 2} parameters)"]


def test_no_function_takes_over_8_parameters() -> None:
    """Values that travel together go as one (a frozen dataclass with a meaning of its own, or
    the plan they belong to), not as a long list of parameters."""
    wide = {
        f"{path.relative_to(PACKAGE).as_posix()}:{found.split()[0]}": found
        for path in _modules()
        for found in wide_functions(path)
    }
    assert wide == {}


def test_settings_are_read_only_through_config() -> None:
    """No ``cfg["section.key"]`` look-ups: the typed sections (``cfg.build.jobs``) instead."""
    allowed = {"config/loader.py", "config/schema.py"}
    offenders = [
        f"{p.relative_to(PACKAGE)}:{n}"
        for p in _modules()
        if p.relative_to(PACKAGE).as_posix() not in allowed
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if 'cfg["' in line
    ]
    assert offenders == []


#: The only modules at the package's top level: the entry points. Everything else lives in a
#: package: a stage's (sources/, building/, bundle/, smoke/), the command layer's (commands/), the
#: run's context and stage contract (run/), a layer's (config/, repo/, rocm/, wheel/, binary/,
#: cli/), or the shared services every layer uses (common/).
TOP_LEVEL = {"__init__", "__main__"}
PACKAGES = {
    "binary", "building", "bundle", "cli", "commands", "common", "config", "repo", "rocm", "run",
    "smoke", "sources", "wheel",
}  # fmt: skip


def test_the_top_level_holds_only_shared_modules() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert modules - TOP_LEVEL == set(), "a new module belongs in its stage's or layer's package"
    assert packages == PACKAGES


#: A module this long must say why it is one module.
LONG_MODULE_LINES = 500


def test_a_long_module_says_why_it_is_one() -> None:
    """Over 500 lines, the module's docstring has a paragraph starting ``Size:``: the seam that
    was looked for and why the module stays whole."""
    unexplained = []
    for path in _modules():
        text = path.read_text()
        if len(text.splitlines()) > LONG_MODULE_LINES:
            doc = ast.get_docstring(ast.parse(text)) or ""
            if "\nSize: " not in doc:
                unexplained.append(str(path.relative_to(PACKAGE)))
    assert unexplained == []
