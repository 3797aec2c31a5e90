"""``rocm-build smoke``: install wheels with no ROCm in reach and run the smoke suite."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, close_bars, out_console, pass_state

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rocm_build.smoke import Result
    from rocm_build.smoke.execute import Device


@o.command("smoke")
@click.argument("wheels", nargs=-1, type=click.Path(path_type=Path, dir_okay=False))
@o.python_option("Interpreter for the fresh environment (default: this one).")
@o.junit_option
@o.offline_option("Install pytest and dependencies only from --find-links.", key="smoke.offline")
@o.find_links_option(
    "Local folder of wheels for dependencies and pytest (repeatable).",
    key="smoke.find_links",
    type=click.Path(path_type=Path, file_okay=False),
)
@o.setting_option(
    "--upstream-tests",
    "upstream_tests",
    key="smoke.upstream_tests",
    metavar="PATTERN",
    help="Also run PyTorch's own test files matching PATTERN (in src/torch/test).",
)
@o.setting_option(
    "--keep-venv",
    key="smoke.keep_venv",
    is_flag=True,
    default=None,
    help="Keep the fresh environment after a passing run (a failing run always keeps it).",
)
@o.arch_option("The targets the wheels were built for.")
@o.rocm_option(
    "The tree used to build: nothing may load from it.", convert=lambda value: value or None
)
@o.src_dir("Nothing may load from them.")
@pass_state
def command(
    state: State,
    wheels: tuple[Path, ...],
    junit: Path | None,
) -> None:
    """Install WHEELs into a fresh environment with no ROCm in reach and run the smoke suite.

    Library provenance, search paths, code-object targets and the HIP runtime are checked for
    any package; torch, torchvision and torchaudio get their own checks, and GPU checks run when
    a GPU is visible. Exit code 12 when a check fails.
    """
    from rocm_build import smoke as smoke_stage

    ctx = state.resolve()
    plan = smoke_stage.plan(ctx, wheels, junit=junit)
    bars = state.progress()  # a count of the tests as they finish
    try:
        result = smoke_stage.execute(plan, bars)
    finally:
        close_bars(bars)
    if state.json:
        state.emit(result.as_json())
    elif not state.quiet:
        show(result)
    smoke_stage.check(result)


def show(result: Result) -> None:
    """Human summary of a smoke run."""
    status = "[bold green]passed[/]" if result.ok else "[bold red]FAILED[/]"
    out_console.print(
        f"smoke {status}: {result.count('passed')} passed, {result.count('failed')} failed, "
        f"{result.count('error')} errors, {result.count('skipped')} skipped "
        f"in {result.seconds:.0f}s ({', '.join(result.plan.packages)})",
        markup=True,
        soft_wrap=True,
    )
    for failure in result.failures:
        out_console.print(
            f"  [red]{failure.outcome}[/] {failure.name}: {failure.headline}", markup=True
        )
    facts = result.suite_facts
    if facts.hip is not None:
        out_console.print(
            f"  HIP runtime: {facts.hip.path} (hipGetDeviceCount -> {facts.hip.rc})",
            soft_wrap=True,
        )
    for pkg, found in facts.found_targets.items():
        out_console.print(f"  code objects in {pkg}: {';'.join(found)}")
    if facts.triton_refused:
        out_console.print(
            f"  Triton: does not support {';'.join(facts.triton_refused)} (its own verdict; "
            "not compiled)"
        )
    show_devices(facts.devices)
    if result.upstream is not None:
        for line in result.upstream.lines():
            out_console.print(f"  {line}", markup=False)
    out_console.print(f"  log: {result.log_file}", markup=False, soft_wrap=True)


def show_devices(devices: Sequence[Device]) -> None:
    for dev in devices:
        out_console.print(
            f"  device {dev.index}: {dev.name} {dev.gfx} "
            f"{dev.memory_gib:.1f} GiB {dev.compute_units} CUs"
        )
    if not devices:
        out_console.print("  no GPU visible: GPU checks skipped")
