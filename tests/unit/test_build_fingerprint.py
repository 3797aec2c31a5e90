"""Whether a ``[build]`` setting changes the wheel is declared once, in the schema's field
metadata (``output``): the build's fingerprint (``building.inputs``) takes it in from that mark
alone, as one named part, so a new setting marked so makes a built wheel stale without another
edit, and ``build --dry-run`` names it."""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from rocm_build.building.inputs import PART_WORDS, inputs
from rocm_build.building.plan import Plan, ProjectStep
from rocm_build.config.schema import BuildSettings, output_settings
from rocm_build.repo.worktree import WorkTree
from tests.support.buildplans import build_plan, project_sources
from tests.support.sections import with_extra_setting

#: the settings that change the wheel (their values reach it: the label, aotriton's kernels)
MARKED = {"version_suffix", "aotriton"}

#: settings that change how or whether a wheel is built, never what is in it
UNMARKED = {
    "cache",
    "cache_url",
    "venv",
    "index_url",
    "find_links",
    "no_index",
    "dry_run",
    "force",
    "allow_dirty",
    "rocm_cache",
}


def _plan(tmp_path: Path) -> tuple[Plan, ProjectStep]:
    cfg, src = project_sources(tmp_path)
    plan = build_plan(cfg, src, tmp_path)
    step = replace(plan.steps[0], worktree=WorkTree(head="0" * 40))
    return plan, step


def _key(plan: Plan, step: ProjectStep, settings: Any) -> tuple[str, dict[str, str]]:
    return inputs(replace(plan, settings=settings), step, {})


def test_the_marks_are_those_that_change_the_wheel(tmp_path: Path) -> None:
    plan, _ = _plan(tmp_path)
    assert set(output_settings(plan.settings)) == MARKED
    assert {f.name for f in fields(BuildSettings)} == MARKED | UNMARKED  # each one decided


def test_a_setting_marked_output_changes_the_fingerprint(tmp_path: Path) -> None:
    plan, step = _plan(tmp_path)
    one, parts = _key(plan, step, with_extra_setting(plan.settings, output=True, value=1))
    assert one == _key(plan, step, with_extra_setting(plan.settings, output=True, value=1))[0]
    two, other = _key(plan, step, with_extra_setting(plan.settings, output=True, value=2))
    assert one != two
    assert [k for k in parts if parts[k] != other[k]] == ["settings"]
    assert set(parts) == set(PART_WORDS)  # every part has its words for --dry-run


def test_an_unmarked_setting_leaves_it(tmp_path: Path) -> None:
    plan, step = _plan(tmp_path)
    one, _ = _key(plan, step, with_extra_setting(plan.settings, output=False, value=1))
    assert one == _key(plan, step, with_extra_setting(plan.settings, output=False, value=2))[0]
    changed = replace(plan.settings, force=True, dry_run=True, cache="ccache", allow_dirty=True)
    assert _key(plan, step, plan.settings)[0] == _key(plan, step, changed)[0]


@pytest.mark.parametrize("name", sorted(MARKED))
def test_each_marked_setting_changes_it(tmp_path: Path, name: str) -> None:
    plan, step = _plan(tmp_path)
    other = replace(plan.settings, **{name: getattr(plan.settings, name) + "x"})
    assert _key(plan, step, plan.settings)[0] != _key(plan, step, other)[0]
