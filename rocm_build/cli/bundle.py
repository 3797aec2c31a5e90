"""``rocm-build bundle``: make wheels self-contained (stage: ``bundle``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, close_bars, err_console, out_console, pass_state
from rocm_build.common.sizes import human_size

if TYPE_CHECKING:
    from rocm_build.bundle import Plan
    from rocm_build.bundle.model import BundleResult
    from rocm_build.bundle.split import SplitPlan
    from rocm_build.run.context import RunContext


@o.command("bundle")
@click.argument("wheels", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@o.rocm_option("Libraries and data are taken from it.")
@o.arch_option("Data is kept for these; default: the targets of the wheel's own device code.")
@o.wheel_dir_option
@click.option(
    "--lib-dir", metavar="DIR", help="Library folder inside the wheel (default: the project's)."
)
@click.option(
    "--with",
    "with_wheels",
    multiple=True,
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    metavar="WHEEL",
    help="A fat torch wheel whose libraries a torchvision/torchaudio wheel uses.",
)
@click.option(
    "--platform",
    type=o.Setting("bundle.platform"),
    default=None,
    help="auto: from the wheel's tag; windows wheels go through delvewheel.",
)
@click.option(
    "--plat",
    "--policy",
    "plat",
    type=o.Setting("bundle.policy"),
    metavar="TAG",
    help="manylinux tag of the output, as auditwheel's --plat (manylinux_2_28_x86_64); one "
    "older than the files need is exit 10 (default: auto, the best that fits; --policy is the "
    "same flag).",
)
@click.option(
    "--exclude",
    multiple=True,
    metavar="LIB",
    help="A library not to bundle (soname or pattern: 'libfoo.so.*'; repeatable): it stays "
    "NEEDED, found at run time, and what only it needs stays out too.",
)
@click.option(
    "-z",
    "--compression-level",
    type=o.Setting("bundle.compression_level"),
    default=None,
    help="Deflate level for new members, zlib's scale (unchanged ones are copied as they are).",
)
@click.option(
    "--deflater",
    type=o.Setting("bundle.deflater"),
    default=None,
    help="What deflates new members: libdeflate (the default: faster, within 1% of auditwheel's "
    "size), zlib (auditwheel's size), zlib-ng or isal (faster, larger).",
)
@o.dry_run_option(
    "Print what would be bundled (libraries, data, search paths, tag); write nothing."
)
@click.option(
    "--allow-outside",
    "allow_outside",
    multiple=True,
    metavar="DIR",
    help="A folder outside the ROCm tree that symlinks in the tree may lead to (repeatable).",
)
@click.option(
    "--mode",
    type=click.Choice(["fat", "thin"]),
    default="fat",
    help="fat: carry the ROCm libraries; thin: depend on ROCm's Python packages (rocm-sdk-core, "
    "rocm-sdk-libraries-FAMILY; from a kpack-split tree rocm[libraries,device-...]) at the "
    "tree's version instead.",
)
@o.target_family_option("thin only (as rocm wheels --target-family).")
@click.option(
    "--split-arch",
    is_flag=True,
    help="Write a host wheel (libraries, target-neutral data) and one device wheel per target "
    "(its data files; name from bundle.device_name); the host gets an extra device-GFX per target.",
)
@click.option(
    "--allow-rocm-mismatch",
    is_flag=True,
    default=None,
    help="Bundle a wheel built with another ROCm than the tree's; it is relabelled "
    "+rocm<the tree's version>.",
)
@click.option(
    "--keep-other-rocm",
    is_flag=True,
    default=None,
    help="Keep unused copies of another ROCm's libraries the wheel carries (left out by default).",
)
@click.option(
    "--keep-all-device-code",
    "prune_device_code",
    flag_value=False,
    default=None,
    help="Keep every target's code in the libraries' offload bundles (default with --arch: only "
    "the code that serves those targets; bundle.prune_device_code).",
)
@click.option(
    "--allow-missing-arch",
    is_flag=True,
    default=None,
    help="A requested target that a written library has no device code for is a warning, "
    "not exit 11 (bundle.allow_missing_arch).",
)
@pass_state
def command(
    state: State,
    wheels: tuple[Path, ...],
    rocm: str | None,
    arch: str | None,
    output_dir: Path | None,
    lib_dir: str | None,
    with_wheels: tuple[Path, ...],
    platform: str | None,
    plat: str | None,
    exclude: tuple[str, ...],
    compression_level: int | None,
    deflater: str | None,
    dry_run: bool | None,
    allow_outside: tuple[str, ...],
    mode: Literal["fat", "thin"],
    target_family: str,
    split_arch: bool,
    allow_rocm_mismatch: bool | None,
    keep_other_rocm: bool | None,
    prune_device_code: bool | None,
    allow_missing_arch: bool | None,
) -> None:
    """Make WHEELs self-contained: ROCm libraries, data for the targets, $ORIGIN search paths."""
    from rocm_build import bundle as bundle_stage
    from rocm_build.bundle.platforms import plan_lines

    ctx = state.resolve(
        {
            "rocm": rocm,
            "arch": arch,
            "bundle.wheel_dir": o.text(output_dir),
            "bundle.platform": platform,
            "bundle.policy": plat,
            "bundle.exclude": list(exclude) or None,
            "bundle.compression_level": compression_level,
            "bundle.deflater": deflater,
            "bundle.dry_run": dry_run,
            "bundle.allow_outside": list(allow_outside) or None,
            "bundle.allow_rocm_mismatch": allow_rocm_mismatch,
            "bundle.keep_other_rocm": keep_other_rocm,
            "bundle.prune_device_code": prune_device_code,
            "bundle.allow_missing_arch": allow_missing_arch,
        },
        tree=True,
        dry_run=bool(dry_run),
    )
    dry_run = ctx.settings.bundle.dry_run
    if split_arch:
        split_plan = bundle_stage.split_arch_plan(
            ctx, wheels, with_wheels=with_wheels, lib_dir=lib_dir, dry_run=dry_run, mode=mode
        )
        split(state, ctx, split_plan)
        return
    plan = bundle_stage.plan(
        ctx,
        wheels,
        with_wheels=with_wheels,
        lib_dir=lib_dir,
        dry_run=dry_run,
        mode=mode,
        target_family=target_family,
    )
    bars = state.progress()
    try:
        results = list(bundle_stage.execute(plan, bars).results)
    finally:
        close_bars(bars)
    if state.json:
        state.emit([r.as_json() for r in results])
    elif dry_run:
        for r in results:
            for line in plan_lines(r):
                out_console.print(line, markup=False, soft_wrap=True)
    else:
        show(results)
    stop_dry_run(ctx, plan)


def stop_dry_run(ctx: RunContext, plan: Plan) -> None:
    """A dry run shows the plan, and then stops (exit 11) as the bundle would for a requested
    target a library has no code for (the wheels' plans' ``device_gaps``; a wheel up to date
    has none)."""
    gaps = [
        gap
        for task in plan.tasks
        if task.action == "bundle" and task.closure is not None
        for gap in task.closure.device_gaps
    ]
    if plan.dry_run and gaps and not ctx.settings.bundle.allow_missing_arch:
        from rocm_build.bundle.device import gap_error

        raise gap_error(gaps)


def show(results: Sequence[BundleResult]) -> None:
    """One line per bundled wheel with its size; a note when one is over PyPI's limit."""
    from rocm_build.bundle import report
    from rocm_build.bundle.lines import system_lines, warning_lines

    word = {"bundled": "bundled", "up-to-date": "up to date", "unchanged": "unchanged"}
    for r in results:
        size = Path(r.output).stat().st_size
        out_console.print(
            f"{word[r.status]}: {r.output}  ({human_size(size)}, {r.seconds:.1f} s)",
            markup=False,
            soft_wrap=True,
        )
        for line in system_lines(r.closure):
            out_console.print(line, markup=False, soft_wrap=True)
        for line in warning_lines(r):
            err_console.print(line, markup=False, soft_wrap=True)
        if size > report.PYPI_LIMIT:
            err_console.print(
                f"note: {Path(r.output).name} is larger than PyPI's default "
                f"{human_size(report.PYPI_LIMIT)} per-file limit: ask PyPI for a larger limit, "
                "host it on your own index, or build for fewer targets (inspect shows each "
                "target's size)",
                markup=False,
                soft_wrap=True,
            )


def split(state: State, ctx: RunContext, plan: SplitPlan) -> None:
    """``--split-arch``: the fat bundle cut into host and device wheels."""
    from rocm_build import bundle as bundle_stage
    from rocm_build.bundle import split as splitarch
    from rocm_build.bundle.lines import warning_lines
    from rocm_build.bundle.platforms import plan_lines

    dry_run = plan.dry_run
    bars = state.progress()
    try:
        results = bundle_stage.split_arch(plan, bars)
    finally:
        close_bars(bars)
    if state.json:
        state.emit([r.as_json() for r in results])
        stop_dry_run(ctx, plan.fat)
        return
    for r in results:
        fat = r.bundle
        if dry_run and fat is not None:
            for line in plan_lines(fat):
                out_console.print(line, markup=False, soft_wrap=True)
        for line in splitarch.lines(r):
            out_console.print(line, markup=False, soft_wrap=True)
        if fat is not None and not dry_run:
            for line in warning_lines(fat):
                err_console.print(line, markup=False, soft_wrap=True)
    stop_dry_run(ctx, plan.fat)
