"""Command line: parse flags, resolve the Config, call a stage, map errors to exit codes.

Only this module prints. Stages log through ``logging`` and return results; this module turns
them into human output (rich) or JSON (``--json``).
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NoReturn, TypeAlias

import click
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import (
    BarColumn,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgressBars
from rich.text import Text

from . import __version__, config, context
from . import matrix as matrix_mod
from .context import RunContext
from .errors import EXIT_CODES, RocmBuildError
from .masking import mask_data, mask_url, mask_values
from .progress import NO_PROGRESS, Progress
from .sizes import human_size

__all__ = ["main"]

EXIT_CODE_HELP = "\b\nExit codes:\n" + "\n".join(
    f"  {code:>3}  {text}" for code, text in sorted(EXIT_CODES.items())
)

# Never hard-wrap at the terminal width: stdout carries paths and results that scripts read, and
# stderr ends up in CI logs, where a path cut at column 80 cannot be copied.
err_console = Console(stderr=True, highlight=False, soft_wrap=True)
out_console = Console(highlight=False, soft_wrap=True)


@dataclass
class State:
    config_file: Path | None = None
    verbose: int = 0
    quiet: bool = False
    json: bool = False
    debug_traceback: bool = False
    no_wait: bool = False

    def resolve(self, flags: Mapping[str, Any] | None = None) -> RunContext:
        """Resolve the settings and the run context, and show the settings (stderr, so --json
        stays clean)."""
        ctx = self.context(flags)
        if not self.quiet and not self.json:
            show_settings(ctx.settings, only_changed=self.verbose == 0)
        return ctx

    def context(self, flags: Mapping[str, Any] | None = None) -> RunContext:
        """The run context of this run's settings, not shown; a ROCm tree download shows a bar
        unless --quiet or --json."""
        flags = {**(flags or {}), "no_wait": True if self.no_wait else None}
        cfg = config.from_environment(flags=flags, config_file=self.config_file)
        show = not (self.quiet or self.json)
        return context.resolve(cfg, download_progress=_render_download if show else None)

    def emit(self, data: Any) -> None:
        """Machine output for --json (credentials in URLs masked, as everywhere)."""
        click.echo(mask_url(json.dumps(mask_data(data), indent=2, sort_keys=True, default=str)))

    def progress(self) -> Progress:
        """Where stages report progress: rich bars on stderr, or nothing with --quiet/--json."""
        if self.quiet or self.json:
            return NO_PROGRESS
        return RichProgress(verbose=self.verbose > 0)


class _CountColumn(ProgressColumn):
    """'12/40', or sizes for byte counts; just the count while the total is unknown."""

    def render(self, task: Task) -> Text:
        as_size = "bytes" in str(task.description)
        done = human_size(int(task.completed)) if as_size else str(int(task.completed))
        if task.total is None:
            return Text(done if task.completed else "", style="progress.download")
        total = human_size(int(task.total)) if as_size else str(int(task.total))
        return Text(f"{done}/{total}", style="progress.download")


class RichProgress:
    """The ``progress.Progress`` the CLI hands to stages: transient rich bars on stderr.

    The live display runs only while a task is open, so other live displays (the download
    bar) can run between stages. With --verbose each finished task leaves a line."""

    def __init__(self, *, verbose: bool = False) -> None:
        self.verbose = verbose
        self.bars = RichProgressBars(
            SpinnerColumn(),
            TextColumn("{task.description}", style="progress.description", markup=False),
            BarColumn(),
            _CountColumn(),
            TimeElapsedColumn(),
            console=err_console,
            transient=True,
        )
        self.tasks: dict[str, TaskID] = {}
        self.live = False

    def start(self, task: str, total: int | None = None) -> None:
        if task in self.tasks:
            self.bars.update(self.tasks[task], total=total)
            return
        if not self.live:
            self.bars.start()
            self.live = True
        self.tasks[task] = self.bars.add_task(task, total=total)

    def advance(self, task: str, n: int = 1) -> None:
        if task in self.tasks:
            self.bars.advance(self.tasks[task], n)

    def done(self, task: str) -> None:
        task_id = self.tasks.pop(task, None)
        if task_id is None:
            return
        info = next(t for t in self.bars.tasks if t.id == task_id)
        if self.verbose and (info.total is not None or info.completed):
            count = _CountColumn().render(info)
            err_console.print(f"  {task}: {count.plain}", markup=False, highlight=False)
        self.bars.remove_task(task_id)
        if not self.tasks:
            self.close()

    def close(self) -> None:
        if self.live:
            self.bars.stop()
            self.live = False


pass_state = click.make_pass_decorator(State, ensure=True)


def show_settings(
    cfg: config.Config, *, only_changed: bool, console: Console | None = None
) -> None:
    """The settings (stderr by default: a command's own output stays clean on stdout)."""
    console = console or err_console
    rows = [r for r in cfg.describe() if not only_changed or r[2] != "default"]
    source = f" from {cfg.config_file}" if cfg.config_file else ""
    console.print(f"[bold]rocm-build {__version__}[/]: settings{source}", markup=True)
    for key, value, origin in rows:
        shown = escape(mask_url(repr(value)))
        console.print(f"  {key} = {shown}  [dim]({origin})[/]", markup=True)


class _LogFormatter(logging.Formatter):
    """Plain messages; warnings and errors say so, as a compiler's diagnostics do. Credentials
    in URLs are masked here too, whatever a module logged."""

    def format(self, record: logging.LogRecord) -> str:
        message = mask_url(super().format(record))
        if record.levelno >= logging.WARNING:
            return f"rocm-build: {record.levelname.lower()}: {message}"
        return message


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.DEBUG if verbose > 0 else logging.INFO
    handler: logging.Handler
    if err_console.is_terminal:
        handler = RichHandler(
            console=err_console, show_time=False, show_path=False, markup=False, show_level=False
        )
    else:
        # CI logs and files: one line per record, never wrapped at 80 columns.
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_LogFormatter("%(message)s"))
    root = logging.getLogger("rocm_build")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def fail(err: RocmBuildError, *, debug_traceback: bool = False) -> NoReturn:
    if debug_traceback:
        sys.stderr.write(mask_url("".join(traceback.format_exception(err))))
    # escape: messages quote config sections like [projects.apex], which are not markup.
    err_console.print(
        f"[bold red]rocm-build: error:[/] {escape(str(err))}", markup=True, soft_wrap=True
    )
    tail = getattr(err, "tail", ())
    if tail:
        err_console.print("[dim]last lines of the output:[/]", markup=True)
        for line in tail[-20:]:
            err_console.print(f"  {mask_url(line)}", markup=False, soft_wrap=True)
    sys.exit(err.exit_code)


