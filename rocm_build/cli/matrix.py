"""``rocm-build matrix``: CI jobs (``rocm_build.commands.matrix``)."""

from __future__ import annotations

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, pass_state


def as_list(value: str) -> list[str]:
    """A LIST flag's value: ``matrix.split_list`` (a group's targets stay together)."""
    from rocm_build.commands import matrix as matrix_mod

    return matrix_mod.split_list(value)


@o.command("matrix")
@o.setting_option(
    "--python",
    "pythons",
    key="matrix.pythons",
    convert=as_list,
    metavar="LIST",
    help="Python versions: 3.11,3.12.",
)
@o.setting_option(
    "--train",
    "trains",
    key="matrix.trains",
    convert=as_list,
    metavar="LIST",
    help="Release trains: 2.9,2.10.",
)
@o.setting_option(
    "--arch-groups",
    key="matrix.arch_groups",
    convert=as_list,
    metavar="LIST",
    help="gfx target groups, comma separated: families (gfx94X), targets joined by ';' or '+' "
    "(gfx90a;gfx942), or NAME=targets.",
)
@o.rocm_option(
    "Each job builds against it; {group}, {arch}, {train}, {python} are replaced.",
    key="matrix.rocm",
)
@o.setting_option(
    "--gpu-labels",
    key="matrix.gpu_labels",
    convert=as_list,
    metavar="LIST",
    help="runs-on labels of GPU smoke jobs ({group}).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "github"]),
    default="json",
    show_default=True,
    help="github: one 'matrix=<json>' line for $GITHUB_OUTPUT.",
)
@pass_state
def command(state: State, fmt: str) -> None:
    """CI jobs: one per Python version x release train x group of gfx targets.

    \b
    rocm-build matrix --python 3.12 --train 2.9,2.10 --arch-groups gfx94X,gfx110X
    rocm-build matrix --format github >> "$GITHUB_OUTPUT"
    """
    from rocm_build.commands import matrix as matrix_mod

    ctx = state.resolve()
    jobs = matrix_mod.plan_matrix(ctx.settings)
    if fmt == "github":
        click.echo(matrix_mod.as_github_output(jobs))
    else:
        state.emit(matrix_mod.as_json(jobs))
