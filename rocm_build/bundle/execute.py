"""The bundle stage's run: ``execute(plan, progress)`` does what :func:`.plan.plan` decided,
wheel by wheel (torch first), each by its platform, and answers the :class:`Result`."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocm_build.bundle import platforms
from rocm_build.bundle.model import BundleResult, TorchWheel
from rocm_build.bundle.plan import Plan, plan
from rocm_build.common import faults, tempfiles
from rocm_build.common.errors import BundleError
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.run.context import RunContext

__all__ = ["Result", "bundle_many", "execute"]


@dataclass(frozen=True)
class Result:
    """Per wheel, what the bundle did."""

    results: tuple[BundleResult, ...] = field(default=())

    @property
    def outputs(self) -> list[Path]:
        return [Path(r.output) for r in self.results if r.output]

    @property
    def nothing_to_do(self) -> str:
        """ "" when a wheel was written; else why not."""
        statuses = {r.status for r in self.results}
        if not statuses:
            return "no wheels"
        if statuses == {"planned"}:
            return "dry run: nothing written"
        if statuses <= {"up-to-date", "unchanged"} and not any(
            r.status == "unchanged" and r.plan is not None for r in self.results
        ):
            return "up to date"
        return ""

    def as_json(self) -> dict[str, Any]:
        return {
            "wheels": [r.as_json() for r in self.results],
            "outputs": [str(p) for p in self.outputs],
            "nothing_to_do": self.nothing_to_do,
        }


def execute(plan_: Plan, progress: Progress = NO_PROGRESS) -> Result:
    """Do what each wheel's plan says (``dry_run``: report the plans, write nothing)."""
    if plan_.dry_run:
        each = plan_.seconds / max(len(plan_.tasks), 1)
        return Result(tuple(task.planned(each) for task in plan_.tasks))
    with contextlib.ExitStack() as stack:
        # the wheelhouse's folders of the wheels' target sets, or -w's folder
        folders = dict.fromkeys(t.job.output_dir for t in plan_.tasks if t.action == "bundle")
        for folder in folders or (plan_.output_dir,):
            tempfiles.check_folder(folder)  # made if missing
            # Again at the end: a run killed just before this one may still be going away.
            stack.enter_context(tempfiles.swept(folder))
        faults.point("bundle.swept")
        return _execute(plan_, progress)


def _execute(plan_: Plan, progress: Progress) -> Result:
    plan_.deflate.check()
    results: list[BundleResult] = []
    for task in plan_.tasks:
        if task.job.torch_pending and task.job.torch is not None:
            task = replace(task, job=replace(task.job, torch=_written(task.job.torch)))
        results.append(platforms.PLATFORMS[task.platform].execute(task, progress))
    return Result(tuple(results))


def _written(planned: TorchWheel) -> TorchWheel:
    """The torch fat wheel just written, read: it must hold what its plan said."""
    found = TorchWheel.read(Path(planned.path), planned.lib_dir)
    if dict(found.libs) != dict(planned.libs):
        extra = sorted(set(found.libs) ^ set(planned.libs))
        raise BundleError(
            f"{Path(planned.path).name} does not hold the libraries its plan named "
            f"({', '.join(extra)}); report this, with the command, as a rocm-build bug"
        )
    return found


def bundle_many(
    ctx: RunContext, wheels: Sequence[Path], *, progress: Progress = NO_PROGRESS, **options: Any
) -> list[BundleResult]:
    """:func:`plan` (with ``options``) and :func:`execute` in one call: each wheel's result."""
    return list(execute(plan(ctx, wheels, **options), progress).results)
