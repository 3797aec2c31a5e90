"""Device code in kpack archives: which archives a bundle carries for the kpack-split libraries
it writes, where they go in the wheel, and which requested targets they serve.

A kpack-split library (TheRock's trees and wheels since 2026) holds no device code: its
``.rocm_kpack_ref`` marker names archives by a path with ``@GFXARCH@`` relative to the
library's own folder (``../.kpack/blas_lib_@GFXARCH@.kpack``), and the loader replaces
``@GFXARCH@`` by the GPU's target id (then its feature subsets). So an archive goes into the
wheel at the marker's path from the library's place in the wheel (``torch/lib/`` ->
``torch/.kpack/``), once however many libraries share it, stored (its frames are zstd already).

An archive holds a whole artifact group (TheRock's ``blas_lib`` holds rocBLAS, rocSPARSE,
hipBLASLt ...): it is carried whole, and the bytes of code objects no written library uses are
reported (``unused_bytes``). A target is served by a library only if a carried archive holds
every one of its code objects for a target id that serves it (:func:`kpack.serves`).
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.binary import kpack
from rocm_build.common import arch
from rocm_build.common.errors import BundleError
from rocm_build.common.treepath import TreeGuard, reading
from rocm_build.wheel.analyze import WheelAnalysis

__all__ = [
    "NO_KPACK",
    "KpackArchiveFile",
    "KpackLibrary",
    "KpackPlan",
    "archive_target",
    "plan_kpack",
    "wheel_kpack_members",
    "wheel_serves",
    "wheel_targets",
]


@dataclass(frozen=True)
class KpackArchiveFile:
    """One archive the wheel carries."""

    source: str  # the file in the tree
    arcname: str
    size: int
    target: str  # the target id its name and table of contents give (``gfx90a:xnack-``)
    group: str
    #: bytes (as the code objects' original sizes) of entries no written library uses
    unused_bytes: int


@dataclass(frozen=True)
class KpackLibrary:
    """A kpack-split library the wheel carries and what its archives serve."""

    arcname: str
    kernel_name: str
    code_objects: int
    archives: tuple[str, ...]  # arcnames of the archives its marker resolves to
    targets: tuple[str, ...]  # the archives' target ids that hold all its code objects


@dataclass(frozen=True)
class KpackPlan:
    libraries: tuple[KpackLibrary, ...] = ()
    archives: tuple[KpackArchiveFile, ...] = ()
    #: requested targets no carried archive serves for a library: one line each
    gaps: tuple[str, ...] = ()

    def summary(self) -> dict[str, Any]:
        return {
            "libraries": {
                lib.arcname: {
                    "kernel_name": lib.kernel_name,
                    "code_objects": lib.code_objects,
                    "archives": list(lib.archives),
                    "targets": list(lib.targets),
                }
                for lib in self.libraries
            },
            "archives": {
                a.arcname: {"target": a.target, "size": a.size, "unused_bytes": a.unused_bytes}
                for a in self.archives
            },
            "carried": "whole archives",
            "gaps": list(self.gaps),
        }


NO_KPACK = KpackPlan()


def archive_target(name: str, ref: kpack.KpackRef) -> str | None:
    """The target id an archive's path (as the wheel or tree names it) gives ``@GFXARCH@`` in
    one of ``ref``'s search paths (None: none matches)."""
    base = posixpath.basename(name)
    for pattern in ref.search_paths:
        if (found := _archive_target(base, posixpath.basename(pattern))) is not None:
            return found
    return None


def _archive_target(name: str, pattern: str) -> str | None:
    """The target id ``name`` gives ``@GFXARCH@`` in ``pattern`` (None: another name)."""
    head, _, tail = pattern.partition(kpack.GFXARCH)
    if not name.startswith(head) or not name.endswith(tail) or len(name) <= len(head + tail):
        return None
    return name[len(head) : len(name) - len(tail)]


def _wanted(target_id: str, targets: Sequence[str]) -> bool:
    return not targets or any(arch.serves_id(target_id, t) for t in targets)


@dataclass
class _Found:
    source: Path
    arcname: str
    target: str
    archive: kpack.Archive


def _archives_of(
    source: Path,
    arcname: str,
    ref: kpack.KpackRef,
    targets: Sequence[str],
    guard: TreeGuard,
    read: Callable[[Path], kpack.Archive],
) -> list[_Found]:
    """The archives in the tree that ``ref`` (the marker of the library at ``source``, written
    at ``arcname``) resolves to for ``targets`` (every target: all of them)."""
    found: list[_Found] = []
    for pattern in ref.search_paths:
        folder_rel, name_pattern = posixpath.split(pattern)
        tree_folder = Path(posixpath.normpath(posixpath.join(str(source.parent), folder_rel)))
        wheel_folder = posixpath.normpath(posixpath.join(posixpath.dirname(arcname), folder_rel))
        if wheel_folder.startswith("../") or wheel_folder == ".." or posixpath.isabs(pattern):
            raise BundleError(
                f"{posixpath.basename(arcname)}: its kpack marker ({pattern}) would resolve "
                f"outside the wheel from {posixpath.dirname(arcname)}/; choose a deeper "
                "bundle.lib_dir"
            )
        with reading(f"the kpack archives of {source.name}"):
            if not tree_folder.is_dir():
                continue
            guard.check(tree_folder)
            names = sorted(p.name for p in tree_folder.iterdir())
        glob = name_pattern.replace(kpack.GFXARCH, "*")
        for name in fnmatch.filter(names, glob):
            target = _archive_target(name, name_pattern)
            if target is None or not _wanted(target, targets):
                continue
            path = tree_folder / name
            guard.check(path)
            found.append(_Found(path, posixpath.join(wheel_folder, name), target, read(path)))
    return found


