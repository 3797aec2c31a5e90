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
from . import matrix as matrix_mod
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

    cfg = state.resolve(
        {
            "matrix.pythons": as_list(pythons),
            "matrix.trains": as_list(trains),
            "matrix.arch_groups": as_list(arch_groups),
            "matrix.rocm": rocm,
            "matrix.gpu_labels": as_list(gpu_labels),
        }
    )
    jobs = matrix_mod.plan_matrix(cfg)
    if fmt == "github":
        click.echo(matrix_mod.as_github_output(jobs))
    else:
        state.emit(matrix_mod.as_json(jobs))


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


def _rocm_dir(cfg: config.Config) -> Path:
    value = str(cfg["rocm"]) or "/opt/rocm"
    return (cfg.cwd / value).resolve()


@cli.command("bundle")
@click.argument("wheels", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True))
@click.option("--rocm", "rocm", help="ROCm tree to take libraries and data from.")
@click.option("--arch", help="gfx targets to keep data for (';' or ',' separated; families ok).")
@click.option("--output-dir", help="Where bundled wheels go (default: output_dir setting).")
@click.option("--lib-dir", help="Library folder inside the wheel (default: the project's).")
@click.option(
    "--with",
    "with_wheels",
    multiple=True,
    type=click.Path(path_type=Path, exists=True, dir_okay=False),
    help="A fat torch wheel whose libraries a torchvision/torchaudio wheel uses.",
)
@click.option("--platform", type=click.Choice(["auto", "linux", "windows"]), default=None)
@click.option("--policy", help="manylinux policy to tag with (default: the best that fits).")
@click.option("-z", "--compression-level", type=click.IntRange(0, 9), default=None)
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
) -> None:
    """Make WHEELs self-contained: ROCm libraries, data for the targets, $ORIGIN search paths."""
    from . import bundle

    cfg = state.resolve(
        {
            "rocm": rocm,
            "arch": arch,
            "output_dir": output_dir,
            "bundle.platform": platform,
            "bundle.policy": policy,
            "bundle.compression_level": compression_level,
        }
    )
    results = bundle.bundle_many(cfg, wheels, with_wheels=with_wheels, lib_dir=lib_dir)
    if state.json:
        state.emit([r.as_json() for r in results])
        return
    for r in results:
        word = {"bundled": "bundled", "up-to-date": "up to date", "unchanged": "unchanged"}
        out_console.print(f"{word[r.status]}: {r.output}  ({r.seconds:.1f} s)")


@cli.command("inspect")
@click.argument("wheel", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--require-arch", help="Exit 11 unless every listed gfx target has device code.")
@pass_state
def inspect_cmd(state: State, wheel: Path, require_arch: str | None) -> None:
    """Show what a wheel carries: libraries, search paths, gfx targets, sizes, platform tag."""
    from . import report

    cfg = config.from_environment(config_file=state.config_file)
    result = report.inspect_wheel(wheel, cfg, require_arch=require_arch)
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
@click.option("--depth", type=click.IntRange(min=0), help="History depth (0 = full).")
@click.option("--jobs", type=click.IntRange(min=1), help="Parallel submodule fetches.")
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
    cfg = state.resolve(flags)
    replay = None
    if cfg["checkout.manifest"]:
        replay_path = Path(str(cfg["checkout.manifest"]))
        replay = sources.read_manifest(
            replay_path if replay_path.is_absolute() else cfg.cwd / replay_path
        )
    builtin = {n: str(p.get("origin", "")) for n, p in config.load_defaults()["projects"].items()}
    plan = sources.plan(cfg, projects, manifest=replay, builtin_origins=builtin)
    result = sources.execute(plan)
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
@_patchset_option
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

    cfg = state.resolve(_checkout_flags(src_dir, patches_dir, patchset))
    saved = sources.save_patches(cfg, projects)
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
