"""``rocm-build fetch``: download beforehand what torch's and Triton's builds would download
mid-build (aotriton, Triton's LLVM), into the download cache, for ``build`` to use offline.

A command of its own rather than ``build --fetch-only``: it has its own plan and execute
(``building.prefetch``), needs no build environment, and is what a machine with the network
runs before a build machine without it (``rocm fetch`` is the same for a ROCm tree).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from rocm_build.cli import options as o
from rocm_build.cli.render import State, err_console, out_console, pass_state
from rocm_build.common.masking import mask_url

if TYPE_CHECKING:
    from rocm_build.building.prefetch import FetchPlan


@o.command("fetch")
@click.option(
    "--what",
    default="aotriton,llvm",
    metavar="LIST",
    help="What to fetch, comma-separated: aotriton (torch's flash attention runtime and the "
    "targets' images), llvm (Triton's pinned LLVM and the JSON/pybind11 packages its setup.py "
    "downloads). Default: both.",
)
@o.rocm_option()
@o.arch_option("Default: the arch setting, else the GPUs of this machine.")
@o.src_dir_option
@o.work_dir_option
@o.dry_run_option("Show what would be downloaded and from where; download nothing.")
@pass_state
def command(
    state: State,
    what: str,
    dry_run: bool | None,
) -> None:
    """Download aotriton and Triton's LLVM as the checkouts pin them, checked by sha256.

    \b
    rocm-build fetch --rocm /opt/rocm --arch 'gfx942;gfx1100'
    rocm-build fetch --what llvm
    """
    from rocm_build.building import prefetch

    wanted = tuple(w.strip() for w in what.split(",") if w.strip())
    aot = "aotriton" in wanted
    ctx = state.resolve(tree=aot, targets=aot, dry_run=bool(dry_run))
    cfg = ctx.settings
    plan = prefetch.plan(
        wanted,
        torch_source=ctx.src_dir / "torch",
        triton_source=ctx.src_dir / "triton",
        tree=ctx.tree if aot else None,
        targets=ctx.targets.names if aot else (),
        env=cfg.env,
        work_dir=ctx.work_dir,
        llvm_url=cfg.triton.llvm_url,
    )
    if dry_run:
        if state.json:
            state.emit(plan.as_json())
        else:
            _show_plan(plan)
        return
    result = prefetch.execute(plan, ctx.download_progress)
    if state.json:
        state.emit({**plan.as_json(), "result": result.as_json()})
        return
    for note in plan.notes:
        err_console.print(f"note: {note}", markup=False, soft_wrap=True)
    if result.aotriton_prefix is not None:
        out_console.print(f"aotriton: {result.aotriton_prefix}", markup=False, soft_wrap=True)
    if result.llvm_dir is not None:
        out_console.print(f"llvm: {result.llvm_dir}", markup=False, soft_wrap=True)
    for syspath, folder in result.package_dirs:
        out_console.print(f"{syspath}: {folder}", markup=False, soft_wrap=True)
    if result.nothing_to_do:
        out_console.print("nothing to do: all of it is in the cache", markup=False)


def _show_plan(plan: FetchPlan) -> None:
    aot, llvm = plan.aotriton, plan.llvm
    if aot is not None:
        state = "in the cache" if aot.present else "to fetch"
        out_console.print(f"aotriton {aot.version} -> {aot.prefix} ({state})", markup=False)
        for d in aot.downloads:
            out_console.print(
                f"  {d.what}: {mask_url(d.url)} sha256={d.sha256}",
                markup=False,
                soft_wrap=True,
            )
    if llvm is not None:
        folder = str(plan.llvm_dir or "")
        state = f"in the cache: {folder}" if folder else "to fetch"
        out_console.print(
            f"{llvm.what}: {mask_url(llvm.url)} ({state})", markup=False, soft_wrap=True
        )
    for p in plan.packages:
        state = f"in the cache: {p.folder}" if p.folder else "to fetch"
        shown = mask_url(p.package.download.url)
        out_console.print(
            f"{p.package.download.what}: {shown} ({state})", markup=False, soft_wrap=True
        )
    for note in plan.notes:
        out_console.print(f"note: {note}", markup=False, soft_wrap=True)
