"""``rocm-build rocm``: get a ROCm tree to build against (debian, fetch, sysroot, run)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, err_console, out_console, pass_state
from rocm_build.common.sizes import human_size


@click.group("rocm", cls=o.OrderedGroup)
def command() -> None:
    """Get a ROCm tree to build against."""


@command.command("debian")
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
@o.mirror_option()
@o.global_options(on_group=False)
@pass_state
def debian(state: State, dest: Path, cache: Path | None, release: str, mirror: str) -> None:
    """Assemble a real ROCm tree (TheRock layout) in DEST from Debian's packages.

    The packages are downloaded with apt-get (from a private index of the release, so the
    system's apt setup is untouched) and unpacked, never installed; downloads are cached by
    version. bookworm gives ROCm 5.2.3 with clang 15 (gfx803-gfx90a, gfx1010-gfx1036); sid
    gives ROCm 6.4 with clang 21 and the math libraries, whose programs need a sid root to run
    (rocm-build rocm sysroot).
    """
    from rocm_build.rocm import debtree, dist

    if state.quiet:
        tree = debtree.assemble(dest, cache=cache, release=release, mirror=mirror)
    else:
        show, close = package_progress()
        try:
            tree = debtree.assemble(dest, cache=cache, release=release, mirror=mirror, show=show)
        finally:
            close()
    version = dist.open_tree(tree).version
    if state.json:
        state.emit({"rocm": str(tree), "version": version})
    else:
        out_console.print(f"ROCm {version} tree: {tree}", markup=False)


@command.command("wheels")
@click.argument("tree", type=click.Path(path_type=Path, file_okay=False, exists=True))
@o.output_dir(required=True)
@o.target_family_option("The libraries package is rocm-sdk-libraries-NAME.")
@o.arch_option(
    "The libraries package keeps these targets' data and device code; default: all of the tree's.",
    key=None,
)
@click.option(
    "-z", "--compression-level", type=click.IntRange(0, 9), default=6, help="Deflate level."
)
@click.option(
    "--allow-outside",
    "allow_outside",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="DIR",
    help="A folder outside the tree that symlinks in the tree may lead to (repeatable), "
    "as for bundle.",
)
@o.global_options(on_group=False)
@pass_state
def wheels(
    state: State,
    tree: Path,
    output_dir: Path,
    target_family: str,
    arch: str | None,
    compression_level: int,
    allow_outside: tuple[Path, ...],
) -> None:
    """Package TREE as ROCm's Python packages: rocm-sdk-core, rocm-sdk-libraries-FAMILY, rocm.

    Same distribution names and site-packages folders (_rocm_sdk_core/, ...) as ROCm's own, at
    the tree's version: what thin wheels (bundle --mode thin) depend on. A kpack-split tree
    gives rocm-sdk-libraries and one rocm-sdk-device-TARGET per target instead (no FAMILY).
    """
    from rocm_build import bundle
    from rocm_build.common.arch import Targets

    targets: tuple[str, ...] = ()
    if arch:
        cfg = state.context().settings
        known, families = cfg.known_targets, cfg.target_families
        targets = Targets.parse(arch, known=known, families=families).bases
    plan = bundle.rocm_wheels_plan(
        tree,
        output_dir,
        family=target_family,
        level=compression_level,
        targets=targets,
        allow_outside=allow_outside,
    )
    made = bundle.rocm_wheels(plan)
    if state.json:
        state.emit([str(p) for p in made])
    else:
        for path in made:
            out_console.print(
                f"{path}  ({human_size(path.stat().st_size)})", markup=False, soft_wrap=True
            )


@command.command("fetch")
@click.argument("url")
@click.option("--sha256", metavar="HEX", default="", help="Expected sha256 of the tarball.")
@o.global_options(on_group=False)
@pass_state
def fetch(state: State, url: str, sha256: str) -> None:
    """Download a tarball of a ROCm tree (resuming), check it and unpack it into the cache.

    Prints the tree's folder, for --rocm. The URL may end in #sha256=HEX.
    """
    from rocm_build.common.errors import ConfigError
    from rocm_build.rocm import dist

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


@command.command("sysroot")
@click.argument("dest", type=click.Path(path_type=Path, file_okay=False))
@click.option("--release", default="sid", metavar="NAME", help="Debian release of the root.")
@o.mirror_option()
@o.global_options(on_group=False)
@pass_state
def sysroot(state: State, dest: Path, release: str, mirror: str) -> None:
    """Make a Debian root (default: sid) in DEST to build and test against a newer ROCm.

    Made once with mmdebstrap (as root): python3 and venv, compilers, cmake, ninja and git, plus
    this machine's CA bundle and pip settings. Run commands in it with rocm-build rocm run.
    """
    from rocm_build.rocm import sysroot as sysroot_mod

    root, made = sysroot_mod.make_root(dest, release=release, mirror=mirror)
    if state.json:
        state.emit({"root": str(root), "made": made})
    else:
        out_console.print(f"{'made' if made else 'ready'}: {root}", markup=False)


# No global flags after the command name here: everything after ROOT belongs to CMD.
@command.command("run", context_settings={"ignore_unknown_options": True})
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
def run(state: State, root: Path, cmd: tuple[str, ...], binds: tuple[Path, ...]) -> None:
    """Run CMD inside ROOT (a root made by rocm sysroot) as root; exits with CMD's exit code.

    /proc, /dev, /sys, the current folder, the --bind folders and the configured ROCm tree
    appear at their own paths inside, e.g.
    rocm-build rocm run ROOT -- hipcc --offload-arch=gfx1100 k.hip -o k
    """
    from rocm_build.rocm import sysroot as sysroot_mod

    cfg = state.resolve().settings
    folders = list(binds)
    setting = cfg.general.rocm
    if setting and Path(setting).is_dir():
        folders.append(Path(setting))
    code = sysroot_mod.run(root, cmd, binds=folders, env=cfg.env)
    sys.exit(code)


def package_progress() -> tuple[Callable[[str, int, int, int, int], None], Callable[[], None]]:
    """How far a download of packages is, on stderr: a bar with the count, the bytes and the
    speed on a terminal; else one plain line each time a package is complete. (show, close)"""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    if not err_console.is_terminal:
        shown: list[int] = []

        def line(what: str, done: int, count: int, got: int, total: int) -> None:
            if done and (not shown or shown[-1] != done):
                shown.append(done)
                err_console.print(
                    f"downloaded {done}/{count} {what} ({human_size(got)} of {human_size(total)})",
                    markup=False,
                    soft_wrap=True,
                )

        return line, lambda: None
    bar = Progress(
        TextColumn("{task.description}", markup=False),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err_console,
        transient=True,
    )
    task = bar.add_task("", total=None)
    started: list[bool] = []

    def update(what: str, done: int, count: int, got: int, total: int) -> None:
        if not started:
            bar.start()
            started.append(True)
        bar.update(task, description=f"{what} {done}/{count}", completed=got, total=total or None)

    def close() -> None:
        if started:
            bar.stop()

    return update, close
