"""A bundle's results as text lines for people (the CLI prints them)."""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rocm_build.bundle.model import BundleResult
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
    plan = result.plan or {}
    yield f"would bundle {Path(result.input).name} -> {result.output}"
    yield f"  platform tag: {plan.get('platform_tag', '')}"
    libs = plan.get("libraries", [])
    thin = any(r.startswith(("rocm-sdk-", "rocm[")) for r in plan.get("requires", []))
    none = " (thin: ROCm's from its packages)" if thin else " (none: self-contained)"
    yield f"  libraries to add: {len(libs)}" + (none if not libs else "")
    for lib in libs:
        why = "dlopen" if lib["reason"] == "dlopen" else "needed"
        also = f"; also as {', '.join(lib['aliases'])}" if lib["aliases"] else ""
        size = f"{human_size(lib['size'])}, " if "size" in lib else ""
        yield f"    {lib['name']}  from {lib['origin']}: {lib['source']}  ({size}{why}{also})"
    yield from _total_line(plan)
    yield from system_lines(plan)
    yield from (f"  {line}" for line in warning_lines(result))
    targets = ", ".join(plan.get("targets", [])) or "every target"
    yield (
        f"  data files: {plan.get('data_files', 0)} for {targets}"
        f" ({plan.get('data_skipped', 0)} left out for other targets)"
    )
    for change in plan.get("rpaths", []):
        old = ":".join(change["old"]) or "-"
        kind = " (RUNPATH)" if change.get("runpath") else ""
        yield f"  search path of {change['arcname']}: {old} -> {change['new']}{kind}"
    if plan.get("from_torch"):
        yield f"  from the torch wheel: {', '.join(plan['from_torch'])}"
    for req in plan.get("requires", []):
        yield f"  requires: {req}"
    yield from device_lines(plan)
    yield from kpack_lines(plan)


def kpack_lines(plan: Mapping[str, Any]) -> Iterator[str]:
    """The kpack archives a bundle carries: per archive its target, size and the bytes of it
    that no bundled library uses."""
    kp = plan.get("kpack", {})
    archives = kp.get("archives", {})
    if not kp.get("libraries"):
        return
    total = sum(a["size"] for a in archives.values())
    yield (
        f"  kpack archives: {len(archives)} ({human_size(total)}, stored) for "
        f"{len(kp['libraries'])} kpack-split libraries"
    )
    for arc, a in sorted(archives.items()):
        unused = f", {human_size(a['unused_bytes'])} of code for no bundled library"
        yield (
            f"    {arc}: {a['target']}, {human_size(a['size'])}"
            + (unused if a["unused_bytes"] else "")
        )


def device_lines(plan: Mapping[str, Any]) -> Iterator[str]:
    """Per written library with device code: the bytes of code objects kept and dropped."""
    files = plan.get("device_code", {})
    if not files:
        return
    targets = ", ".join(plan.get("device_targets", []))
    kept = sum(f["kept_bytes"] for f in files.values())
    dropped = sum(f["dropped_bytes"] for f in files.values())
    yield (
        f"  device code for {targets}: {human_size(kept)} kept, {human_size(dropped)} dropped "
        "(code objects, uncompressed)"
    )
    for arc, f in sorted(files.items()):
        how = (
            "pruned" if f["pruned"] else "kept whole" if f.get("kept_whole") else "nothing to drop"
        )
        yield (
            f"    {posixpath.basename(arc)}: {human_size(f['kept_bytes'])} kept "
            f"({', '.join(f['kept']) or 'host only'}), {human_size(f['dropped_bytes'])} dropped, "
            f"{f['bundles']} bundles ({how})"
        )


def missing_data_line(tree: str, missing: Sequence[str]) -> str:
    return (
        f"warning: the ROCm tree's {tree} has no files for {', '.join(missing)}: the bundled "
        "library finds no kernels or tuning data there for those targets"
    )


def warning_lines(result: BundleResult) -> Iterator[str]:
    """Data trees without files for some requested targets; another ROCm's libraries left
    out or kept; where the wheel needs ZIP64."""
    plan = result.plan or {}
    for tree, missing in plan.get("data_missing", {}).items():
        yield missing_data_line(tree, missing)
    if plan.get("left_out"):
        yield (
            f"note: left out {', '.join(plan['left_out'])}: another ROCm's copy of a library "
            "this bundle adds from the tree, which nothing in the wheel needs "
            "(--keep-other-rocm keeps it)"
        )
    if plan.get("other_rocm"):
        yield (
            f"warning: kept {', '.join(plan['other_rocm'])} (bundle.keep_other_rocm): another "
            "ROCm's copy of a library this bundle adds from the tree; nothing in the wheel needs "
            "it, and whatever opens it by name loads a second ROCm runtime (kept as it is: "
            "its search path unchanged)"
        )
    replaced = plan.get("replaces_targets")
    if replaced is not None:
        now = ";".join(plan.get("targets", [])) or "the wheel's own targets"
        yield (
            f"warning: replaces {Path(str(plan.get('output', ''))).name}, bundled for "
            f"{';'.join(replaced) or 'every target'} (now {now}): bundle into another folder "
            "(-w DIR) to keep both"
        )
    for arc in plan.get("own_hip", []):
        alias = plan.get("own_hip_alias", "")
        found = (
            f"Triton finds it as {alias} (a stub that loads it)"
            if alias
            else f"Triton finds HIP only as {plan.get('lib_dir', '')}/libamdhip64.so, "
            "which is another file"
        )
        yield (
            f"warning: the wheel's own HIP runtime {arc} is used in place of the tree's, its "
            f"search path set to the tree's libraries it needs (HSA); {found}: rebuild the "
            "wheel without its own copy to use the tree's"
        )
    if plan.get("aotriton_images_dropped"):
        yield (
            f"note: left out flash attention's aotriton images for "
            f"{', '.join(plan['aotriton_images_dropped'])}: no requested target is in them"
        )
    for gap in plan.get("device_gaps", []):
        yield f"warning: {gap}"
    if result.zip64:
        yield f"note: {Path(result.output).name} needs ZIP64: " + "; ".join(result.zip64)


def system_lines(plan: Mapping[str, Any]) -> Iterator[str]:
    """One line per library taken from the build machine instead of the ROCm tree, and one per
    library ``--exclude`` leaves out (found at run time)."""
    for lib in plan.get("from_system", []):
        yield f"  from the build machine, not the ROCm tree: {lib['name']} ({lib['source']})"
    for lib in plan.get("excluded", []):
        needers = ", ".join(posixpath.basename(n) for n in lib["needed_by"])
        yield (
            f"  excluded (--exclude), found at run time: {lib['name']}"
            + (f" (needed by {needers})" if needers else "")
        )


def _total_line(plan: Mapping[str, Any]) -> Iterator[str]:
    """What the bundle adds, uncompressed: its libraries (as in the tree) and data files."""
    libs = plan.get("libraries", [])
    lib_bytes = sum(int(lib.get("size", 0)) for lib in libs)
    data_bytes = int(plan.get("data_bytes", 0))
    yield (
        f"  to bundle: {human_size(lib_bytes + data_bytes)} uncompressed ({len(libs)} libraries "
        f"{human_size(lib_bytes)}, {plan.get('data_files', 0)} data files {human_size(data_bytes)})"
    )
