"""State files read back by the checkout (journal, source manifest) are checked for the types
rocm-build writes, so a damaged or hand-made one is one line, not a traceback."""

from __future__ import annotations

from typing import Any

import pytest

from rocm_build.repo.manifest import entry_problem
from rocm_build.sources.journal import _journal_problem

SHA = "0" * 40
GOOD_JOURNAL: dict[str, Any] = {
    "format": 1,
    "project": "proj",
    "created": True,
    "target": SHA,
    "pid": 1,
    "steps": [{"step": "begin", "heads": {}}, {"step": "fetch", "heads": {".": SHA}}],
}


def test_a_journal_rocm_build_writes_passes() -> None:
    assert _journal_problem(GOOD_JOURNAL) == ""


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"format": 2}, "format"),
        ({"created": "yes"}, "created"),
        ({"target": "HEAD"}, "target"),
        ({"target": 5}, "target"),
        ({"steps": "x"}, "steps"),
        ({"steps": []}, "steps"),
        ({"steps": [1]}, "no name"),
        ({"steps": [{"step": "fetch", "heads": [SHA]}]}, "heads"),
        ({"steps": [{"step": "fetch", "heads": {".": "main"}}]}, "heads"),
    ],
)
def test_a_journal_of_the_wrong_types_is_named(change: dict[str, Any], problem: str) -> None:
    assert problem in _journal_problem({**GOOD_JOURNAL, **change})


def test_a_journal_that_is_not_an_object() -> None:
    assert _journal_problem(["format", 1]) == "not an object"


GOOD_ENTRY: dict[str, Any] = {
    "origin": "file:///x",
    "ref": "v1",
    "commit": SHA,
    "head": SHA,
    "submodules": [{"path": "sub", "commit": SHA, "head": SHA}],
    "patches": [{"repo": ".", "stage": "base", "file": "base/0001-x.patch", "sha256": "ab"}],
    "hipify": True,
    "hipify_command": ["{python}", "h.py"],
    "depth": 0,
    "complete": True,
}


def test_a_manifest_entry_rocm_build_writes_passes() -> None:
    assert entry_problem(GOOD_ENTRY) == ""
    assert entry_problem({**GOOD_ENTRY, "depth": None}) == ""


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("depth", True),
        ("depth", -1),
        ("depth", "1"),
        ("head", 1),
        ("hipify", "yes"),
        ("hipify_command", "h.py"),
        ("submodules", [{"commit": SHA}]),
        ("submodules", ["sub"]),
        ("patches", [{"file": 1, "sha256": "ab"}]),
    ],
)
def test_a_manifest_entry_of_the_wrong_types_is_named(key: str, value: object) -> None:
    assert f"'{key}'" in entry_problem({**GOOD_ENTRY, key: value})
