"""``rocm-build all``: checkout, build, bundle and smoke with one configuration (``pipeline``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, close_bars, err_console, out_console, pass_state
from rocm_build.common.errors import RocmBuildError
from rocm_build.common.progress import Progress

if TYPE_CHECKING:
    from rocm_build.commands.runreport import RunReport
    from rocm_build.run.context import RunContext


@o.command("all")
@click.argument("projects", nargs=-1)
@o.rocm_option()
@o.arch_option("Default: the arch setting, else the GPUs of this machine.")
@o.train_option("Release train whose refs to check out (e.g. 2.9).")
@o.ref_option
@o.origin_option
@o.patchset_option()
@o.patches_dir_option
@o.src_dir_option
@o.output_dir_option
@o.work_dir_option
@o.jobs_option
@o.cache_option
@o.find_links_option(
    "Local folder of wheels for build requirements and the smoke environment.",
    key=("build.find_links", "smoke.find_links"),
    metavar="DIR",
)
@o.offline_option("Never use a package index.", key=("build.no_index", "smoke.offline"))
@o.python_option("Interpreter for the smoke environment.")
@o.junit_option
@o.allow_dirty_option
@click.option("--redo", is_flag=True, help="Run every stage even when its stamp is current.")
@click.option("--no-smoke", is_flag=True, help="Stop after bundle.")
@o.dry_run_option(
    "Say per stage what it would do (skipped, or run and why; builds kept or rebuilt); "
    "change nothing."
)
@pass_state
def command(
    state: State,
    projects: tuple[str, ...],
    junit: Path | None,
    redo: bool,
    no_smoke: bool,
    dry_run: bool | None,
) -> None:
    """checkout, build, bundle and smoke PROJECTS with one configuration.

    Stages whose outputs are up to date for their inputs are skipped (stamps in the work
    folder), so after a failure or an interruption the same command resumes. Writes
    run-report.json and run-report.md in the work folder.

    \b
    rocm-build all --rocm /opt/rocm --arch gfx1100
    rocm-build all torch torchvision --train 2.9 --arch 'gfx90a;gfx942' --jobs 16
    """
    from rocm_build.commands import pipeline

    ctx = state.resolve(tree=True, targets=True, dry_run=bool(dry_run))
    if dry_run:
        show_dry_run(state, ctx, projects, redo=redo, skip_smoke=no_smoke)
        return
    bars = state.progress()
    try:
        report = pipeline.run_all(
            ctx,
            projects,
            junit=junit,
            redo=redo,
            skip_smoke=no_smoke,
            on_stage=stage_lines(state, bars, [s.name for s in pipeline.PIPELINE]),
            progress=bars,
        )
    except RocmBuildError:
        # --json still gets the run report (ok: false, failed_stage) on stdout.
        written = ctx.work_dir / "run-report.json"
        if state.json and written.is_file():
            state.emit(json.loads(written.read_text(encoding="utf-8")))
        raise
    finally:
        close_bars(bars)
    if state.json:
        state.emit(report.as_json())
    elif state.quiet:
        # -q: no stage lines, but still where the results are, one line each
        for path in report.bundled:
            out_console.print(path, markup=False, soft_wrap=True)
        out_console.print(str(report.markdown), markup=False, soft_wrap=True)
    else:
        show(report)


def show_dry_run(
    state: State, ctx: RunContext, projects: tuple[str, ...], *, redo: bool, skip_smoke: bool
) -> None:
    """``all --dry-run``: per stage what it would do (``pipeline.dry_run``); nothing changes."""
    from rocm_build.commands import pipeline

    entries = pipeline.dry_run(ctx, projects, redo=redo, skip_smoke=skip_smoke)
    if state.json:
        state.emit({"dry_run": True, "stages": [e.as_json() for e in entries]})
        return
    for line in pipeline.dry_run_lines(entries):
        out_console.print(line, markup=False, soft_wrap=True)


def stage_lines(
    state: State, bars: Progress, stages: tuple[str, ...] | list[str]
) -> Callable[[str, str, str], None]:
    """The pipeline's ``on_stage``: a spinner while a stage runs, then one line on stderr."""
    show = not (state.quiet or state.json)

    def on_stage(stage: str, event: str, text: str) -> None:
        if not show:
            return
        step = f"[{list(stages).index(stage) + 1}/{len(stages)}] {stage}"
        if event == "start":
            bars.start(f"{step} ...", None)
            return
        bars.done(f"{step} ...")
        if event == "skip":
            err_console.print(f"[bold]{step}[/]: skipped, {text}", markup=True, soft_wrap=True)
        else:
            err_console.print(f"[bold]{step}[/]: done in {text}", markup=True)

    return on_stage


def show(report: RunReport) -> None:
    """Human summary of a run: each stage, the fat wheels, where the run report is."""
    for stage in report.stages:
        # a stage that ran and left its output as it was says so: "ran (output unchanged: ...)"
        why = f"; {stage.reason}" if stage.reason else ""
        out_console.print(
            f"{stage.name:>8}: {stage.status} ({stage.seconds} s{why})",
            markup=False,
            soft_wrap=True,
        )
    for path in report.bundled:
        out_console.print(f"fat wheel: {path}", markup=False, soft_wrap=True)
    out_console.print(f"run report: {report.markdown} (JSON: {report.json_path})", soft_wrap=True)
