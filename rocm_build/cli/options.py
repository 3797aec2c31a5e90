"""Options shared by several commands, each declared once, as decorators; the global flags
(accepted before and after the command name); the ``Setting`` flag type; the command order.

A new shared option goes here; a command module stacks the decorators it needs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import click

from rocm_build import config
from rocm_build.cli.render import State, setup_logging

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]

if TYPE_CHECKING:
    _ParamType: TypeAlias = click.ParamType[Any]
else:  # click < 8.2 has no generic ParamType at run time
    _ParamType = click.ParamType


class Setting(_ParamType):
    """A flag that takes a setting's value: its type, range or choices come from
    ``config.SETTINGS``, and a bad value gets the same one-line error (exit 2) as a bad value in
    the config file or the environment."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.spec = config.SETTINGS[key]
        self.name = self.spec.kind.__name__

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        spec = self.spec
        if spec.choices:
            return "[" + "|".join(spec.choices) + "]"
        if spec.min is not None and spec.max is not None:
            return f"[{spec.min:g}-{spec.max:g}]"
        return "N" if spec.kind is int else self.name.upper()

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        flag = (
            next((x for x in param.opts if x.startswith("--")), param.opts[0])
            if param is not None
            else config.flag_name(self.key)
        )
        return config.check(self.key, value, f"flag {flag}")


def parse_pairs(option: str, pairs: tuple[str, ...], key: str) -> dict[str, str]:
    """``('torch=v2.9.1',)`` -> ``{'projects.torch.<key>': 'v2.9.1'}``."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or not value:
            msg = f"{option} expects PROJECT=VALUE, got '{pair}'"
            raise click.BadParameter(msg)
        out[f"projects.{name.strip()}.{key}"] = value.strip()
    return out


def text(value: Path | str | None) -> str | None:
    """A folder flag's value as the string a setting takes (None: not given)."""
    return str(value) if value else None


#: ``rocm-build --help`` lists the commands in pipeline order, then the helpers.
COMMAND_ORDER = (
    "checkout",
    "save-patches",
    "fetch",
    "build",
    "bundle",
    "inspect",
    "smoke",
    "all",
    "doctor",
    "matrix",
    "config",
    "rocm",
)


