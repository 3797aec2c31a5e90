"""all: checkout, build, bundle and smoke in one run, with one configuration.

Each stage's inputs are reduced to a key (sources at their commits and patches, ROCm tree,
targets, settings, the wheels handed over); after a stage succeeds its key and outputs are
written to a stamp file in ``<work_dir>/stamps``. A stage whose key matches its stamp and whose
outputs are still in place is skipped and says so, which is how a run resumes after a failure or
an interruption: only the stages after the last finished one run again. The run report (JSON and
a short Markdown summary) is written whether the run passes or not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import __version__, bundle, config, faults, runreport, smoke, sources
from . import build as build_mod
from .config import Config
from .context import RunContext
from .errors import RocmBuildError
from .progress import NO_PROGRESS, Progress
from .runreport import StageOutcome

__all__ = ["STAGES", "StageOutcome", "run_all", "stamp_key"]

log = logging.getLogger(__name__)

STAGES = ("checkout", "build", "bundle", "smoke")


#: Called as ``on_stage(stage, event, text)``; event is "start", "skip" or "done".
StageCallback = Callable[[str, str, str], None]


@dataclass
class _Run:
    ctx: RunContext
    stamps: Path
    redo: bool
    on_stage: StageCallback
    progress: Progress = NO_PROGRESS
    outcomes: list[StageOutcome] = field(default_factory=list)
    report: dict[str, Any] = field(default_factory=dict)


def stamp_key(inputs: Mapping[str, Any]) -> str:
    """A stable digest of a stage's inputs."""
    blob = json.dumps(inputs, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def _file_facts(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _intact(outputs: Sequence[Mapping[str, Any]]) -> bool:
    for out in outputs:
        path = Path(str(out["path"]))
        try:
            st = path.stat()
        except OSError:
            return False
        if st.st_size != out["size"] or st.st_mtime_ns != out["mtime_ns"]:
            return False
    return True


def _load_stamp(run: _Run, stage: str, key: str) -> dict[str, Any] | None:
    if run.redo:
        return None
    path = run.stamps / f"{stage}.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if data.get("key") != key or not _intact(data.get("outputs", [])):
        return None
    return data


def _save_stamp(
    run: _Run, stage: str, key: str, outputs: Sequence[Path], detail: Mapping[str, Any]
) -> None:
    run.stamps.mkdir(parents=True, exist_ok=True)
    data = {
        "stage": stage,
        "key": key,
        "outputs": [_file_facts(p) for p in outputs],
        "detail": dict(detail),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path = run.stamps / f"{stage}.json"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    tmp.replace(path)


def _resolve(ctx: RunContext) -> RunContext:
    """One configuration for every stage: the ROCm tree and the targets decided once."""
    ctx = ctx.resolved()
    targets, origin = ctx.build_targets
    tree = ctx.tree
    log.info("targets: %s (%s); ROCm %s at %s", ";".join(targets), origin, tree.version, tree.root)
    return ctx


def _precheck(ctx: RunContext) -> None:
    """Settings that would stop the build, checked before an hours-long checkout: the target
    names and a local ROCm tree that must exist (a URL is fetched when the build needs it)."""
    if ctx.settings.general.arch:
        _ = ctx.arch_targets
    ctx.check_tree()


def _settings(cfg: Config, prefix: str) -> dict[str, Any]:
    return {k: v for k, v in cfg.values.items() if k.startswith(prefix)}


# --- stages ----------------------------------------------------------------------------------


def _checkout(run: _Run, names: Sequence[str]) -> dict[str, Any]:
    builtin = {n: str(p.get("origin", "")) for n, p in config.load_defaults()["projects"].items()}
    plan = sources.plan(run.ctx, names, builtin_origins=builtin)
    result = sources.execute(plan, run.progress)
    return {"nothing_done": "sources up to date" if result.up_to_date else "", **result.as_json()}


def _manifest_entries(ctx: RunContext, names: Sequence[str]) -> dict[str, Any]:
    data = sources.read_manifest(ctx.src_dir / sources.MANIFEST_NAME)
    entries = data.get("projects", {})
    return {n: entries.get(n) for n in names}


def _build(run: _Run, specs: Sequence[config.ProjectSpec]) -> list[Path]:
    plan, _ = build_mod.plan_from_config(run.ctx, specs)
    result = build_mod.execute(plan, run.progress)
    return [p.wheel for p in result.projects]


def _bundle(run: _Run, wheels: Sequence[Path]) -> list[Path]:
    return bundle.execute(bundle.plan(run.ctx, wheels), run.progress).outputs


def _stage(
    run: _Run, name: str, key: str | None, work: Callable[[], tuple[list[Path], dict[str, Any]]]
) -> tuple[list[Path], dict[str, Any]]:
    """Run one stage unless its stamp says it is done; record the outcome either way."""
    faults.point(f"all.before-{name}")
    if key is not None:
        stamp = _load_stamp(run, name, key)
        if stamp is not None:
            reason = "up to date for its inputs (stamp " + stamp.get("finished", "?") + ")"
            run.on_stage(name, "skip", reason)
            run.outcomes.append(StageOutcome(name, "skipped", 0.0, reason))
            outputs = [Path(str(o["path"])) for o in stamp["outputs"]]
            return outputs, dict(stamp.get("detail", {}))
    run.on_stage(name, "start", "")
    # Later stages need no invalidation: their keys include this stage's outputs.
    (run.stamps / f"{name}.json").unlink(missing_ok=True)
    start = time.monotonic()
    try:
        outputs, detail = work()
    except KeyboardInterrupt:
        run.outcomes.append(StageOutcome(name, "interrupted", time.monotonic() - start))
        raise
    except RocmBuildError as err:
        run.outcomes.append(StageOutcome(name, "failed", time.monotonic() - start, str(err)))
        raise
    seconds = time.monotonic() - start
    faults.point(f"all.after-{name}")
    if key is not None:
        _save_stamp(run, name, key, outputs, detail)
        faults.point(f"all.stamped-{name}")
    nothing_done = str(detail.get("nothing_done", ""))
    if nothing_done:
        # The stage checked its own state and found nothing to do (checkout does this itself).
        run.outcomes.append(StageOutcome(name, "skipped", seconds, nothing_done))
        run.on_stage(name, "skip", nothing_done)
    else:
        run.outcomes.append(StageOutcome(name, "ran", seconds))
        run.on_stage(name, "done", f"{seconds:.0f}s")
    return outputs, detail


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
    long steps (objects fetched, files hipified, build steps, bytes bundled) to ``progress``."""
    run = _Run(
        ctx=ctx,
        stamps=ctx.work_dir / "stamps",
        redo=redo,
        on_stage=on_stage or (lambda _s, _e, _t: None),
        progress=progress,
    )
    started = time.time()
    current = "checkout"
    facts: dict[str, Any] = {"started": started, "tool": __version__}
    _precheck(ctx)
    try:
        specs = ctx.settings.selected_projects(names)
        project_names = [s.name for s in specs]
        facts["projects"] = project_names
        _stage(run, "checkout", None, lambda: ([], _checkout(run, project_names)))
        current = "build"
        ctx = run.ctx = _resolve(ctx)
        tree, targets = ctx.tree, ctx.targets
        facts["rocm"] = {"root": str(tree.root), "version": tree.version}
        facts["targets"] = list(targets)
        build_key = stamp_key(
            {
                "tool": __version__,
                "python": sys.version,
                "sources": _manifest_entries(ctx, project_names),
                "rocm": facts["rocm"],
                "targets": list(targets),
                "settings": _settings(ctx.settings, "build."),
                "projects": [dataclasses.asdict(s) for s in specs],
            }
        )
        built, _ = _stage(run, "build", build_key, lambda: (_build(run, specs), {}))
        facts["built"] = [str(p) for p in built]
        current = "bundle"
        bundle_key = stamp_key(
            {
                "tool": __version__,
                "wheels": [_file_facts(p) for p in built],
                "rocm": facts["rocm"],
                "targets": list(targets),
                "settings": _settings(ctx.settings, "bundle."),
                "output_dir": str(ctx.output_dir),
            }
        )
        fat, _ = _stage(run, "bundle", bundle_key, lambda: (_bundle(run, built), {}))
        facts["bundled"] = [str(p) for p in fat]
        if skip_smoke:
            run.outcomes.append(StageOutcome("smoke", "not run", 0.0, "--no-smoke"))
            run.on_stage("smoke", "skip", "--no-smoke")
        else:
            current = "smoke"
            suite = smoke.suite_dir()
            smoke_key = stamp_key(
                {
                    "tool": __version__,
                    "wheels": [_file_facts(p) for p in fat],
                    "targets": list(targets),
                    "settings": _settings(ctx.settings, "smoke."),
                    "suite": {p.name: p.read_text() for p in sorted(suite.glob("*.py"))},
                }
            )

            def do_smoke() -> tuple[list[Path], dict[str, Any]]:
                plan = smoke.plan(ctx, fat, junit=junit)
                result = smoke.run(plan)
                facts["smoke"] = result.as_json()
                smoke.check(result)
                return [], {"smoke": facts["smoke"]}

            _, detail = _stage(run, "smoke", smoke_key, do_smoke)
            facts.setdefault("smoke", detail.get("smoke"))
    except (RocmBuildError, KeyboardInterrupt) as err:
        facts["failed_stage"] = current
        report = runreport.write(run.ctx, facts, run.outcomes, ok=False)
        if isinstance(err, RocmBuildError):
            hint = (
                f"{current} failed: {err}; fix that and run `rocm-build all` again: stages "
                f"that finished are skipped (run report: {report.markdown})"
            )
            err.args = (hint, *err.args[1:])
        raise
    return runreport.write(run.ctx, facts, run.outcomes, ok=True)