def interrupted() -> NoReturn:
    """Ctrl-C, SIGTERM or SIGHUP: stop the children, say so in one line, exit 130."""
    from . import proc
    from .errors import Interrupted

    proc.ignore_signals()
    proc.kill_children()
    how = "Ctrl-C" if proc.interrupted_by() == "SIGINT" else proc.interrupted_by()
    fail(Interrupted(f"interrupted ({how}); run the same command again to resume"))


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
        flag = max(param.opts, key=len) if param is not None else config.flag_name(self.key)
        return config.check(self.key, value, f"flag {flag}")


#: ``rocm-build --help`` lists the commands in pipeline order, then the helpers.
COMMAND_ORDER = (
    "checkout",
    "save-patches",
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


class Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        names = super().list_commands(ctx)
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
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Config file (default: ./rocm-build.toml, or [tool.rocm-build] in ./pyproject.toml).",
)
@click.option("-v", "--verbose", count=True, help="Show every setting and debug output.")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")
@click.option("--debug-traceback", is_flag=True, help="Show tracebacks for user errors too.")
@click.option(
    "--no-wait",
    is_flag=True,
    help="Stop at once (exit 13) when another run holds a checkout, patch folder or wheel.",
)
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
    _setup_logging(verbose, quiet or as_json)


@cli.command("config")
@pass_state
def config_cmd(state: State) -> None:
    """Show every resolved setting and where it came from."""
    cfg = config.from_environment(config_file=state.config_file)
    if state.json:
        state.emit(mask_values(cfg.as_json()))
        return
    # The settings are this command's output: stdout, so `rocm-build config | grep depth` works.
    show_settings(cfg, only_changed=False, console=out_console)
    out_console.print("projects:")
    for name, spec in cfg.projects.items():
        ref = cfg.trains.get(cfg.general.train, {}).get(name, "")
        out_console.print(
            f"  {name}: {mask_url(spec.origin)} {spec.ref or ref or '(no ref in train)'}"
        )


@cli.command("matrix")
@click.option("--python", "pythons", metavar="LIST", help="Python versions: 3.11,3.12.")
@click.option("--train", "trains", metavar="LIST", help="Release trains: 2.9,2.10.")
@click.option(
    "--arch-groups",
    metavar="LIST",
    help="gfx target groups, comma separated: families (gfx94X), targets joined by ';' or '+' "
    "(gfx90a;gfx942), or NAME=targets.",
)
@click.option(
    "--rocm",
    metavar="DIR|URL",
    help="ROCm tree each job builds against; {group}, {arch}, {train}, {python} are replaced.",
)
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
def matrix_cmd(
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


@cli.group("rocm", cls=Group)
def rocm_group() -> None:
    """Get a ROCm tree to build against."""


@rocm_group.command("debian")
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--cache",
    type=click.Path(path_type=Path, file_okay=False),
    help="Cache folder for the downloaded .debs (default: ~/.cache/rocm-build/debian).",
)
@click.option(
    "--release",
    default="",
    metavar="NAME",
    help="Debian release whose packages to use: bookworm (ROCm 5.2, default) or sid (ROCm 6.4).",
)
@click.option(
    "--mirror", default="", metavar="URL", help="Debian mirror (default: the one apt uses here)."
)
@pass_state
def rocm_debian(state: State, dest: Path, cache: Path | None, release: str, mirror: str) -> None:
    """Assemble a real ROCm tree (TheRock layout) in DEST from Debian's packages.

    The packages are downloaded with apt-get (from a private index of the release, so the
    system's apt setup is untouched) and unpacked, never installed; downloads are cached by
    version. bookworm gives ROCm 5.2.3 with clang 15 (gfx803-gfx90a, gfx1010-gfx1036); sid
    gives ROCm 6.4 with clang 21 and the math libraries, whose programs need a sid root to run
    (rocm-build rocm sysroot).
    """
    from . import debtree, dist

    tree = debtree.assemble(dest, cache=cache, release=release, mirror=mirror)
    version = dist.open_tree(tree).version
    if state.json:
        state.emit({"rocm": str(tree), "version": version})
    else:
        out_console.print(f"ROCm {version} tree: {tree}", markup=False)


