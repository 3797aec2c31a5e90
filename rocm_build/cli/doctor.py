"""``rocm-build doctor``: can this machine build? (checks: ``rocm_build.commands.doctor``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, out_console, pass_state

if TYPE_CHECKING:
    from rocm_build.commands.doctor import Row


@o.command("doctor")
@o.rocm_option("The tree to check.")
@o.arch_option("The targets a build would use.")
@o.train_option("Release train whose projects and ROCm floor to check.")
@click.argument("projects", nargs=-1)
@pass_state
def command(state: State, projects: tuple[str, ...]) -> None:
    """Check that this machine can build: tools, the ROCm tree, GPUs, memory, disk.

    Exits non-zero (with the first blocking problem's exit code) when something blocks a build.
    """
    from rocm_build.commands import doctor as doctor_checks

    ctx = state.resolve()
    specs = ctx.settings.selected_projects(projects)
    report = doctor_checks.check(ctx, specs)
    if state.json:
        state.emit(report.as_json())
    else:
        show(report.rows)
    error = report.error()
    if error is not None:
        raise error


def show(rows: Iterable[Row]) -> None:
    marks = {True: "[green]ok[/]", False: "[red]!![/]", None: "[yellow]--[/]"}
    for row in rows:
        out_console.print(f"{marks[row.good]} {row.label:<18} ", markup=True, end="")
        out_console.print(row.value, markup=False)
