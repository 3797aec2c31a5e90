"""Options shared by several commands, each declared once, as decorators; the global flags
(accepted before and after the command name); the ``Setting`` flag type; the command order.

A new shared option goes here; a command module stacks the decorators it needs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import click

from rocm_build import config
from rocm_build.cli import given
from rocm_build.cli.render import State, setup_logging

F = TypeVar("F", bound=Callable[..., Any])
Decorator = Callable[[F], F]
#: The setting(s) an option is bound to, by dotted key; None: a plain option.
Key: TypeAlias = str | tuple[str, ...] | None

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


def bound(key: Key, convert: Callable[[Any], Any] | None = None) -> dict[str, Any]:
    """The click keyword arguments that bind an option to the setting(s) ``key``: not a
    parameter of the command; the value the user gives is recorded (:mod:`.given`) and becomes
    the run's flag setting. ``None``: a plain option (a command that uses the value itself)."""
    if key is None:
        return {}
    keys = (key,) if isinstance(key, str) else key
    return {"expose_value": False, "callback": given.recorder(keys, convert)}


def setting_option(
    *decls: str,
    key: str | tuple[str, ...],
    convert: Callable[[Any], Any] | None = None,
    **kwargs: Any,
) -> Decorator[Any]:
    """An option bound to a setting (:func:`bound`): one decorator, nothing in the command's
    body. Its type is ``Setting(key)`` unless given, where the kind takes one value with a
    range or choices (a number, a choice); a switch or a list declares its own shape."""
    spec = config.SETTINGS[key if isinstance(key, str) else key[0]]
    flag = kwargs.get("is_flag") or "flag_value" in kwargs or kwargs.get("multiple")
    if "type" not in kwargs and not flag and (spec.kind in (int, float) or spec.choices):
        kwargs["type"] = Setting(key if isinstance(key, str) else key[0])
    return click.option(*decls, **kwargs, **bound(key, convert))


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


def rocm_option(
    note: str = "", *, key: Key = "rocm", convert: Callable[[Any], Any] | None = None
) -> Decorator[Any]:
    """--rocm; ``note`` adds what the tree is for in one command."""
    help_text = (
        "ROCm tree: its folder, or the URL of a tarball of one (unpacked into the cache)."
        + (f" {note}" if note else "")
    )
    return click.option("--rocm", metavar="DIR|URL", help=help_text, **bound(key, convert))


def arch_option(note: str = "", *, key: Key = "arch") -> Decorator[Any]:
    """--arch; ``note`` says what the targets are used for in one command (``key=None``: a
    command that takes the targets itself, not the setting)."""
    help_text = "gfx targets or families, ';' or ',' separated: 'gfx90a;gfx1100', 'gfx94X'." + (
        f" {note}" if note else ""
    )
    return click.option("--arch", metavar="TARGETS", help=help_text, **bound(key))


def src_dir(note: str = "") -> Decorator[Any]:
    """--src-dir; ``note`` says what one command does with the checkouts."""
    help_text = "Checkouts, one per project (./src)." + (f" {note}" if note else "")
    return click.option("--src-dir", type=_DIR, metavar="DIR", help=help_text, **bound("src_dir"))


src_dir_option = src_dir()
patches_dir_option = click.option(
    "--patches-dir",
    type=_DIR,
    metavar="DIR",
    help="Your patch series (./patches); else the ones rocm-build ships.",
    **bound("patches_dir"),
)


def output_dir(*, required: bool = False) -> Decorator[Any]:
    """--output-dir; ``required`` where there is no output_dir setting to fall back on (the
    command takes the folder itself)."""
    help_text = "Where the wheels go." if required else "Where wheels go (./wheels)."
    # No file_okay=False here: an output folder that is a file is the stage's one-line exit 14,
    # checked where the wheel is written (and the same for every command that writes wheels).
    return click.option(
        "--output-dir",
        type=click.Path(path_type=Path),
        metavar="DIR",
        required=required,
        help=help_text,
        **bound(None if required else "output_dir"),
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
    **bound("bundle.wheel_dir"),
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
    **bound("work_dir"),
)


def patchset_option(help_text: str = "Patch series name (default: the train).") -> Decorator[Any]:
    return click.option("--patchset", help=help_text, **bound("patchset"))


def train_option(help_text: str) -> Decorator[Any]:
    return click.option("--train", metavar="NAME", help=help_text, **bound("train"))


ref_option = click.option(
    "--ref",
    "refs",
    multiple=True,
    metavar="PROJECT=REF",
    help="Branch, tag or SHA.",
    expose_value=False,
    callback=given.pair_recorder("ref"),
)
origin_option = click.option(
    "--origin",
    "origins",
    multiple=True,
    metavar="PROJECT=URL",
    help="Git URL.",
    expose_value=False,
    callback=given.pair_recorder("origin"),
)
jobs_option = click.option(
    "-j", "--jobs", type=Setting("jobs"), help="Parallel compile jobs (0: auto).", **bound("jobs")
)
cache_option = click.option(
    "--cache",
    type=Setting("build.cache"),
    help="Compiler cache (auto: ccache when installed).",
    **bound("build.cache"),
)


def find_links_option(help_text: str, *, key: Key, **kwargs: Any) -> Decorator[Any]:
    return click.option("--find-links", multiple=True, help=help_text, **kwargs, **bound(key))


def python_option(help_text: str, *, key: Key = "smoke.python") -> Decorator[Any]:
    return click.option("--python", "python", metavar="PY", help=help_text, **bound(key))


def offline_option(help_text: str, *, key: Key) -> Decorator[Any]:
    return click.option("--offline", is_flag=True, default=None, help=help_text, **bound(key))


junit_option = click.option(
    "--junit",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Write the smoke suite's JUnit XML here.",
)


def dry_run_option(help_text: str, *, key: Key = None) -> Decorator[Any]:
    """--dry-run: the stage's ``dry_run`` setting (``key``), or the command's own (None)."""
    return click.option("--dry-run", is_flag=True, default=None, help=help_text, **bound(key))


def force_option(help_text: str, *, key: Key) -> Decorator[Any]:
    return click.option("--force", is_flag=True, default=None, help=help_text, **bound(key))


allow_dirty_option = click.option(
    "--allow-dirty",
    is_flag=True,
    default=None,
    help="Build checkouts with uncommitted changes (their versions end in .dirty).",
    **bound("build.allow_dirty"),
)


def mirror_option() -> Decorator[Any]:
    return click.option(
        "--mirror",
        default="",
        metavar="URL",
        help="Debian mirror (default: the one apt uses here).",
    )
