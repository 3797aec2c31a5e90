"""``rocm-build checkout``: fetch, pin, patch and hipify sources (stage: ``sources``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from rocm_build import config
from rocm_build.cli import given
from rocm_build.cli import options as o
from rocm_build.cli.render import State, close_bars, err_console, out_console, pass_state

if TYPE_CHECKING:
    from rocm_build.sources import Result


@o.command("checkout")
@click.argument("projects", nargs=-1)
@o.src_dir_option
@o.train_option("Release train whose refs to check out (e.g. 2.9).")
@o.ref_option
@o.origin_option
@o.setting_option("--depth", key="checkout.depth", help="History depth (0 = full).")
@o.setting_option("--fetch-jobs", key="checkout.jobs", help="Parallel submodule fetches.")
@click.option(
    "--jobs",
    "old_jobs",
    type=o.Setting("checkout.jobs"),
    hidden=True,
    help="Old spelling of --fetch-jobs (kept for one release).",
)
@o.patches_dir_option
@o.patchset_option()
@o.setting_option(
    "--no-hipify",
    key="checkout.hipify",
    convert=lambda _: False,
    is_flag=True,
    default=None,
    help="Do not run hipify.",
)
@o.setting_option(
    "--no-patches",
    key="checkout.patches",
    convert=lambda _: False,
    is_flag=True,
    default=None,
    help="Do not apply patch series.",
)
@o.setting_option(
    "--release",
    key="triton.release",
    is_flag=True,
    default=None,
    help="Triton: check out release/X.Y.x of torch's Triton version, not torch's CI pin.",
)
@o.setting_option(
    "--manifest",
    key="checkout.manifest",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Reproduce the commits and patches of this source manifest.",
)
@o.force_option("Discard local changes and commits.", key="checkout.force")
@pass_state
def command(
    state: State,
    projects: tuple[str, ...],
    old_jobs: int | None,
) -> None:
    """Fetch, pin, patch and hipify the sources of PROJECTs (default: the train's).

    Re-running on unchanged inputs does nothing. A checkout with uncommitted changes or commits
    that are not from the patch series is never overwritten without --force.
    """
    from rocm_build import sources as sources_stage
    from rocm_build.repo.manifest import read_manifest

    if old_jobs is not None:
        err_console.print(
            "warning: checkout --jobs is the old spelling of --fetch-jobs (parallel submodule "
            "fetches; build's -j/--jobs is compile jobs): use --fetch-jobs",
            markup=False,
            soft_wrap=True,
        )
    fetch_jobs = given.value("checkout.jobs")  # --fetch-jobs, when given, wins over --jobs
    ctx = state.resolve({"checkout.jobs": fetch_jobs if fetch_jobs is not None else old_jobs})
    replay = None
    if ctx.settings.checkout.manifest:
        replay_path = Path(ctx.settings.checkout.manifest)
        replay = read_manifest(
            replay_path if replay_path.is_absolute() else ctx.settings.cwd / replay_path,
            replay=True,
        )
    builtin = {n: str(p.get("origin", "")) for n, p in config.load_defaults()["projects"].items()}
    plan = sources_stage.plan(ctx, projects, manifest=replay, builtin_origins=builtin)
    bars = state.progress()
    try:
        result = sources_stage.execute(plan, bars)
    finally:
        close_bars(bars)
    if state.json:
        state.emit(result.as_json())
        return
    show(result)


def show(result: Result) -> None:
    """Human summary of a checkout (a ``sources`` result)."""
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
