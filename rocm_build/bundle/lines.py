"""A bundle's results as text lines for people (the CLI prints them)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Sequence
from pathlib import Path

from rocm_build.bundle.model import BundleResult, Closure
from rocm_build.common.sizes import human_size

__all__ = [
    "device_lines",
    "kpack_lines",
    "linux_plan_lines",
    "missing_data_line",
    "system_lines",
    "warning_lines",
]


def linux_plan_lines(result: BundleResult) -> Iterator[str]:
    """A planned (dry-run) bundle of a Linux wheel, for people."""
    plan = result.closure
    yield f"would bundle {Path(result.input).name} -> {result.output}"
    yield f"  platform tag: {plan.platform_tag if plan else ''}"
    libs = plan.libraries if plan else ()
    thin = plan is not None and any(r.startswith(("rocm-sdk-", "rocm[")) for r in plan.requires)
    none = " (thin: ROCm's from its packages)" if thin else " (none: self-contained)"
    yield f"  libraries to add: {len(libs)}" + (none if not libs else "")
    for lib in libs:
        why = "dlopen" if lib.reason == "dlopen" else "needed"
        also = f"; also as {', '.join(lib.aliases)}" if lib.aliases else ""
        size = f"{human_size(lib.size)}, "
        yield f"    {lib.name}  from {lib.origin}: {lib.source}  ({size}{why}{also})"
    if plan is None:
        yield from _total_line(None)
        yield from (f"  {line}" for line in warning_lines(result))
        yield "  data files: 0 for every target (0 left out for other targets)"
        return
    yield from _total_line(plan)
    yield from system_lines(plan)
    yield from (f"  {line}" for line in warning_lines(result))
    targets = ", ".join(plan.targets) or "every target"
    yield (
        f"  data files: {len(plan.data)} for {targets}"
        f" ({plan.data_skipped} left out for other targets)"
    )
    for change in plan.rpaths:
        old = ":".join(change.old) or "-"
        kind = " (RUNPATH)" if change.runpath else ""
        yield f"  search path of {change.arcname}: {old} -> {change.new}{kind}"
    if plan.from_torch:
        yield f"  from the torch wheel: {', '.join(name for name, _ in plan.from_torch)}"
    for req in plan.requires:
        yield f"  requires: {req}"
    yield from device_lines(plan)
    yield from kpack_lines(plan)


def kpack_lines(plan: Closure) -> Iterator[str]:
    """The kpack archives a bundle carries: per archive its target, size and the bytes of it
    that no bundled library uses."""
    kp = plan.kpack
    if not kp.libraries:
        return
    archives = {a.arcname: a for a in kp.archives}
    total = sum(a.size for a in archives.values())
    yield (
        f"  kpack archives: {len(archives)} ({human_size(total)}, stored) for "
        f"{len(kp.libraries)} kpack-split libraries"
    )
    for arc, a in sorted(archives.items()):
        unused = f", {human_size(a.unused_bytes)} of code for no bundled library"
        yield (f"    {arc}: {a.target}, {human_size(a.size)}" + (unused if a.unused_bytes else ""))


def device_lines(plan: Closure) -> Iterator[str]:
    """Per written library with device code: the bytes of code objects kept and dropped."""
    files = {d.arcname: d.summary() for d in plan.device}
    if not files:
        return
    targets = ", ".join(plan.device_targets)
    kept = sum(f.code.kept_bytes for f in files.values())
    dropped = sum(f.code.dropped_bytes for f in files.values())
    yield (
        f"  device code for {targets}: {human_size(kept)} kept, {human_size(dropped)} dropped "
        "(code objects, uncompressed)"
    )
    for arc, f in sorted(files.items()):
        how = "pruned" if f.pruned else "kept whole" if f.kept_whole else "nothing to drop"
        code = f.code
        yield (
            f"    {posixpath.basename(arc)}: {human_size(code.kept_bytes)} kept "
            f"({', '.join(code.kept) or 'host only'}), {human_size(code.dropped_bytes)} "
            f"dropped, {code.bundles} bundles ({how})"
        )


def missing_data_line(tree: str, missing: Sequence[str]) -> str:
    return (
        f"warning: the ROCm tree's {tree} has no files for {', '.join(missing)}: the bundled "
        "library finds no kernels or tuning data there for those targets"
    )


def warning_lines(result: BundleResult) -> Iterator[str]:
    """Data trees without files for some requested targets; another ROCm's libraries left
    out or kept; where the wheel needs ZIP64."""
    if (plan := result.closure) is not None:
        yield from _closure_warnings(plan)
    if result.zip64:
        yield f"note: {Path(result.output).name} needs ZIP64: " + "; ".join(result.zip64)


def _closure_warnings(plan: Closure) -> Iterator[str]:
    for tree, missing in plan.data_missing:
        yield missing_data_line(tree, missing)
    if plan.left_out:
        yield (
            f"note: left out {', '.join(plan.left_out)}: another ROCm's copy of a library "
            "this bundle adds from the tree, which nothing in the wheel needs "
            "(--keep-other-rocm keeps it)"
        )
    if plan.other_rocm:
        yield (
            f"warning: kept {', '.join(plan.other_rocm)} (bundle.keep_other_rocm): another "
            "ROCm's copy of a library this bundle adds from the tree; nothing in the wheel needs "
            "it, and whatever opens it by name loads a second ROCm runtime (kept as it is: "
            "its search path unchanged)"
        )
    replaced = plan.replaces_targets
    if replaced is not None:
        now = ";".join(plan.device_targets or plan.targets) or "the wheel's own targets"
        yield (
            f"warning: replaces {Path(plan.output).name}, bundled for "
            f"{';'.join(replaced) or 'every target'} (now {now}): to keep both, leave out -w DIR "
            "(each target set has a folder of its own in the wheelhouse) or name another folder"
        )
    for arc in plan.own_hip:
        alias = plan.own_hip_alias
        found = (
            f"Triton finds it as {alias} (a stub that loads it)"
            if alias
            else f"Triton finds HIP only as {plan.lib_dir}/libamdhip64.so, which is another file"
        )
        yield (
            f"warning: the wheel's own HIP runtime {arc} is used in place of the tree's, its "
            f"search path set to the tree's libraries it needs (HSA); {found}: rebuild the "
            "wheel without its own copy to use the tree's"
        )
    if plan.images_out_families:
        yield (
            f"note: left out flash attention's aotriton images for "
            f"{', '.join(plan.images_out_families)}: no requested target is in them"
        )
    for gap in plan.device_gaps:
        yield f"warning: {gap}"


def system_lines(plan: Closure | None) -> Iterator[str]:
    """One line per library taken from the build machine instead of the ROCm tree, and one per
    library ``--exclude`` leaves out (found at run time)."""
    if plan is None:
        return
    for lib in plan.from_system:
        yield f"  from the build machine, not the ROCm tree: {lib.name} ({lib.source})"
    for name, needed_by in plan.excluded:
        needers = ", ".join(posixpath.basename(n) for n in needed_by)
        yield (
            f"  excluded (--exclude), found at run time: {name}"
            + (f" (needed by {needers})" if needers else "")
        )


def _total_line(plan: Closure | None) -> Iterator[str]:
    """What the bundle adds, uncompressed: its libraries (as in the tree) and data files."""
    libs = plan.libraries if plan else ()
    lib_bytes = sum(lib.size for lib in libs)
    data_bytes = plan.data_bytes if plan else 0
    files = len(plan.data) if plan else 0
    yield (
        f"  to bundle: {human_size(lib_bytes + data_bytes)} uncompressed ({len(libs)} libraries "
        f"{human_size(lib_bytes)}, {files} data files {human_size(data_bytes)})"
    )
