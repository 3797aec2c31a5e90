"""all: checkout, build, bundle and smoke in one run, with one configuration.

Each stage's inputs are reduced to a key (sources at their commits and patches, ROCm tree,
targets, settings, the wheels handed over); after a stage succeeds its key and outputs are
written to a stamp file in ``<work_dir>/stamps`` (:mod:`.stamps`). A stage whose key matches its
stamp and whose outputs are still in place is skipped and says so, which is how a run resumes
after a failure or an interruption: only the stages after the last finished one run again. The
run report (JSON and a short Markdown summary) is written whether the run passes or not.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocm_build import __version__, bundle, config, smoke, sources
from rocm_build import building as build_mod
from rocm_build.commands import runreport, stamps
from rocm_build.commands.runreport import StageOutcome
from rocm_build.common import faults, statefile
from rocm_build.common.errors import RocmBuildError
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.repo import worktree
from rocm_build.repo.manifest import MANIFEST_NAME, read_manifest
from rocm_build.run.context import RunContext
from rocm_build.run.stages import Outputs, StageResult

__all__ = [
    "PIPELINE",
    "Stage",
    "StageOutcome",
    "StageWould",
    "dry_run",
    "dry_run_lines",
    "run_all",
]

log = logging.getLogger(__name__)


#: Called as ``on_stage(stage, event, text)``; event is "start", "skip" or "done".
StageCallback = Callable[[str, str, str], None]


@dataclass(frozen=True)
class _Run:
    """One run of ``all``: its inputs, decided before the first stage (the context holds the
    tree and the targets), and the two records the stages add to (``facts``: what the run
    report is made from; ``outcomes``: one per stage, in order)."""

    ctx: RunContext
    specs: tuple[config.ProjectSpec, ...]
    stamps: Path
    redo: bool
    on_stage: StageCallback
    progress: Progress = NO_PROGRESS
    junit: Path | None = None
    outcomes: list[StageOutcome] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)


def blamed(outcomes: Sequence[StageOutcome]) -> str:
    """The stage a failure is blamed on: the one that failed or was interrupted, else the one
    after the last finished (a stop between stages, while "build done" is printed, is not
    build's), else the last."""
    names = [stage.name for stage in PIPELINE]
    if outcomes and outcomes[-1].status in ("failed", "interrupted"):
        return outcomes[-1].name
    return names[min(len(outcomes), len(names) - 1)]


# --- stages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One stage of ``all``: its package, what its stamp key is made of and how it runs (plan,
    then execute).

    ``package``: the stage's package (``plan``, ``execute``); ``inputs(run, handed)`` returns
    what the key is made of (None: no stamp, the stage checks its own state, as checkout does);
    ``run(run, handed)`` plans and executes the stage on the files the stage before handed
    over; ``record``/``keep``: the facts its outputs / its result go under.
    """

    name: str
    package: str
    inputs: Callable[[_Run, list[Path]], Mapping[str, Any] | None]
    run: Callable[[_Run, list[Path]], StageResult]
    record: str = ""
    keep: str = ""


def _checkout(run: _Run, _handed: list[Path]) -> StageResult:
    builtin = {n: str(p.get("origin", "")) for n, p in config.load_defaults()["projects"].items()}
    plan = sources.plan(run.ctx, _names(run), builtin_origins=builtin)
    return sources.execute(plan, run.progress)


def _names(run: _Run) -> list[str]:
    return [s.name for s in run.specs]


def _manifest_entries(ctx: RunContext, names: Sequence[str]) -> dict[str, Any]:
    data = read_manifest(ctx.src_dir / MANIFEST_NAME)
    entries = data.get("projects", {})
    return {n: entries.get(n) for n in names}


def _build_inputs(run: _Run, _handed: list[Path]) -> dict[str, Any]:
    """The build's key: also each checkout as it is now (HEADs, and the fingerprint of its
    uncommitted changes), not only as the manifest says checkout left it, so an edit or a
    commit of the user's after checkout is never answered with the last run's wheels."""
    return {
        "tool": __version__,
        "python": sys.version,
        "sources": _manifest_entries(run.ctx, _names(run)),
        "checkouts": {n: worktree.read(run.ctx.src_dir / n).as_key() for n in _names(run)},
        "rocm": run.facts["rocm"],
        "targets": list(run.ctx.targets.names),
        "settings": stamps.stage_settings(run.ctx.settings, "build"),
        "output_dir": str(run.ctx.output_dir),
        "projects": [dataclasses.asdict(s) for s in run.specs],
    }


def _build(run: _Run, _handed: list[Path]) -> StageResult:
    found = build_mod.survey(run.ctx, run.specs)  # git and the compiler cache, after checkout
    result = build_mod.execute(build_mod.plan(run.ctx, run.specs, found), run.progress)
    kept = [p.wheel.name for p in result.projects if p.reused]
    if not kept:
        return result
    # --redo, or a lost stamp: the build checked its wheels, and kept those of the same inputs
    every = len(kept) == len(result.projects)
    what = "the previous wheel" if len(kept) == 1 else f"{len(kept)} previous wheels"
    return _Ran(
        result,
        f"output unchanged: {what} kept ({', '.join(kept)}), "
        f"{'its' if len(kept) == 1 else 'their'} inputs the same as at the last build"
        + ("" if every else "; the others were built"),
    )


@dataclass(frozen=True)
class _Ran:
    """A stage's result with a note on what it did: that it left its output as it was
    ("output unchanged: ..."), how many tests ran."""

    result: StageResult
    note: str

    @property
    def nothing_to_do(self) -> str:
        return self.result.nothing_to_do

    @property
    def outputs(self) -> list[Path]:
        return self.result.outputs

    def as_json(self) -> dict[str, Any]:
        return self.result.as_json()


def _bundle_inputs(run: _Run, built: list[Path]) -> dict[str, Any]:
    return {
        "tool": __version__,
        "wheels": [stamps.file_facts(p) for p in built],
        "rocm": run.facts["rocm"],
        "targets": list(run.ctx.targets.names),
        "settings": stamps.stage_settings(run.ctx.settings, "bundle"),
        "output_dir": str(run.ctx.output_dir),
        "wheelhouse": str(run.ctx.wheelhouse),
    }


def _bundle(run: _Run, built: list[Path]) -> StageResult:
    # Only its outputs: a bundle that finds its wheels up to date still counts as run here,
    # as it always has (the stamp is what skips the stage), and says it left them as they were.
    result = bundle.execute(bundle.plan(run.ctx, built), run.progress)
    if result.nothing_to_do == "up to date":
        return _Ran(
            Outputs(result.outputs),
            "output unchanged: the fat wheels are up to date for these wheels and settings",
        )
    return Outputs(result.outputs)


def _smoke_inputs(run: _Run, fat: list[Path]) -> dict[str, Any]:
    suite = smoke.suite_dir()
    return {
        "tool": __version__,
        "wheels": [stamps.file_facts(p) for p in fat],
        "targets": list(run.ctx.targets.names),
        "settings": stamps.stage_settings(run.ctx.settings, "smoke"),
        "suite": {p.name: p.read_text() for p in sorted(suite.glob("*.py"))},
    }


def _smoke(run: _Run, fat: list[Path]) -> StageResult:
    result = smoke.execute(smoke.plan(run.ctx, fat, junit=run.junit), run.progress)
    run.facts["smoke"] = result.as_json()  # in the report also when the check fails
    smoke.check(result)
    return _Ran(result, result.tally())  # "done in 40s (12 tests: 10 passed, 2 skipped)"


#: What ``all`` runs, in order; each stage gets the outputs of the one before. The one list of
#: the stages: the CLI numbers its lines from it.
PIPELINE = (
    Stage("checkout", "sources", lambda _run, _handed: None, _checkout),
    Stage("build", "building", _build_inputs, _build, record="built"),
    Stage("bundle", "bundle", _bundle_inputs, _bundle, record="bundled"),
    Stage("smoke", "smoke", _smoke_inputs, _smoke, keep="smoke"),
)


def _skipped(run: _Run, name: str, reason: str, status: str = "skipped") -> None:
    run.outcomes.append(StageOutcome(name, status, 0.0, reason))
    run.on_stage(name, "skip", reason)


def _stage(run: _Run, stage: Stage, handed: list[Path]) -> tuple[list[Path], dict[str, Any]]:
    """Run one stage unless its stamp says it is done; record the outcome either way."""
    name = stage.name
    faults.point(f"all.before-{name}")
    inputs = stage.inputs(run, handed)
    key = None if inputs is None else stamps.key(inputs)
    if key is not None:
        stamp = stamps.load(run.stamps, name, key, redo=run.redo)
        if stamp is not None:
            _skipped(
                run, name, "up to date for its inputs (stamp " + stamp.get("finished", "?") + ")"
            )
            outputs = [Path(str(o["path"])) for o in stamp["outputs"]]
            return outputs, dict(stamp.get("detail", {}))
    run.on_stage(name, "start", "")
    # Later stages need no invalidation: their keys include this stage's outputs.
    if statefile.check_folder(run.stamps, stamps.FOLDER_WHAT) is not None:
        statefile.remove(run.stamps / f"{name}.json", stamps.WHAT)
    start = time.monotonic()
    try:
        result = stage.run(run, handed)
    except KeyboardInterrupt:
        run.outcomes.append(StageOutcome(name, "interrupted", time.monotonic() - start))
        raise
    except RocmBuildError as err:
        run.outcomes.append(StageOutcome(name, "failed", time.monotonic() - start, str(err)))
        raise
    seconds = time.monotonic() - start
    faults.point(f"all.after-{name}")
    detail = {stage.keep: run.facts.get(stage.keep)} if stage.keep else {}
    if key is not None:
        stamps.save(run.stamps, name, key, result.outputs, detail, stamps.parts(inputs or {}))
        faults.point(f"all.stamped-{name}")
    # nothing to do: the stage checked its own state (checkout does this itself)
    status = "skipped" if result.nothing_to_do else "ran"
    note = result.note if isinstance(result, _Ran) else ""
    run.outcomes.append(StageOutcome(name, status, seconds, result.nothing_to_do or note))
    if result.nothing_to_do:
        run.on_stage(name, "skip", result.nothing_to_do)
    else:
        run.on_stage(name, "done", f"{seconds:.0f}s" + (f" ({note})" if note else ""))
    return result.outputs, detail


def _walk(run: _Run, not_run: Mapping[str, str]) -> None:
    """Every stage in order, each on what the one before handed over."""
    handed: list[Path] = []
    for stage in PIPELINE:
        if stage.name in not_run:
            _skipped(run, stage.name, not_run[stage.name], status="not run")
            continue
        handed, detail = _stage(run, stage, handed)
        if stage.record:
            run.facts[stage.record] = [str(p) for p in handed]
        if stage.keep:
            run.facts.setdefault(stage.keep, detail.get(stage.keep))


def run_all(
    ctx: RunContext,
    names: Sequence[str] = (),
    *,
    junit: Path | None = None,
    redo: bool = False,
    skip_smoke: bool = False,
    on_stage: StageCallback | None = None,
    progress: Progress = NO_PROGRESS,
) -> runreport.RunReport:
    """checkout -> build -> bundle -> smoke; raises the failing stage's error (its message
    names the stage and how to resume) after writing the run report. The stages report their
    long steps (objects fetched, files hipified, build steps, bytes bundled) to ``progress``.

    One configuration for every stage: the targets and the ROCm tree are decided before the
    first (a typo in ``arch``, a missing tree, a download that fails stop the run before an
    hours-long checkout), written into the settings the run report shows."""
    ctx = ctx.decide()
    targets, origin = ctx.targets.names, ctx.targets.origin
    tree = ctx.tree
    log.info("targets: %s (%s); ROCm %s at %s", ";".join(targets), origin, tree.version, tree.root)
    run = new_run(ctx, names, redo=redo, on_stage=on_stage, progress=progress, junit=junit)
    try:
        _walk(run, {"smoke": "--no-smoke"} if skip_smoke else {})
    except (RocmBuildError, KeyboardInterrupt) as err:
        failed = blamed(run.outcomes)
        run.facts["failed_stage"] = failed
        report = runreport.write(ctx, run.facts, run.outcomes, ok=False)
        if isinstance(err, RocmBuildError):
            hint = (
                f"{failed} failed: {err}; fix that and run `rocm-build all` again: stages "
                f"that finished are skipped (run report: {report.markdown})"
            )
            err.args = (hint, *err.args[1:])
        raise
    return runreport.write(ctx, run.facts, run.outcomes, ok=True)


def new_run(
    ctx: RunContext,
    names: Sequence[str],
    *,
    redo: bool = False,
    on_stage: StageCallback | None = None,
    progress: Progress = NO_PROGRESS,
    junit: Path | None = None,
) -> _Run:
    """One run of ``all`` on a decided context, its facts started (``pipelinedry`` too)."""
    run = _Run(
        ctx=ctx,
        specs=tuple(ctx.settings.selected_projects(names)),
        stamps=ctx.work_dir / "stamps",
        redo=redo,
        on_stage=on_stage or (lambda _s, _e, _t: None),
        progress=progress,
        junit=junit,
    )
    targets = ctx.targets.names
    run.facts.update(
        {
            "started": time.time(),
            "tool": __version__,
            "projects": _names(run),
            "rocm": {"root": str(ctx.tree.root), "version": ctx.tree.version},
            "targets": list(targets),
        }
    )
    return run


# --- all --dry-run ----------------------------------------------------------------------------
# Per stage, what ``all`` would do, from the stages' own plans and stamps, with nothing
# written, fetched or built. A stage whose stamp is current for its inputs would be skipped;
# any other would run, and the reason is named (no stamp, --redo, which inputs changed, its
# outputs moved). The stages after one that would run take their inputs from it: they run too.


@dataclass(frozen=True)
class StageWould:
    """What ``all --dry-run`` says of one stage: it ``would`` "run", "skip" or "not run",
    ``why``, and ``details`` (lines)."""

    stage: str
    would: str
    why: str
    details: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "would": self.would,
            "why": self.why,
            "details": [*self.details],
        }


def dry_run(
    ctx: RunContext, names: Sequence[str] = (), *, redo: bool = False, skip_smoke: bool = False
) -> list[StageWould]:
    """One entry per stage (:class:`StageWould`); nothing is written."""
    ctx = ctx.decide()
    run = new_run(ctx, names, redo=redo)
    out: list[StageWould] = []
    handed: list[Path] | None = []
    before = ""
    for stage in PIPELINE:
        name = stage.name
        if name == "smoke" and skip_smoke:
            out.append(_entry(name, "not run", "--no-smoke"))
            continue
        if stage.name == "checkout":
            out.append(_checkout_would(run))
        elif handed is None:
            why = "--redo" if run.redo else f"after {before} runs: its inputs are what it makes"
            out.append(_entry(name, "run", why, list(_details(run, name, None))))
        else:
            inputs = stage.inputs(run, handed) or {}
            key = stamps.key(inputs)
            stamp = stamps.load(run.stamps, name, key, redo=run.redo)
            if stamp is not None:
                when = stamp.get("finished", "?")
                out.append(_entry(name, "skip", f"up to date for its inputs (stamp {when})"))
                handed = [Path(str(o["path"])) for o in stamp["outputs"]]
                continue
            why = _why(run, name, inputs)
            out.append(_entry(name, "run", why, list(_details(run, name, handed))))
            handed = None
        before = name
    return out


def dry_run_lines(entries: Sequence[StageWould]) -> Iterator[str]:
    """The entries for people: one line per stage, its details indented below."""
    words = {"run": "would run", "skip": "would be skipped", "not run": "not run"}
    for e in entries:
        sep = " " if e.would == "not run" else ": "
        yield f"{e.stage}: {words[e.would]}{sep}{_paren(e)}"
        yield from (f"  {d}" for d in e.details)


def _paren(entry: StageWould) -> str:
    return f"({entry.why})" if entry.would == "not run" else entry.why


def _entry(stage: str, would: str, why: str, details: Sequence[str] = ()) -> StageWould:
    return StageWould(stage, would, why, tuple(details))


def _checkout_would(run: _Run) -> StageWould:
    builtin = {n: str(p.get("origin", "")) for n, p in config.load_defaults()["projects"].items()}
    plan = sources.plan(run.ctx, _names(run), builtin_origins=builtin)
    details = [
        f"{p.name}: {p.origin} at {p.ref or '(a ref another project pins)'} into {p.src}"
        + (f"; patches: {p.patchset}" if p.apply_patches else "")
        for p in plan.projects
    ]
    why = "it checks each checkout itself (fetching only what is missing)"
    return _entry("checkout", "run", why, details)


def _why(run: _Run, name: str, inputs: Mapping[str, Any]) -> str:
    """Why a stage with no current stamp would run."""
    if run.redo:
        return "--redo"
    path = run.stamps / f"{name}.json"
    try:
        data = statefile.read_json(path, "`all` stamp")
    except (FileNotFoundError, ValueError):
        return "it has not finished in this work folder (no stamp)"
    if not isinstance(data, dict) or not stamps.is_stamp(data):
        return "its stamp is damaged"
    if data["key"] == stamps.key(inputs):
        return "its outputs were changed or removed since it finished"
    old = data.get("parts")
    parts = stamps.parts(inputs)
    changed = [k for k in parts if isinstance(old, dict) and old.get(k) != parts[k]]
    return f"its inputs changed ({', '.join(changed) or 'the stamp names no parts'})"


def _details(run: _Run, name: str, handed: list[Path] | None) -> Iterator[str]:
    """What the stage's plan says it would do (where its inputs are at hand)."""
    ctx = run.ctx
    try:
        if name == "build":
            plan = build_mod.plan(ctx, run.specs, build_mod.survey(ctx, run.specs))
            from rocm_build.building import rebuild

            for project, would in rebuild.forecast(plan).items():
                yield f"{project}: {would}"
        elif name == "bundle" and handed:
            bplan = bundle.plan(ctx, handed)
            targets = ";".join(bplan.targets) or "each wheel's own"
            for w in bplan.wheels:
                yield f"would bundle {w.name} into {bplan.output_dir} (targets: {targets})"
        elif name == "smoke" and handed:
            splan = smoke.plan(ctx, handed)
            yield f"would test {', '.join(w.name for w in splan.wheels)} in {splan.venv}"
        else:
            yield f"(its plan needs what the stage before makes; {name} is planned then)"
    except RocmBuildError as err:
        yield f"(its plan cannot be made yet: {err})"
