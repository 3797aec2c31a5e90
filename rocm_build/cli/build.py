"""``rocm-build build``: build wheels against a ROCm tree (stage: ``build``)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import click

from rocm_build.cli import given
from rocm_build.cli import options as o
from rocm_build.cli.render import State, close_bars, err_console, out_console, pass_state
from rocm_build.common.masking import mask_values

if TYPE_CHECKING:
    from rocm_build.building import Plan as BuildPlan
    from rocm_build.building import Result as BuildResult
    from rocm_build.building.cachestats import CacheStats
    from rocm_build.common.arch import Targets


@o.command("build")
@click.argument("projects", nargs=-1)
@o.rocm_option()
@o.arch_option("Default: the arch setting, else the GPUs of this machine.")
@o.train_option("Release train whose projects to build (when none are named).")
@o.src_dir_option
@o.output_dir_option
@o.work_dir_option
@o.jobs_option
@o.cache_option
@o.setting_option(
    "--cache-url",
    key="build.cache_url",
    metavar="URL",
    help="Remote storage for the compiler cache.",
)
@o.setting_option(
    "--version-suffix",
    key="build.version_suffix",
    metavar="+LABEL",
    help="Local version label (+rocm<ver>).",
)
@o.setting_option(
    "--venv", key="build.venv", metavar="create|current|DIR", help="Build environment to use."
)
@o.setting_option(
    "--index-url", key="build.index_url", metavar="URL", help="Index for build requirements."
)
@o.find_links_option(
    "Folder of wheels for build requirements (repeatable).", key="build.find_links", metavar="DIR"
)
@o.setting_option(
    "--no-index",
    key="build.no_index",
    is_flag=True,
    default=None,
    help="Only --find-links folders.",
)
@o.dry_run_option(
    "Show per project the environment, command and folder; build nothing.", key="build.dry_run"
)
@o.force_option("Rebuild even when nothing changed since the last.", key="build.force")
@o.allow_dirty_option
@pass_state
def command(state: State, projects: tuple[str, ...]) -> None:
    """Build wheels of PROJECTS (default: the release train's) against a ROCm tree.

    \b
    rocm-build build --rocm /opt/rocm --arch gfx1100
    rocm-build build torch torchvision --arch 'gfx90a;gfx942' --jobs 8 --dry-run
    """
    from rocm_build import building as build_stage
    from rocm_build.building import cachestats

    # a dry run given on the command line downloads no tree (one in the config file does)
    ctx = state.resolve(tree=True, targets=True, dry_run=bool(given.value("build.dry_run")))
    cfg = ctx.settings
    specs = cfg.selected_projects(projects)
    say_targets(state, ctx.targets)
    plan = build_stage.plan(ctx, specs, build_stage.survey(ctx, specs))
    compiler_cache = plan.compiler_cache
    if cfg.build.dry_run:
        from rocm_build.building import rebuild

        would = rebuild.forecast(plan)  # per project: keep the last wheel, or build and why
        if state.json:
            state.emit({**plan.as_json(), "would": would})
        else:
            show_plan(plan, would)
        return
    cachestats.zero_stats(compiler_cache, cfg.env)
    bars = state.progress()
    try:
        result = build_stage.execute(plan, bars)
    finally:
        close_bars(bars)
    stats = cachestats.statistics(compiler_cache, cfg.env)
    if state.json:
        state.emit({**result.as_json(), "cache": stats.as_json()})
    else:
        show(result, stats)


def say_targets(state: State, targets: Targets) -> None:
    """The targets a build is for and where they came from (stderr; not with --json/-q)."""
    if not state.json and not state.quiet:
        err_console.print(f"targets: {';'.join(targets.names)} ({targets.origin})", markup=False)


def show(result: BuildResult, stats: CacheStats) -> None:
    """Human summary of a build: one line per wheel, the report, the cache's hit rate."""
    for p in result.projects:
        retry = f", retried with {p.retried_with} jobs" if p.retried_with else ""
        took = "unchanged, not rebuilt" if p.reused else f"{p.seconds:.0f}s{retry}"
        out_console.print(
            f"{p.name} {p.version}: {p.wheel} ({';'.join(p.targets)}, {took})",
            markup=False,
            soft_wrap=True,
        )
    out_console.print(f"build report: {result.report}", markup=False, soft_wrap=True)
    if stats.enabled:
        hits, misses = stats.hits, stats.misses
        rate = f" ({100 * hits / (hits + misses):.0f}% hits)" if hits + misses else ""
        out_console.print(f"{stats.kind}: {hits} hits, {misses} misses{rate}", markup=False)


def show_plan(plan: BuildPlan, would: dict[str, str]) -> None:
    """``build --dry-run``: per project the folder, command, jobs, version and environment."""
    out_console.print(
        f"ROCm {plan.tree.version or '(unknown version)'} at {plan.tree.root}; targets "
        f"{';'.join(plan.targets)}; compiler cache: {plan.cache}",
        markup=False,
    )
    if plan.venv is not None:
        out_console.print(f"build environment: {plan.venv}", markup=False)
    for step in plan.steps:
        out_console.print(f"\n[bold]{step.name}[/]", markup=True)
        reqs = [*step.requires, *(f"-r {p}" for p in step.requirement_files)]
        version = "(set by the project)"
        if step.version:
            version = f"{step.version} ({step.version_from})"
        dirty = step.worktree.paths
        lines = [
            f"  rebuild: {would.get(step.name, '?')}",
            f"  folder:  {step.source}",
            *(
                [f"  uncommitted: {', '.join(dirty[:5])}{' ...' if len(dirty) > 5 else ''}"]
                if dirty
                else []
            ),
            *([f"  runs in: {step.cwd}"] if step.build_dir else []),
            *([f"  source:  {step.checkout.text}"] if step.checkout else []),
            f"  command: {shlex.join(step.command)}",
            f"  jobs:    {step.jobs}",
            f"  version: {version}",
            f"  log:     {step.log}",
            f"  build requirements: {', '.join(reqs) or 'none'}",
            "  environment:",
            *(f"    {key}={value}" for key, value in mask_values(step.changed).items()),
        ]
        if step.removed:
            lines.append(f"  removed from the environment: {' '.join(step.removed)}")
        lines += [f"  note: {note}" for note in step.notes]
        if step.features:
            lines.append("  features:")
            lines += [f"    {f.describe()}" for f in step.features]
        for text in lines:
            out_console.print(text, markup=False, soft_wrap=True)
