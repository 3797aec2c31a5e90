"""``rocm-build matrix``: CI jobs (``rocm_build.commands.matrix``)."""

from __future__ import annotations

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, pass_state


@o.command("matrix")
@click.option("--python", "pythons", metavar="LIST", help="Python versions: 3.11,3.12.")
@click.option("--train", "trains", metavar="LIST", help="Release trains: 2.9,2.10.")
@click.option(
    "--arch-groups",
    metavar="LIST",
    help="gfx target groups, comma separated: families (gfx94X), targets joined by ';' or '+' "
    "(gfx90a;gfx942), or NAME=targets.",
)
@o.rocm_option("Each job builds against it; {group}, {arch}, {train}, {python} are replaced.")
@click.option("--gpu-labels", metavar="LIST", help="runs-on labels of GPU smoke jobs ({group}).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "github"]),
    default="json",
    show_default=True,
    help="github: one 'matrix=<json>' line for $GITHUB_OUTPUT.",
)
@pass_state
def command(
    state: State,
    pythons: str | None,
    trains: str | None,
    arch_groups: str | None,
    rocm: str | None,
    gpu_labels: str | None,
    fmt: str,
) -> None:
    """CI jobs: one per Python version x release train x group of gfx targets.

    \b
    rocm-build matrix --python 3.12 --train 2.9,2.10 --arch-groups gfx94X,gfx110X
    rocm-build matrix --format github >> "$GITHUB_OUTPUT"
    """
    from rocm_build.commands import matrix as matrix_mod

    def as_list(value: str | None) -> list[str] | None:
        return None if value is None else matrix_mod.split_list(value)

    ctx = state.resolve(
        {
            "matrix.pythons": as_list(pythons),
            "matrix.trains": as_list(trains),
            "matrix.arch_groups": as_list(arch_groups),
            "matrix.rocm": rocm,
            "matrix.gpu_labels": as_list(gpu_labels),
        }
    )
    jobs = matrix_mod.plan_matrix(ctx.settings)
    if fmt == "github":
        click.echo(matrix_mod.as_github_output(jobs))
    else:
        state.emit(matrix_mod.as_json(jobs))
