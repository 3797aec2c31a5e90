"""Command line: parse flags, resolve the Config, call a stage, map errors to exit codes.

Only this module prints. Stages log through ``logging`` and return results; this module turns
them into human output (rich) or JSON (``--json``).
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.logging import RichHandler

from . import __version__, config
from .errors import EXIT_CODES, RocmBuildError

__all__ = ["main"]

F = TypeVar("F", bound=Callable[..., Any])

EXIT_CODE_HELP = "\b\nExit codes:\n" + "\n".join(
    f"  {code:>3}  {text}" for code, text in sorted(EXIT_CODES.items())
)

err_console = Console(stderr=True, highlight=False)
out_console = Console(highlight=False)


@dataclass
class State:
    config_file: Path | None = None
    verbose: int = 0
    quiet: bool = False
    json: bool = False
    debug_traceback: bool = False

    def resolve(self, flags: Mapping[str, Any] | None = None) -> config.Config:
        """Resolve the Config for this run and show it (stderr, so --json stays clean)."""
        cfg = config.from_environment(flags=flags, config_file=self.config_file)
        if not self.quiet and not self.json:
            show_settings(cfg, only_changed=self.verbose == 0)
        return cfg

    def emit(self, data: Any) -> None:
        """Machine output for --json."""
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))


pass_state = click.make_pass_decorator(State, ensure=True)


def show_settings(cfg: config.Config, *, only_changed: bool) -> None:
    rows = [r for r in cfg.describe() if not only_changed or r[2] != "default"]
    source = f" from {cfg.config_file}" if cfg.config_file else ""
    err_console.print(f"[bold]rocm-build {__version__}[/]: settings{source}", markup=True)
    for key, value, origin in rows:
        err_console.print(f"  {key} = {value!r}  [dim]({origin})[/]", markup=True)


def _setup_logging(verbose: int, quiet: bool) -> None:
    level = logging.WARNING if quiet else logging.DEBUG if verbose > 0 else logging.INFO
    handler = RichHandler(
        console=err_console, show_time=False, show_path=False, markup=False, show_level=False
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger("rocm_build")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def fail(err: RocmBuildError, *, debug_traceback: bool = False) -> NoReturn:
    if debug_traceback:
        traceback.print_exception(err)
    err_console.print(f"[bold red]rocm-build: error:[/] {err}", markup=True, soft_wrap=True)
    tail = getattr(err, "tail", ())
    if tail:
        err_console.print("[dim]last lines of the output:[/]", markup=True)
        for line in tail[-20:]:
            err_console.print(f"  {line}", markup=False, soft_wrap=True)
    sys.exit(err.exit_code)


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


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RocmBuildError as err:
            state = ctx.find_object(State)
            fail(err, debug_traceback=bool(state and state.debug_traceback))


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
@click.pass_context
def cli(
    ctx: click.Context,
    config_file: Path | None,
    verbose: int,
    quiet: bool,
    as_json: bool,
    debug_traceback: bool,
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
    )
    _setup_logging(verbose, quiet or as_json)


@cli.command("config")
@pass_state
def config_cmd(state: State) -> None:
    """Show every resolved setting and where it came from."""
    cfg = config.from_environment(config_file=state.config_file)
    if state.json:
        state.emit(cfg.as_json())
        return
    show_settings(cfg, only_changed=False)
    out_console.print("projects:")
    for name, spec in cfg.projects.items():
        ref = cfg.trains.get(str(cfg["train"]), {}).get(name, "")
        out_console.print(f"  {name}: {spec.origin} {spec.ref or ref or '(no ref in train)'}")


@cli.group("rocm")
def rocm_group() -> None:
    """Get a ROCm tree to build against."""


@rocm_group.command("debian")
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@click.option(
    "--cache",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where the downloaded .debs are kept (default: ~/.cache/rocm-build/debian).",
)
@pass_state
def rocm_debian(state: State, dest: Path, cache: Path | None) -> None:
    """Assemble a real ROCm 5.2.3 tree (TheRock layout) in DEST from Debian's packages.

    The packages are downloaded with apt-get and unpacked, never installed. Enough to compile
    HIP code for gfx803-gfx90a and gfx1010-gfx1036 and to try every rocm-build stage without a
    ROCm install or a GPU.
    """
    from . import debtree

    tree = debtree.assemble(dest, cache=cache)
    if state.json:
        state.emit({"rocm": str(tree), "version": debtree.ROCM_VERSION})
    else:
        out_console.print(f"ROCm {debtree.ROCM_VERSION} tree: {tree}")


@cli.command("smoke")
@click.argument("wheels", nargs=-1, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--python", "python", help="Interpreter for the fresh environment (default: this one)."
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
@click.option("--arch", help="The gfx targets the wheels were built for (';' or ',').")
@click.option(
    "--rocm",
    type=click.Path(path_type=Path),
    help="The ROCm tree used to build: nothing may load from it.",
)
@click.option(
    "--src-dir",
    type=click.Path(path_type=Path, file_okay=False),
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

    cfg = state.resolve(
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
    plan = smoke.plan(cfg, wheels, junit=junit)
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


def main(argv: list[str] | None = None) -> None:
    try:
        cli.main(args=argv, prog_name="rocm-build", standalone_mode=True)
    except RocmBuildError as err:  # raised outside a command (e.g. during parsing)
        fail(err)
    except SystemExit:
        raise
    except Exception:
        traceback.print_exc()
        err_console.print(f"rocm-build: internal error; exit code 70 ({EXIT_CODES[70]})")
        sys.exit(70)