def plan_kpack(
    libraries: Iterable[tuple[str, Path]],
    targets: Sequence[str],
    guard: TreeGuard,
) -> KpackPlan:
    """The archives the kpack-split ``libraries`` ((arcname, file in the tree)) need for
    ``targets`` (() = every archive their markers name), and the requested targets they do not
    serve. A damaged marker or archive, or a marker that resolves to no archive at all, stops
    the bundle (exit 10), naming the file."""
    cache: dict[Path, kpack.Archive] = {}

    def read(path: Path) -> kpack.Archive:
        if path not in cache:
            cache[path] = kpack.read_archive(path)
        return cache[path]

    libs: list[KpackLibrary] = []
    carried: dict[str, _Found] = {}
    used: dict[str, set[str]] = {}
    gaps: list[str] = []
    for arcname, source in libraries:
        try:
            ref = kpack.read_ref(source)
            if ref is None:
                continue
            wrappers = kpack.wrappers(source)
            count = len([w for w in wrappers if w.magic == "HIPK"])
            found = _archives_of(source, arcname, ref, targets, guard, read)
            mine = [f for f in found if f.archive.for_kernel(ref.kernel_name)]
            marker = kpack.marker_address(source)
            for f in mine:  # the library and each archive agree on its code objects
                kpack.check_consistent(ref, wrappers, f.archive, marker)
        except kpack.KpackFormatError as err:
            raise BundleError(f"{err}; replace the file and bundle again") from err
        if not mine and not targets:
            raise BundleError(
                f"{posixpath.basename(arcname)} is kpack-split but no archive its marker names "
                f"({', '.join(ref.search_paths)}) is in the tree; use a complete tree "
                "(TheRock's dist tree with its .kpack folder)"
            )
        served = [f.target for f in mine if _holds_all(f.archive, ref, count, f.target)]
        for t in targets:
            if not any(kpack.serves(f.archive, ref, count, t) for f in mine):
                had = ", ".join(sorted({f.target for f in found})) or "no archive"
                gaps.append(
                    f"{posixpath.basename(arcname)} has no kpack archive serving {t} "
                    f"(its marker finds {had})"
                )
        for f in mine:
            carried.setdefault(f.arcname, f)
            used.setdefault(f.arcname, set()).add(ref.kernel_name)
        names = tuple(sorted(f.arcname for f in mine))
        libs.append(KpackLibrary(arcname, ref.kernel_name, count, names, tuple(sorted(served))))
    archives = tuple(
        KpackArchiveFile(
            str(f.source),
            arc,
            f.source.stat().st_size,
            f.target,
            f.archive.group_name,
            _unused(f.archive, used[arc]),
        )
        for arc, f in sorted(carried.items())
    )
    return KpackPlan(tuple(libs), archives, tuple(gaps))


def _holds_all(archive: kpack.Archive, ref: kpack.KpackRef, count: int, target: str) -> bool:
    return kpack.serves(archive, ref, count, target)


def _unused(archive: kpack.Archive, kernels: set[str]) -> int:
    return sum(e.original_size for e in archive.entries if e.kernel_name not in kernels)


def wheel_kpack_members(
    refs: Mapping[str, kpack.KpackRef], members: Iterable[str]
) -> dict[str, tuple[str, ...]]:
    """For each kpack-split ELF member of a wheel (arcname -> its marker), the wheel's members
    its marker can resolve to (empty: the wheel does not carry its archives)."""
    names = list(members)
    out: dict[str, tuple[str, ...]] = {}
    for arcname, ref in refs.items():
        hits: list[str] = []
        for pattern in ref.search_paths:
            full = posixpath.normpath(posixpath.join(posixpath.dirname(arcname), pattern))
            hits += fnmatch.filter(names, full.replace(kpack.GFXARCH, "*"))
        out[arcname] = tuple(sorted(set(hits)))
    return out


def wheel_serves(
    analysis: WheelAnalysis, arcname: str, archives: Iterable[str], target: str
) -> bool:
    """Does one of ``archives`` (members of the analysed wheel) hold every code object of its
    kpack-split member ``arcname`` for a target id that serves ``target``?"""
    member = analysis.elves[arcname]
    ref = member.kpack_ref
    return ref is not None and any(
        kpack.serves(analysis.kpack_archives[a], ref, member.kpack_objects, target)
        for a in archives
        if a in analysis.kpack_archives
    )


def wheel_targets(analysis: WheelAnalysis, arcname: str, archives: Iterable[str]) -> list[str]:
    """The target ids of ``archives`` that hold every code object of member ``arcname``."""
    member = analysis.elves[arcname]
    ref = member.kpack_ref
    out: set[str] = set()
    for a in archives:
        archive = analysis.kpack_archives.get(a)
        if archive is None or ref is None:
            continue
        for target_id in archive.gfx_arches:
            if kpack.serves(archive, ref, member.kpack_objects, target_id):
                out.add(target_id)
    return sorted(out)