@rocm_group.command("wheels")
@click.argument("tree", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option(
    "--output-dir",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Where the wheels go.",
)
@click.option(
    "--target-family",
    default="all",
    metavar="NAME",
    help="Target family in the libraries package's name (rocm-sdk-libraries-NAME; default all).",
)
@click.option(
    "--arch",
    metavar="TARGETS",
    help="gfx targets whose data the libraries package keeps (';' or ','; families ok); "
    "default: all of the tree's.",
)
@click.option(
    "-z", "--compression-level", type=click.IntRange(0, 9), default=6, help="Deflate level."
)
@pass_state
def rocm_wheels(
    state: State,
    tree: Path,
    output_dir: Path,
    target_family: str,
    arch: str | None,
    compression_level: int,
) -> None:
    """Package TREE as ROCm's Python packages: rocm-sdk-core, rocm-sdk-libraries-FAMILY, rocm.

    Same distribution names and site-packages folders (_rocm_sdk_core/, ...) as ROCm's own, at
    the tree's version: what thin wheels (bundle --mode thin) depend on.
    """
    from . import rocmwheels

    targets: tuple[str, ...] = ()
    if arch:
        ctx = context.resolve(config.from_environment(config_file=state.config_file))
        targets = ctx.parse_targets(arch)
    made = rocmwheels.build_wheels(
        tree, output_dir, family=target_family, level=compression_level, targets=targets
    )
    if state.json:
        state.emit([str(p) for p in made])
    else:
        for path in made:
            out_console.print(
                f"{path}  ({human_size(path.stat().st_size)})", markup=False, soft_wrap=True
            )


@rocm_group.command("sysroot")
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@click.option("--release", default="sid", metavar="NAME", help="Debian release of the root.")
@click.option(
    "--mirror", default="", metavar="URL", help="Debian mirror (default: the one apt uses here)."
)
@pass_state
def rocm_sysroot(state: State, dest: Path, release: str, mirror: str) -> None:
    """Make a Debian root (default: sid) in DEST to build and test against a newer ROCm.

    Made once with mmdebstrap (as root): python3 and venv, compilers, cmake, ninja and git, plus
    this machine's CA bundle and pip settings. Run commands in it with rocm-build rocm run.
    """
    from . import sysroot

    root, made = sysroot.make_root(dest, release=release, mirror=mirror)
    if state.json:
        state.emit({"root": str(root), "made": made})
    else:
        out_console.print(f"{'made' if made else 'ready'}: {root}", markup=False)


@rocm_group.command("run", context_settings={"ignore_unknown_options": True})
@click.argument("root", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--bind",
    "binds",
    multiple=True,
    type=click.Path(path_type=Path, exists=True),
    help="Folder to see inside the root at the same path (repeatable); the ROCm tree of the "
    "rocm setting and the current folder always are.",
)
@pass_state
def rocm_run(state: State, root: Path, cmd: tuple[str, ...], binds: tuple[Path, ...]) -> None:
    """Run CMD inside ROOT (a root made by rocm sysroot) as root; exits with CMD's exit code.

    /proc, /dev, /sys, the current folder, the --bind folders and the configured ROCm tree
    appear at their own paths inside, e.g.
    rocm-build rocm run ROOT -- hipcc --offload-arch=gfx1100 k.hip -o k
    """
    from . import sysroot

    cfg = state.resolve().settings
    folders = list(binds)
    setting = cfg.general.rocm
    if setting and Path(setting).is_dir():
        folders.append(Path(setting))
    code = sysroot.run(root, cmd, binds=folders, env=cfg.env)
    sys.exit(code)


@cli.command("smoke")
@click.argument("wheels", nargs=-1, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--python",
    "python",
    metavar="PY",
    help="Interpreter for the fresh environment (default: this one).",
)
@click.option(
    "--junit", type=click.Path(path_type=Path, dir_okay=False), help="Write JUnit XML here."
)
@click.option(
    "--offline",
    is_flag=True,
    default=None,
    help="Install pytest and dependencies only from --find-links.",
)
@click.option(
    "--find-links",
    multiple=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Local folder of wheels for dependencies and pytest (repeatable).",
)
@click.option(
    "--upstream-tests",
    "upstream_tests",
    metavar="PATTERN",
    help="Also run PyTorch's own test files matching PATTERN (in src/torch/test).",
)
@click.option(
    "--arch", metavar="TARGETS", help="The gfx targets the wheels were built for (';' or ',')."
)
@click.option(
    "--rocm",
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="The ROCm tree used to build: nothing may load from it.",
)
@click.option(
    "--src-dir",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="Checkouts (default ./src): nothing may load from them.",
)
@pass_state
def smoke_cmd(
    state: State,
    wheels: tuple[Path, ...],
    python: str | None,
    junit: Path | None,
    offline: bool | None,
    find_links: tuple[Path, ...],
    upstream_tests: str | None,
    arch: str | None,
    rocm: Path | None,
    src_dir: Path | None,
) -> None:
    """Install WHEELs into a fresh environment with no ROCm in reach and run the smoke suite.

    Library provenance, search paths, code-object targets and the HIP runtime are checked for
    any package; torch, torchvision and torchaudio get their own checks, and GPU checks run when
    a GPU is visible. Exit code 12 when a check fails.
    """
    from . import smoke

    ctx = state.resolve(
        {
            "smoke.python": python,
            "smoke.offline": offline,
            "smoke.find_links": [str(p) for p in find_links] or None,
            "smoke.upstream_tests": upstream_tests,
            "arch": arch,
            "rocm": str(rocm) if rocm else None,
            "src_dir": str(src_dir) if src_dir else None,
        }
    )
    plan = smoke.plan(ctx, wheels, junit=junit)
    result = smoke.run(plan)
    if state.json:
        state.emit(result.as_json())
    elif not state.quiet:
        show_smoke(result)
    smoke.check(result)


def show_smoke(result: Any) -> None:
    """Human summary of a smoke run (a ``smoke.SmokeResult``)."""
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
    for probe in result.facts.get("probes", {}).values():
        hip = probe.get("hip") or {}
        if hip.get("loaded") and "rc" in hip:
            out_console.print(
                f"  HIP runtime: {hip['path']} (hipGetDeviceCount -> {hip['rc']})",
                soft_wrap=True,
            )
            break
    for pkg, found in result.facts.get("found_targets", {}).items():
        out_console.print(f"  code objects in {pkg}: {';'.join(found)}")
    devices = result.facts.get("devices", [])
    for dev in devices:
        out_console.print(
            f"  device {dev['index']}: {dev['name']} {dev['gfx']} "
            f"{dev['memory_gib']:.1f} GiB {dev['compute_units']} CUs"
        )
    if not devices:
        out_console.print("  no GPU visible: GPU checks skipped")
    if result.upstream is not None:
        for line in result.upstream.lines():
            out_console.print(f"  {line}", markup=False)
    out_console.print(f"  log: {result.log_file}", markup=False, soft_wrap=True)


@cli.command("bundle")
@click.argument("wheels", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--rocm", "rocm", metavar="DIR", help="ROCm tree to take libraries and data from.")
@click.option(
    "--arch",
    metavar="TARGETS",
    help="gfx targets to keep data for (';' or ',' separated; families ok); default: the "
    "targets of the wheel's own device code.",
)
@click.option("--output-dir", metavar="DIR", help="Where bundled wheels go (default: ./wheels).")
@click.option(
    "--lib-dir", metavar="DIR", help="Library folder inside the wheel (default: the project's)."
)
@click.option(
    "--with",
    "with_wheels",
    multiple=True,
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    metavar="WHEEL",
    help="A fat torch wheel whose libraries a torchvision/torchaudio wheel uses.",
)
@click.option(
    "--platform",
    type=Setting("bundle.platform"),
    default=None,
    help="auto: from the wheel's tag; windows wheels go through delvewheel.",
)
@click.option(
    "--policy", metavar="POLICY", help="manylinux policy to tag with (default: the best that fits)."
)
@click.option(
    "-z",
    "--compression-level",
    type=Setting("bundle.compression_level"),
    default=None,
    help="Deflate level for new members, zlib's scale (unchanged ones are copied as they are).",
)
@click.option(
    "--dry-run",
    is_flag=True,
    default=None,
    help="Print what would be bundled (libraries, data, search paths, tag); write nothing.",
)
@click.option(
    "--allow-outside",
    "allow_outside",
    multiple=True,
    metavar="DIR",
    help="A folder outside the ROCm tree that symlinks in the tree may lead to (repeatable).",
)
@click.option(
    "--mode",
    type=click.Choice(["fat", "thin"]),
    default="fat",
    help="fat: carry the ROCm libraries; thin: depend on ROCm's Python packages (rocm-sdk-core, "
    "rocm-sdk-libraries-FAMILY) at the tree's version instead.",
)
@click.option(
    "--target-family",
    default="all",
    metavar="NAME",
    help="thin: the FAMILY of rocm-sdk-libraries-FAMILY (as rocm wheels --target-family).",
)
@pass_state
def bundle_cmd(
    state: State,
    wheels: tuple[Path, ...],
    rocm: str | None,
    arch: str | None,
    output_dir: str | None,
    lib_dir: str | None,
    with_wheels: tuple[Path, ...],
    platform: str | None,
    policy: str | None,
    compression_level: int | None,
    dry_run: bool | None,
    allow_outside: tuple[str, ...],
    mode: Literal["fat", "thin"],
    target_family: str,
) -> None:
    """Make WHEELs self-contained: ROCm libraries, data for the targets, $ORIGIN search paths."""
    from . import bundle

    ctx = state.resolve(
        {
            "rocm": rocm,
            "arch": arch,
            "output_dir": output_dir,
            "bundle.platform": platform,
            "bundle.policy": policy,
            "bundle.compression_level": compression_level,
            "bundle.dry_run": dry_run,
            "bundle.allow_outside": list(allow_outside) or None,
        }
    )
    dry_run = ctx.settings.bundle.dry_run
    thin = None
    if mode == "thin":
        from . import rocmwheels

        thin = rocmwheels.thin_source(ctx.tree.root, target_family)
    bars = state.progress()
    try:
        results = bundle.bundle_many(
            ctx, wheels, with_wheels=with_wheels, lib_dir=lib_dir, progress=bars,
            dry_run=dry_run, thin=thin,
        )  # fmt: skip
    finally:
        _close(bars)
    if state.json:
        state.emit([r.as_json() for r in results])
        return
    if dry_run:
        for r in results:
            for line in bundle.plan_lines(r):
                out_console.print(line, markup=False, soft_wrap=True)
        return
    from .report import PYPI_LIMIT

    word = {"bundled": "bundled", "up-to-date": "up to date", "unchanged": "unchanged"}
    for r in results:
        size = Path(r.output).stat().st_size
        out_console.print(
            f"{word[r.status]}: {r.output}  ({human_size(size)}, {r.seconds:.1f} s)",
            markup=False,
            soft_wrap=True,
        )
        for line in bundle.system_lines(r.plan or {}):
            out_console.print(line, markup=False, soft_wrap=True)
        for line in bundle.warning_lines(r):
            err_console.print(line, markup=False, soft_wrap=True)
        if size > PYPI_LIMIT:
            err_console.print(
                f"note: {Path(r.output).name} is larger than PyPI's default "
                f"{human_size(PYPI_LIMIT)} per-file limit: ask PyPI for a larger limit, host it "
                "on your own index, or build for fewer targets (inspect shows each target's size)",
                markup=False,
                soft_wrap=True,
            )


@cli.command("inspect")
@click.argument("wheel", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option(
    "--require-arch",
    metavar="TARGETS",
    help="Exit 11 unless every listed gfx target has device code.",
)
@pass_state
def inspect_cmd(state: State, wheel: Path, require_arch: str | None) -> None:
    """Show what a wheel carries: libraries, search paths, gfx targets, sizes, platform tag."""
    from . import report

    ctx = context.resolve(config.from_environment(config_file=state.config_file))
    result = report.inspect_wheel(wheel, ctx, require_arch=require_arch)
    if state.json:
        state.emit(result.data)
    else:
        for line in report.render(result.data):
            out_console.print(line, markup=False, soft_wrap=True)
    result.check()


def _checkout_flags(
    src_dir: Path | None, patches_dir: Path | None, patchset: str | None
) -> dict[str, Any]:
    return {
        "src_dir": str(src_dir) if src_dir else None,
        "patches_dir": str(patches_dir) if patches_dir else None,
        "patchset": patchset,
    }


_src_dir_option = click.option(
    "--src-dir", type=click.Path(path_type=Path, file_okay=False), help="Checkouts (./src)."
)
_patches_dir_option = click.option(
    "--patches-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Saved patch series (./patches).",
)
_patchset_option = click.option("--patchset", help="Patch series name (default: the train).")


@cli.command("checkout")
@click.argument("projects", nargs=-1)
@_src_dir_option
@click.option("--train", help="Release train whose refs to check out (e.g. 2.9).")
@click.option("--ref", "refs", multiple=True, metavar="PROJECT=REF", help="Branch, tag or SHA.")
@click.option("--origin", "origins", multiple=True, metavar="PROJECT=URL", help="Git URL.")
@click.option("--depth", type=Setting("checkout.depth"), help="History depth (0 = full).")
@click.option("--jobs", type=Setting("checkout.jobs"), help="Parallel submodule fetches.")
@_patches_dir_option
@_patchset_option
@click.option("--no-hipify", is_flag=True, default=None, help="Do not run hipify.")
@click.option("--no-patches", is_flag=True, default=None, help="Do not apply patch series.")
@click.option(
    "--manifest",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Reproduce the commits and patches of this source manifest.",
)
@click.option("--force", is_flag=True, default=None, help="Discard local changes and commits.")
@pass_state
def checkout_cmd(
    state: State,
    projects: tuple[str, ...],
    src_dir: Path | None,
    train: str | None,
    refs: tuple[str, ...],
    origins: tuple[str, ...],
    depth: int | None,
    jobs: int | None,
    patches_dir: Path | None,
    patchset: str | None,
    no_hipify: bool | None,
    no_patches: bool | None,
    manifest: Path | None,
    force: bool | None,
) -> None:
    """Fetch, pin, patch and hipify the sources of PROJECTs (default: the train's).

    Re-running on unchanged inputs does nothing. A checkout with uncommitted changes or commits
    that are not from the patch series is never overwritten without --force.
    """
    from . import sources

    flags: dict[str, Any] = {
        **_checkout_flags(src_dir, patches_dir, patchset),
        "train": train,
        "checkout.depth": depth,
        "checkout.jobs": jobs,
        "checkout.hipify": False if no_hipify else None,
        "checkout.patches": False if no_patches else None,
        "checkout.force": True if force else None,
        "checkout.manifest": str(manifest) if manifest else None,
        **parse_pairs("--ref", refs, "ref"),
        **parse_pairs("--origin", origins, "origin"),
    }
    ctx = state.resolve(flags)
    replay = None
    if ctx.settings.checkout.manifest:
        replay_path = Path(ctx.settings.checkout.manifest)
        replay = sources.read_manifest(
            replay_path if replay_path.is_absolute() else ctx.settings.cwd / replay_path
        )
    builtin = {n: str(p.get("origin", "")) for n, p in config.load_defaults()["projects"].items()}
    plan = sources.plan(ctx, projects, manifest=replay, builtin_origins=builtin)
    bars = state.progress()
    try:
        result = sources.execute(plan, bars)
    finally:
        _close(bars)
    if state.json:
        state.emit(result.as_json())
        return
    for p in result.projects:
        if p.action == "up to date":
            line = f"[bold]{p.name}[/]: up to date at {p.ref} ({p.commit[:12]})"
        else:
            line = f"[bold]{p.name}[/]: {p.action} {p.ref} -> {p.commit[:12]}"
            if p.submodules:
                line += f", {p.submodules} submodule(s)"
        applied = ", ".join(f"{n} {k}" for k, n in sorted(p.patches.items()))
        if applied:
            line += f"; patches: {applied}"
        if p.hipify and p.action != "up to date":
            line += "; hipified"
        out_console.print(line, markup=True, highlight=False, soft_wrap=True)
        if p.uncommitted:
            out_console.print(
                f"  note: {len(p.uncommitted)} uncommitted change(s) kept "
                f"({', '.join(p.uncommitted[:3])})",
                markup=False,
                soft_wrap=True,
            )
    if result.up_to_date:
        out_console.print("sources are up to date", markup=False)
    out_console.print(f"manifest: {result.manifest}", markup=False, soft_wrap=True)


@cli.command("save-patches")
@click.argument("projects", nargs=-1)
@_src_dir_option
@_patches_dir_option
@click.option(
    "--patchset", help="Patch series name (default: the one the checkout used, else the train)."
)
@pass_state
def save_patches_cmd(
    state: State,
    projects: tuple[str, ...],
    src_dir: Path | None,
    patches_dir: Path | None,
    patchset: str | None,
) -> None:
    """Save the commits on top of each checkout as its base/hipified patch series."""
    from . import sources

    ctx = state.resolve(_checkout_flags(src_dir, patches_dir, patchset))
    saved = sources.save_patches(ctx, projects)
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


# --- build, doctor, rocm fetch (rocm_build/build.py, dist.py, arch.py) -------------------------


def _close(bars: Progress) -> None:
    """Stop the live display of a RichProgress (after an error, tasks may be left open)."""
    if isinstance(bars, RichProgress):
        bars.close()


def _render_download(url: str) -> tuple[Callable[[int, int | None], None], Callable[[], None]]:
    """A rich progress bar for a download; (callback, close)."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TransferSpeedColumn,
    )

    bar = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err_console,
        transient=True,
    )
    task = bar.add_task(f"downloading {url.rsplit('/', 1)[-1]}", total=None)
    started = False

    def update(done: int, total: int | None) -> None:
        nonlocal started
        if not started:
            bar.start()
            started = True
        bar.update(task, completed=done, total=total)

    def close() -> None:
        if started:
            bar.stop()

    return update, close


def _show_plan(plan: Any) -> None:
    out_console.print(
        f"ROCm {plan.tree.version or '(unknown version)'} at {plan.tree.root}; targets "
        f"{';'.join(plan.targets)}; compiler cache: {plan.cache}",
        markup=False,
    )
    if plan.venv is not None:
        out_console.print(f"build environment: {plan.venv}", markup=False)
    for step in plan.steps:
        out_console.print(f"\n[bold]{step.name}[/]", markup=True)
        reqs = [*step.requires, *(f"-r {p}" for p in step.requirement_files)]
        lines = [
            f"  folder:  {step.source}",
            f"  command: {shlex.join(step.command)}",
            f"  jobs:    {step.jobs}",
            f"  version: {step.version or '(set by the project)'}",
            f"  log:     {step.log}",
            f"  build requirements: {', '.join(reqs) or 'none'}",
            "  environment:",
            *(f"    {key}={value}" for key, value in mask_values(step.changed).items()),
        ]
        if step.removed:
            lines.append(f"  removed from the environment: {' '.join(step.removed)}")
        for text in lines:
            out_console.print(text, markup=False, soft_wrap=True)


@cli.command("build")
@click.argument("projects", nargs=-1)
@click.option("--rocm", metavar="DIR|URL", help="ROCm tree, or URL of a tarball of one.")
@click.option("--arch", metavar="TARGETS", help="gfx targets or families: 'gfx90a;gfx1100'.")
@click.option(
    "--train", metavar="NAME", help="Release train whose projects to build (when none are named)."
)
@click.option("--src-dir", type=click.Path(path_type=Path), help="Checkouts, one per project.")
@click.option("--output-dir", type=click.Path(path_type=Path), help="Wheels go here (./wheels).")
@click.option("--work-dir", type=click.Path(path_type=Path), help="Logs and the build venv.")
@click.option("-j", "--jobs", type=Setting("jobs"), help="Parallel compile jobs (0: auto).")
@click.option(
    "--cache", type=Setting("build.cache"), help="Compiler cache (auto: ccache when installed)."
)
@click.option("--cache-url", metavar="URL", help="Remote storage for the compiler cache.")
@click.option("--version-suffix", metavar="+LABEL", help="Local version label (+rocm<ver>).")
@click.option("--venv", metavar="create|current|DIR", help="Build environment to use.")
@click.option("--index-url", metavar="URL", help="Index for build requirements.")
@click.option(
    "--find-links",
    multiple=True,
    metavar="DIR",
    help="Folder of wheels for build requirements (repeatable).",
)
@click.option("--no-index", is_flag=True, default=None, help="Only --find-links folders.")
@click.option(
    "--dry-run",
    is_flag=True,
    default=None,
    help="Show per project the environment, command and folder; build nothing.",
)
@click.option(
    "--force", is_flag=True, default=None, help="Rebuild even when nothing changed since the last."
)
@pass_state
def build_cmd(
    state: State,
    projects: tuple[str, ...],
    rocm: str | None,
    arch: str | None,
    train: str | None,
    src_dir: Path | None,
    output_dir: Path | None,
    work_dir: Path | None,
    jobs: int | None,
    cache: str | None,
    cache_url: str | None,
    version_suffix: str | None,
    venv: str | None,
    index_url: str | None,
    find_links: tuple[str, ...],
    no_index: bool | None,
    dry_run: bool | None,
    force: bool | None,
) -> None:
    """Build wheels of PROJECTS (default: the release train's) against a ROCm tree.

    \b
    rocm-build build --rocm /opt/rocm --arch gfx1100
    rocm-build build torch torchvision --arch 'gfx90a;gfx942' --jobs 8 --dry-run
    """

    from . import build as build_mod
    from . import cache as cache_mod

    ctx = state.resolve(
        {
            "rocm": rocm,
            "arch": arch,
            "train": train,
            "src_dir": src_dir,
            "output_dir": output_dir,
            "work_dir": work_dir,
            "jobs": jobs,
            "build.cache": cache,
            "build.cache_url": cache_url,
            "build.version_suffix": version_suffix,
            "build.venv": venv,
            "build.index_url": index_url,
            "build.find_links": list(find_links) or None,
            "build.no_index": no_index,
            "build.dry_run": dry_run,
            "build.force": force,
        }
    )
    cfg = ctx.settings
    specs = cfg.selected_projects(projects)
    targets, origin = ctx.build_targets
    if not state.json and not state.quiet:
        err_console.print(f"targets: {';'.join(targets)} ({origin})", markup=False)
    tree = ctx.tree
    plan, compiler_cache = build_mod.plan_from_config(ctx, specs)
    if cfg.build.dry_run:
        if state.json:
            state.emit(plan.as_json())
        else:
            _show_plan(plan)
        return
    cache_mod.zero_stats(compiler_cache, cfg.env)
    bars = state.progress()
    try:
        result = build_mod.execute(plan, bars)
    finally:
        _close(bars)
    stats = cache_mod.cache_stats(compiler_cache, cfg.env)
    if state.json:
        state.emit(
            {
                "projects": [
                    {
                        "name": p.name,
                        **p.as_json(tree.version),
                        "wheel": str(p.wheel),
                        "reused": p.reused,
                    }
                    for p in result.projects
                ],
                "report": str(result.report),
                "cache": {"kind": compiler_cache.kind, **stats},
            }
        )
        return
    for p in result.projects:
        retry = f", retried with {p.retried_with} jobs" if p.retried_with else ""
        took = "unchanged, not rebuilt" if p.reused else f"{p.seconds:.0f}s{retry}"
        out_console.print(
            f"{p.name} {p.version}: {p.wheel} ({';'.join(p.targets)}, {took})",
            markup=False,
            soft_wrap=True,
        )
    out_console.print(f"build report: {result.report}", markup=False, soft_wrap=True)
    if compiler_cache.enabled:
        hits, misses = stats.get("hits", 0), stats.get("misses", 0)
        rate = f" ({100 * hits / (hits + misses):.0f}% hits)" if hits + misses else ""
        out_console.print(
            f"{compiler_cache.kind}: {hits} hits, {misses} misses{rate}", markup=False
        )


@cli.command("doctor")
@click.option("--rocm", metavar="DIR|URL", help="ROCm tree to check.")
@click.option("--arch", metavar="TARGETS", help="gfx targets a build would use.")
@click.argument("projects", nargs=-1)
@pass_state
def doctor_cmd(state: State, rocm: str | None, arch: str | None, projects: tuple[str, ...]) -> None:
    """Check that this machine can build: tools, the ROCm tree, GPUs, memory, disk.

    Exits non-zero (with the first blocking problem's exit code) when something blocks a build.
    """
    from . import doctor

    ctx = state.resolve({"rocm": rocm, "arch": arch})
    cfg = ctx.settings
    specs = cfg.selected_projects(projects)
    report = doctor.check(ctx, specs)
    if state.json:
        state.emit(report.as_json())
    else:
        _show_doctor(report.rows)
    error = report.error()
    if error is not None:
        raise error


def _show_doctor(rows: Iterable[Any]) -> None:
    marks = {True: "[green]ok[/]", False: "[red]!![/]", None: "[yellow]--[/]"}
    for row in rows:
        out_console.print(f"{marks[row.good]} {row.label:<18} ", markup=True, end="")
        out_console.print(row.value, markup=False)


@rocm_group.command("fetch")
@click.argument("url")
@click.option("--sha256", metavar="HEX", default="", help="Expected sha256 of the tarball.")
@pass_state
def rocm_fetch(state: State, url: str, sha256: str) -> None:
    """Download a tarball of a ROCm tree (resuming), check it and unpack it into the cache.

    Prints the tree's folder, for --rocm. The URL may end in #sha256=HEX.
    """
    from . import dist
    from .errors import ConfigError

    ctx = state.resolve()
    if not dist.is_url(url):
        msg = (
            f"'{url}' is not a URL (http://, https:// or file://); "
            "a tree that is already unpacked needs no fetch: pass its folder to --rocm"
        )
        raise ConfigError(msg)
    tree = ctx.fetch(url, sha256)
    if state.json:
        state.emit({"rocm": str(tree)})
    else:
        out_console.print(str(tree), markup=False)


@cli.command("all")
@click.argument("projects", nargs=-1)
@click.option("--rocm", metavar="DIR|URL", help="ROCm tree, or URL of a tarball of one.")
@click.option("--arch", metavar="TARGETS", help="gfx targets or families: 'gfx90a;gfx1100'.")
@click.option("--train", help="Release train whose refs to check out (e.g. 2.9).")
@click.option("--ref", "refs", multiple=True, metavar="PROJECT=REF", help="Branch, tag or SHA.")
@click.option("--origin", "origins", multiple=True, metavar="PROJECT=URL", help="Git URL.")
@click.option("--patchset", help="Patch series name (default: the train).")
@click.option(
    "--patches-dir", type=click.Path(path_type=Path, file_okay=False), help="Patch series."
)
@click.option(
    "--src-dir", type=click.Path(path_type=Path, file_okay=False), help="Checkouts (./src)."
)
@click.option(
    "--output-dir", type=click.Path(path_type=Path, file_okay=False), help="Wheels (./wheels)."
)
@click.option(
    "--work-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Logs, venvs, stamps, run report (./.rocm-build).",
)
@click.option("-j", "--jobs", type=Setting("jobs"), help="Parallel compile jobs (0: auto).")
@click.option("--cache", type=Setting("build.cache"), help="Compiler cache.")
@click.option(
    "--find-links",
    multiple=True,
    metavar="DIR",
    help="Local folder of wheels for build requirements and the smoke environment.",
)
@click.option("--offline", is_flag=True, default=None, help="Never use a package index.")
@click.option("--python", "python", help="Interpreter for the smoke environment.")
@click.option("--junit", type=click.Path(path_type=Path, dir_okay=False), help="Smoke JUnit XML.")
@click.option("--redo", is_flag=True, help="Run every stage even when its stamp is current.")
@click.option("--no-smoke", is_flag=True, help="Stop after bundle.")
@pass_state
def all_cmd(
    state: State,
    projects: tuple[str, ...],
    rocm: str | None,
    arch: str | None,
    train: str | None,
    refs: tuple[str, ...],
    origins: tuple[str, ...],
    patchset: str | None,
    patches_dir: Path | None,
    src_dir: Path | None,
    output_dir: Path | None,
    work_dir: Path | None,
    jobs: int | None,
    cache: str | None,
    find_links: tuple[str, ...],
    offline: bool | None,
    python: str | None,
    junit: Path | None,
    redo: bool,
    no_smoke: bool,
) -> None:
    """checkout, build, bundle and smoke PROJECTS with one configuration.

    Stages whose outputs are up to date for their inputs are skipped (stamps in the work
    folder), so after a failure or an interruption the same command resumes. Writes
    run-report.json and run-report.md in the work folder.

    \b
    rocm-build all --rocm /opt/rocm --arch gfx1100
    rocm-build all torch torchvision --train 2.9 --arch 'gfx90a;gfx942' --jobs 16
    """
    from . import pipeline

    links = [str(p) for p in find_links] or None
    flags: dict[str, Any] = {
        "rocm": rocm,
        "arch": arch,
        "train": train,
        "patchset": patchset,
        "patches_dir": str(patches_dir) if patches_dir else None,
        "src_dir": str(src_dir) if src_dir else None,
        "output_dir": str(output_dir) if output_dir else None,
        "work_dir": str(work_dir) if work_dir else None,
        "jobs": jobs,
        "build.cache": cache,
        "build.find_links": links,
        "build.no_index": offline,
        "smoke.find_links": links,
        "smoke.offline": offline,
        "smoke.python": python,
        **parse_pairs("--ref", refs, "ref"),
        **parse_pairs("--origin", origins, "origin"),
    }
    ctx = state.resolve(flags)
    show = not (state.quiet or state.json)
    bars = state.progress()

    def on_stage(stage: str, event: str, text: str) -> None:
        if not show:
            return
        step = f"[{pipeline.STAGES.index(stage) + 1}/{len(pipeline.STAGES)}] {stage}"
        if event == "start":
            bars.start(f"{step} ...", None)
            return
        bars.done(f"{step} ...")
        if event == "skip":
            err_console.print(f"[bold]{step}[/]: skipped, {text}", markup=True, soft_wrap=True)
        else:
            err_console.print(f"[bold]{step}[/]: done in {text}", markup=True)

    try:
        report = pipeline.run_all(
            ctx,
            projects,
            junit=junit,
            redo=redo,
            skip_smoke=no_smoke,
            on_stage=on_stage,
            progress=bars,
        )
    except RocmBuildError:
        # --json still gets the run report (ok: false, failed_stage) on stdout.
        written = ctx.work_dir / "run-report.json"
        if state.json and written.is_file():
            state.emit(json.loads(written.read_text(encoding="utf-8")))
        raise
    finally:
        _close(bars)
    if state.json:
        state.emit(
            {**report.data, "report": str(report.json_path), "markdown": str(report.markdown)}
        )
        return
    if state.quiet:
        return
    for stage in report.data["stages"]:
        out_console.print(
            f"{stage['stage']:>8}: {stage['status']} ({stage['seconds']} s)", markup=False
        )
    for wheel in report.data["wheels"]["bundled"]:
        out_console.print(f"fat wheel: {wheel['path']}", markup=False, soft_wrap=True)
    out_console.print(f"run report: {report.markdown} (JSON: {report.json_path})", soft_wrap=True)


def main(argv: list[str] | None = None) -> None:
    from . import proc

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
