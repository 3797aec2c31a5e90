"""The checkout stage's execute: fetch, pin, tag, patch, hipify every project of the plan.

``plan.plan`` turns the settings (and an optional manifest to replay) into a frozen
``Plan``; ``execute`` walks it, one project at a time under its locks (:mod:`.project`),
with the steps of :mod:`.steps`. Each project's inputs (origin, ref -> commit, patch hashes,
hipify command, flags) are hashed into a stamp kept in ``<src-dir>/rocm-build-sources.json``; a
re-run whose stamp and checkout state match does nothing.

Moving branches: a tag or full SHA is taken as immutable, so a re-run needs no network. A branch
is re-checked with one ``git ls-remote`` (no objects are fetched): if it moved, the project is
checked out again at the new commit; if not, it is up to date.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.common.errors import ConfigError
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.repo import checkoutfile, tritonpin
from rocm_build.repo.manifest import (
    RELATED_COMMITS,
    RelatedCommit,
    parse_related_commits,
    read_manifest,
)
from rocm_build.sources.plan import Plan, ProjectPlan
from rocm_build.sources.project import ProjectResult, checkout_project

__all__ = ["ProjectResult", "Result", "execute"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Result:
    manifest: Path
    projects: tuple[ProjectResult, ...]

    @property
    def up_to_date(self) -> bool:
        return all(p.action == "up to date" for p in self.projects)

    @property
    def nothing_to_do(self) -> str:
        return "sources up to date" if self.up_to_date else ""

    @property
    def outputs(self) -> list[Path]:
        return [self.manifest]  # what the checkouts are at, for the build

    def as_json(self) -> dict[str, Any]:
        return {
            "manifest": str(self.manifest),
            "up_to_date": self.up_to_date,
            "projects": [p.as_json() for p in self.projects],
        }


def execute(plan_: Plan, progress: Progress = NO_PROGRESS) -> Result:
    """Check out every project of the plan; per project, objects fetched and files hipified
    are reported to ``progress``. A project whose plan lets the pins decide its ref
    (``follows_pins``) takes it from the related_commits of the checkouts before it, then
    from its pinning project's pin files; the plan itself is not changed."""
    recorded = read_manifest(plan_.manifest_path)["projects"]
    pins: dict[str, RelatedCommit] = {}
    selected = {p.name for p in plan_.projects}
    for name in recorded:
        if name not in selected:
            pins.update(_related(plan_.src_dir / name))
    results: list[ProjectResult] = []
    for p in plan_.projects:
        origin, ref = p.origin, p.ref
        pin = pins.get(p.name) if p.follows_pins else None
        if pin is not None:
            log.info("%s: pinned to %s by related_commits", p.name, pin.commit[:12])
            origin, ref = (p.origin if p.origin_given else pin.origin), pin.commit
        if p.pinned_by and p.follows_pins:
            results.append(_checkout_pinned(p, plan_, origin, progress))
        else:
            results.append(checkout_project(p, plan_, origin, ref, progress))
        pins.update(_related(p.src))
    return Result(plan_.manifest_path, tuple(results))


def _checkout_pinned(p: ProjectPlan, plan_: Plan, origin: str, progress: Progress) -> ProjectResult:
    """A project whose ref the checkout of ``p.pinned_by`` pins (triton: torch's pin files)."""
    pin = tritonpin.read_pin(plan_.src_dir / p.pinned_by, release=p.pin_release, pinner=p.pinned_by)
    log.info("%s: %s pinned by %s", p.name, pin.ref, pin.source)
    try:
        return checkout_project(p, plan_, origin, pin.ref, progress)
    except ConfigError as exc:
        msg = f"{exc} (the ref comes from {pin.source}; pass --ref {p.name}=REF to override)"
        raise ConfigError(msg) from None


def _related(src: Path) -> dict[str, RelatedCommit]:
    text = checkoutfile.read_text(src, RELATED_COMMITS, f"{src.name}'s {RELATED_COMMITS}")
    return parse_related_commits(text) if text is not None else {}
