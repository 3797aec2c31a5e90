"""``rocm-build inspect``: what a wheel carries (``report.inspect_wheel``)."""

from __future__ import annotations

from pathlib import Path

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, out_console, pass_state


@o.command("inspect")
@click.argument("wheel", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "--require-arch",
    metavar="TARGETS",
    help="Exit 11 unless every listed gfx target has device code.",
)
@pass_state
def command(state: State, wheel: Path, require_arch: str | None) -> None:
    """Show what a wheel carries: libraries, search paths, gfx targets, sizes, platform tag."""
    from rocm_build.bundle import report

    ctx = state.context()
    result = report.inspect_wheel(wheel, ctx, require_arch=require_arch)
    if state.json:
        state.emit(result.data)
    else:
        for line in report.render(result.data):
            out_console.print(line, markup=False, soft_wrap=True)
    result.check()
