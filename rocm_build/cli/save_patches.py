"""``rocm-build save-patches``: the commits on top of each checkout as patch series."""

from __future__ import annotations

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, out_console, pass_state


@o.command("save-patches")
@click.argument("projects", nargs=-1)
@o.src_dir_option
@o.patches_dir_option
@o.patchset_option("Patch series name (default: the one the checkout used, else the train).")
@pass_state
def command(
    state: State,
    projects: tuple[str, ...],
) -> None:
    """Save the commits on top of each checkout as its base/hipified patch series."""
    from rocm_build import sources as sources_stage

    ctx = state.resolve()
    saved = sources_stage.save_patches(sources_stage.save_patches_plan(ctx, projects))
    if state.json:
        state.emit({"projects": [s.as_json() for s in saved]})
        return
    for s in saved:
        counts = ", ".join(f"{n} {k}" for k, n in sorted(s.counts.items())) or "no patches"
        if s.removed:
            what = "series removed (no patches any more)"
        elif s.changed:
            what = f"saved ({counts})"
        else:
            what = f"unchanged ({counts})"
        out_console.print(
            f"[bold]{s.name}[/]: {what} in {s.root}", markup=True, highlight=False, soft_wrap=True
        )
