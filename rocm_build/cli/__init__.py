"""Command line: the ``rocm-build`` group, ``main`` and the mapping of errors to exit codes.

Each command lives in its own module of this package (parse flags, resolve the run context, call
a stage, render); shared options are declared once in ``options.py``; ``render.py`` turns
results into human output (rich) or JSON (``--json``). Only this package prints.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.markup import escape

from rocm_build import __version__
from rocm_build.cli import all as all_cmd
from rocm_build.cli import build as build_cmd
from rocm_build.cli import bundle as bundle_cmd
from rocm_build.cli import checkout as checkout_cmd
from rocm_build.cli import config as config_cmd
from rocm_build.cli import doctor as doctor_cmd
from rocm_build.cli import fetch as fetch_cmd
from rocm_build.cli import inspect as inspect_cmd
from rocm_build.cli import matrix as matrix_cmd
from rocm_build.cli import rocm as rocm_cmd
from rocm_build.cli import save_patches as save_patches_cmd
from rocm_build.cli import smoke as smoke_cmd
from rocm_build.cli.options import OrderedGroup, global_options
from rocm_build.cli.render import State, err_console, setup_logging
from rocm_build.common.errors import EXIT_CODES, RocmBuildError
from rocm_build.common.masking import mask_url
from rocm_build.wheel.membernames import shown

__all__ = ["cli", "fail", "main"]

EXIT_CODE_HELP = "\b\nExit codes:\n" + "\n".join(
    f"  {code:>3}  {text}" for code, text in sorted(EXIT_CODES.items())
)


def fail(err: RocmBuildError, *, debug_traceback: bool = False) -> NoReturn:
    if debug_traceback:
        sys.stderr.write(mask_url("".join(traceback.format_exception(err))))
    # escape: messages quote config sections like [projects.apex], which are not markup.
    # shown: a message may quote what an input says (a soname, a path): never a control
    # character on the terminal, and one line
    err_console.print(
        f"[bold red]rocm-build: error:[/] {escape(shown(str(err)))}", markup=True, soft_wrap=True
    )
    tail = getattr(err, "tail", ())
    if tail:
        err_console.print("[dim]last lines of the output:[/]", markup=True)
        for line in tail[-20:]:
            err_console.print(f"  {mask_url(line)}", markup=False, soft_wrap=True)
    sys.exit(err.exit_code)


def interrupted() -> NoReturn:
    """Ctrl-C, SIGTERM or SIGHUP: stop the children, say so in one line, exit 130."""
    from rocm_build.common import proc
    from rocm_build.common.errors import Interrupted

    proc.ignore_signals()
    proc.kill_children()
    how = "Ctrl-C" if proc.interrupted_by() == "SIGINT" else proc.interrupted_by()
    fail(Interrupted(f"interrupted ({how}); run the same command again to resume"))


class Group(OrderedGroup):
    """The top group: a user error becomes its one-line message and its exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RocmBuildError as err:
            state = ctx.find_object(State)
            fail(err, debug_traceback=bool(state and state.debug_traceback))
        except KeyboardInterrupt:
            interrupted()


@click.group(
    cls=Group, epilog=EXIT_CODE_HELP, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(__version__, prog_name="rocm-build")
@global_options(on_group=True)
@click.pass_context
def cli(
    ctx: click.Context,
    config_file: Path | None,
    verbose: int,
    quiet: bool,
    as_json: bool,
    debug_traceback: bool,
    no_wait: bool,
) -> None:
    """Build PyTorch, torchvision and torchaudio wheels for AMD GPUs.

    checkout -> build -> bundle -> smoke; `rocm-build all` runs them in order.
    """
    if hasattr(sys.stdout, "reconfigure"):
        # Keep our output and child processes' output in order when piped.
        sys.stdout.reconfigure(line_buffering=True)
    ctx.obj = State(
        config_file=config_file,
        verbose=verbose,
        quiet=quiet,
        json=as_json,
        debug_traceback=debug_traceback,
        no_wait=no_wait,
    )
    setup_logging(verbose, quiet or as_json)


for _module in (
    checkout_cmd,
    save_patches_cmd,
    fetch_cmd,
    build_cmd,
    bundle_cmd,
    inspect_cmd,
    smoke_cmd,
    all_cmd,
    doctor_cmd,
    matrix_cmd,
    config_cmd,
    rocm_cmd,
):
    cli.add_command(_module.command)


def main(argv: list[str] | None = None) -> None:
    from rocm_build.common import proc

    proc.handle_signals()
    try:
        cli.main(args=argv, prog_name="rocm-build", standalone_mode=True)
    except RocmBuildError as err:  # raised outside a command (e.g. during parsing)
        fail(err)
    except KeyboardInterrupt:
        interrupted()
    except SystemExit:
        raise
    except Exception:
        sys.stderr.write(mask_url(traceback.format_exc()))
        err_console.print(f"rocm-build: {EXIT_CODES[70]} (exit code 70)", markup=False)
        sys.exit(70)
    finally:
        # Whatever way the run ends, no child outlives it (a failure in a thread included).
        proc.kill_children()
