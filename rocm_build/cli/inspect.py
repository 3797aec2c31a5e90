"""``rocm-build inspect``: what a wheel carries (``report.inspect_wheel``)."""

from __future__ import annotations

from pathlib import Path

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, out_console, pass_state


@o.command("inspect")
@click.argument(
    "wheels", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, dir_okay=False)
)
@click.option(
    "--require-arch",
    metavar="TARGETS",
    help="Exit 11 unless every listed gfx target has device code (in every wheel given).",
)
@pass_state
def command(state: State, wheels: tuple[Path, ...], require_arch: str | None) -> None:
    """Show what wheels carry: libraries, search paths, gfx targets, sizes, platform tag.

    With several WHEELS each is shown in turn (--json: a list of their reports; one wheel:
    its report); the exit code is the first wheel's that fails a check. Wheels given together
    are taken as installed together: a library one of them needs from another's folder is
    looked up in that wheel (a thin wheel with ROCm's packages, a torch extension with torch).
    """
    from rocm_build.bundle import report

    ctx = state.context()
    together = report.installed_together(wheels) if len(wheels) > 1 else None
    results = [
        report.inspect_wheel(w, ctx, require_arch=require_arch, together=together) for w in wheels
    ]
    if state.json:
        state.emit(results[0].data if len(results) == 1 else [r.data for r in results])
    else:
        for i, result in enumerate(results):
            if i:
                out_console.print("", markup=False)
            for line in report.render(result.data):
                out_console.print(line, markup=False, soft_wrap=True)
    for result in results:
        result.check()
