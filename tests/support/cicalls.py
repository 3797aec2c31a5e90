"""The `rocm-build ...` command lines a CI workflow runs, and which of their commands and
flags the real CLI does not have (looked up in its help)."""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.conftest import CliRunner


def walk_strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from walk_strings(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_strings(item)


def rocm_build_calls(workflow: dict[str, Any]) -> list[list[str]]:
    """Every `rocm-build ...` command line in the jobs' steps, as words (global options first)."""
    calls = []
    for text in walk_strings(workflow["jobs"]):
        for line in text.splitlines():
            match = re.search(r"(?:^|[\s(])rocm-build\s+([^)>|;&]*)", line)
            if match:
                calls.append(shlex.split(match[1]))
    return calls


def unknown_calls(
    run_cli: CliRunner, calls: list[list[str]], cwd: Path
) -> tuple[list[str], set[str]]:
    """(what rocm-build does not have, the commands it has) among ``calls``: every command and
    flag is looked up in the real CLI's help."""
    top = run_cli(["--help"], cwd=cwd, check=True).stdout
    unknown: list[str] = []
    seen = set()
    for words in calls:
        global_flags = list(itertools.takewhile(lambda w: w.startswith("-"), words))
        unknown += [f"global option {f}" for f in global_flags if f not in top]
        command = words[len(global_flags) :]
        path = command[:1]
        helped = run_cli([*path, "--help"], cwd=cwd)
        if "Commands:" in helped.stdout and len(command) > 1:  # a group: rocm fetch
            path = command[:2]
            helped = run_cli([*path, "--help"], cwd=cwd)
        if helped.returncode != 0:
            last = (helped.stderr.strip().splitlines() or [""])[-1]
            unknown.append(f"command {' '.join(path)} ({last})")
            continue
        seen.add(" ".join(path))
        flags = (w.split("=")[0] for w in command[len(path) :] if w.startswith("--"))
        unknown += [f"{' '.join(path)} {f}" for f in flags if f not in helped.stdout]
    return unknown, seen
