"""Whether a build would build each project again (``build --dry-run``, ``all --dry-run``):
keep the previous wheel, or build it, and why (no previous wheel, which input changed, a
dependency built again). Reads the checkouts (git) and the last build report; writes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rocm_build.building.execute import _entry_ok, _pinned, _previous, _require_triton
from rocm_build.building.inputs import PART_WORDS, inputs
from rocm_build.building.plan import Plan, ProjectStep
from rocm_build.common import statefile
from rocm_build.common.errors import RocmBuildError

__all__ = ["forecast"]


def forecast(plan: Plan) -> dict[str, str]:
    """Per project, what a build of ``plan`` would do with it and why, in words: "up to date:
    keeps <wheel>" or "would build: <why>" (no previous wheel, which input changed, ...)."""
    previous = _previous(plan)
    kept: dict[str, tuple[str, str]] = {}  # project -> (version, sha256) of the kept wheel
    out: dict[str, str] = {}
    for planned in plan.steps:
        out[planned.name], found = _one(plan, planned, previous.get(planned.name), kept)
        if found is not None:
            kept[planned.name] = found
    return out


def _one(
    plan: Plan, planned: ProjectStep, prev: Any, kept: Mapping[str, tuple[str, str]]
) -> tuple[str, tuple[str, str] | None]:
    if plan.force:
        return "would build: --force rebuilds every project", None
    if not isinstance(prev, dict) or not _entry_ok(prev):
        return "would build: no previous wheel (it was not built in this work folder)", None
    wheel = plan.output_dir / str(prev["wheel"])
    if not wheel.is_file() or statefile.file_sha256(wheel) != prev.get("sha256"):
        return f"would build: its previous wheel {wheel.name} is gone or was changed", None
    in_run = [d for d in planned.depends if any(s.name == d for s in plan.steps)]
    rebuilt = [d for d in in_run if d not in kept]
    if rebuilt:
        return f"would build: it builds against {', '.join(rebuilt)}, built again first", None
    try:
        step, pins = _pinned(plan, planned, {d: kept[d][0] for d in in_run})
    except RocmBuildError as err:
        return f"would build: its dependencies cannot be told ({err})", None
    step = _require_triton(plan, step, {d: kept[d][0] for d in in_run})
    key, parts = inputs(plan, step, {d: kept[d][1] if d in kept else pins[d] for d in pins})
    if not key:
        return "would build: its checkout is no git checkout (nothing to compare)", None
    if key == prev.get("inputs"):
        return f"up to date: keeps {wheel.name}", (str(prev["version"]), str(prev["sha256"]))
    old = prev.get("inputs_parts")
    changed = [PART_WORDS[k] for k in parts if isinstance(old, dict) and old.get(k) != parts[k]]
    why = ", ".join(changed) if changed else "its fingerprint (the last build recorded no parts)"
    return f"would build: changed since {wheel.name}: {why}", None