class OrderedGroup(click.Group):
    """Commands in pipeline order, with whole first sentences as their summaries."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = super().list_commands(ctx)
        if ctx.parent is not None:  # a group's own commands (rocm fetch, ...): by name
            return sorted(names)
        rank = {name: i for i, name in enumerate(COMMAND_ORDER)}
        return sorted(names, key=lambda name: (rank.get(name, len(rank)), name))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Click cuts each summary at ~45 characters ("..."); show whole first sentences.
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=200)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


# --- global flags --------------------------------------------------------------------------------

#: (parameter declarations, State field, click keyword arguments) of each global flag.
GLOBAL_FLAGS: tuple[tuple[tuple[str, ...], str, dict[str, Any]], ...] = (
    (
        ("--config", "config_file"),
        "config_file",
        {
            "type": click.Path(path_type=Path, dir_okay=False),
            "help": "Config file (default: ./rocm-build.toml, or [tool.rocm-build] in "
            "./pyproject.toml).",
        },
    ),
    (
        ("-v", "--verbose"),
        "verbose",
        {"count": True, "help": "Show every setting and debug output."},
    ),
    (("-q", "--quiet"), "quiet", {"is_flag": True, "help": "Only warnings and errors."}),
    (
        ("--json", "as_json"),
        "json",
        {"is_flag": True, "help": "Machine-readable output on stdout."},
    ),
    (
        ("--debug-traceback",),
        "debug_traceback",
        {"is_flag": True, "help": "Show tracebacks for user errors too."},
    ),
    (
        ("--no-wait",),
        "no_wait",
        {
            "is_flag": True,
            "help": "Stop at once (exit 13) when another run holds a checkout, patch folder or "
            "wheel.",
        },
    ),
)


def _merge(field: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    """Callback of a global flag given after the command name: merged into the run's State."""

    def merge(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if not value:
            return
        state = ctx.ensure_object(State)
        if field == "verbose":
            state.verbose += int(value)
        else:
            setattr(state, field, value)
        setup_logging(state.verbose, state.quiet or state.json)

    return merge


def global_options(*, on_group: bool) -> Decorator[Any]:
    """The global flags: on the group they are passed to its callback; on a command (hidden
    there, the group's --help lists them) they are merged into the State."""

    def apply(f: F) -> F:
        for decls, field, kwargs in reversed(GLOBAL_FLAGS):
            if on_group:
                f = click.option(*decls, **kwargs)(f)
            else:
                opts = tuple(d for d in decls if d.startswith("-"))
                f = click.option(
                    *opts,
                    field,
                    **kwargs,
                    hidden=True,
                    expose_value=False,
                    callback=_merge(field),
                )(f)
        return f

    return apply


def command(name: str, **kwargs: Any) -> Callable[[Callable[..., Any]], click.Command]:
    """A subcommand (added to the group in ``cli/__init__``) that takes the global flags too."""

    def make(f: Callable[..., Any]) -> click.Command:
        make_command = cast(
            "Callable[[Callable[..., Any]], click.Command]", click.command(name, **kwargs)
        )
        return make_command(global_options(on_group=False)(f))

    return make


# --- options shared by several commands --------------------------------------------------------

_DIR = click.Path(path_type=Path, file_okay=False)


def rocm_option(note: str = "") -> Decorator[Any]:
    """--rocm; ``note`` adds what the tree is for in one command."""
    help_text = (
        "ROCm tree: its folder, or the URL of a tarball of one (unpacked into the cache)."
        + (f" {note}" if note else "")
    )
    return click.option("--rocm", metavar="DIR|URL", help=help_text)


def arch_option(note: str = "") -> Decorator[Any]:
    """--arch; ``note`` says what the targets are used for in one command."""
    help_text = "gfx targets or families, ';' or ',' separated: 'gfx90a;gfx1100', 'gfx94X'." + (
        f" {note}" if note else ""
    )
    return click.option("--arch", metavar="TARGETS", help=help_text)


def src_dir(note: str = "") -> Decorator[Any]:
    """--src-dir; ``note`` says what one command does with the checkouts."""
    help_text = "Checkouts, one per project (./src)." + (f" {note}" if note else "")
    return click.option("--src-dir", type=_DIR, metavar="DIR", help=help_text)


src_dir_option = src_dir()
patches_dir_option = click.option(
    "--patches-dir",
    type=_DIR,
    metavar="DIR",
    help="Your patch series (./patches); else the ones rocm-build ships.",
)


def output_dir(*, required: bool = False) -> Decorator[Any]:
    """--output-dir; ``required`` where there is no output_dir setting to fall back on."""
    help_text = "Where the wheels go." if required else "Where wheels go (./wheels)."
    # No file_okay=False here: an output folder that is a file is the stage's one-line exit 14,
    # checked where the wheel is written (and the same for every command that writes wheels).
    return click.option(
        "--output-dir",
        type=click.Path(path_type=Path),
        metavar="DIR",
        required=required,
        help=help_text,
    )


output_dir_option = output_dir()

#: bundle's output folder, as auditwheel and delvewheel name it (``-w/--wheel-dir``, what
#: cibuildwheel's repair command passes ``{dest_dir}`` to; the ``bundle.wheel_dir`` setting);
#: ``--output-dir`` is the same flag.
wheel_dir_option = click.option(
    "-w",
    "--wheel-dir",
    "--output-dir",
    "output_dir",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="Write the bundled wheels into DIR as they are, as auditwheel's -w (without it: into "
    "the wheelhouse's folder of their target set, ./wheelhouse/gfx942/; --output-dir is the same "
    "flag).",
)


def target_family_option(note: str) -> Decorator[Any]:
    """--target-family: the FAMILY of ROCm's rocm-sdk-libraries-FAMILY package."""
    return click.option(
        "--target-family",
        default="all",
        metavar="NAME",
        help=f"The FAMILY of rocm-sdk-libraries-FAMILY (default all). {note}",
    )


work_dir_option = click.option(
    "--work-dir",
    type=_DIR,
    metavar="DIR",
    help="Logs, build environments, stamps and run reports (./.rocm-build).",
)


def patchset_option(help_text: str = "Patch series name (default: the train).") -> Decorator[Any]:
    return click.option("--patchset", help=help_text)


def train_option(help_text: str) -> Decorator[Any]:
    return click.option("--train", metavar="NAME", help=help_text)


ref_option = click.option(
    "--ref", "refs", multiple=True, metavar="PROJECT=REF", help="Branch, tag or SHA."
)
origin_option = click.option(
    "--origin", "origins", multiple=True, metavar="PROJECT=URL", help="Git URL."
)
jobs_option = click.option(
    "-j", "--jobs", type=Setting("jobs"), help="Parallel compile jobs (0: auto)."
)
cache_option = click.option(
    "--cache", type=Setting("build.cache"), help="Compiler cache (auto: ccache when installed)."
)


def find_links_option(help_text: str, **kwargs: Any) -> Decorator[Any]:
    return click.option("--find-links", multiple=True, help=help_text, **kwargs)


def python_option(help_text: str) -> Decorator[Any]:
    return click.option("--python", "python", metavar="PY", help=help_text)


def offline_option(help_text: str) -> Decorator[Any]:
    return click.option("--offline", is_flag=True, default=None, help=help_text)


junit_option = click.option(
    "--junit",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the smoke suite's JUnit XML here.",
)


def dry_run_option(help_text: str) -> Decorator[Any]:
    return click.option("--dry-run", is_flag=True, default=None, help=help_text)


def force_option(help_text: str) -> Decorator[Any]:
    return click.option("--force", is_flag=True, default=None, help=help_text)


allow_dirty_option = click.option(
    "--allow-dirty",
    is_flag=True,
    default=None,
    help="Build checkouts with uncommitted changes (their versions end in .dirty).",
)


def mirror_option() -> Decorator[Any]:
    return click.option(
        "--mirror",
        default="",
        metavar="URL",
        help="Debian mirror (default: the one apt uses here).",
    )
