"""The ROCm a wheel was built with against the tree it is bundled from, and the copies of another
ROCm's libraries a wheel carries beside the ones the bundle adds.

A wheel says which ROCm it was built with in its local version label (``2.9.0+rocm5.2.3``, what
``build`` writes by default, also inside a longer label such as ``+rocm7.0.gfx942``); a wheel
bundled before says it in its provenance record (``rocm_version``). Bundling it from a tree of
another ROCm would give a wheel named for one ROCm that loads another's runtime.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from rocm_build.binary import elf
from rocm_build.bundle.model import Library
from rocm_build.common.errors import RocmTreeError
from rocm_build.rocm import dist

__all__ = [
    "built_with",
    "checked_version",
    "ordering_warning",
    "other_rocm",
    "own_hip",
    "own_hip_alias",
    "relabel",
    "same_release",
]

#: ``rocm5.2.3`` in a local label (after ``+`` or a ``.``); ``rocm-5.2`` and ``rocm_5.2`` too
_LABEL = re.compile(r"(?<![A-Za-z0-9])rocm[-_.]?(\d+(?:\.\d+)*)", re.IGNORECASE)
_NUMBERS = re.compile(r"\d+(?:\.\d+)*")


def built_with(version: str, record: Mapping[str, Any]) -> str:
    """The ROCm version the wheel was built with: its local label's ``rocmX.Y[.Z]``, else the
    tree an earlier bundle took its libraries from; "" when neither says."""
    _, plus, local = version.partition("+")
    if plus and (match := _LABEL.search(local)):
        return match.group(1)
    found = _NUMBERS.search(str(record.get("rocm_version", "") or ""))
    return found.group(0) if found else ""


def ordering_warning(version: str) -> str | None:
    """What to say of a version whose local label names ROCm 10 or later in one segment
    (``+rocm10.0``), None for any other. PEP 440 (``packaging``) splits a local label at ``.``,
    ``-`` and ``_`` and compares it segment by segment: a segment of digits as a number, any
    other as lower-case text, a number above any text. ``rocm10`` and ``rocm7`` are text, and
    ``"1" < "7"``: ``2.14.0+rocm10.0`` sorts below ``2.14.0+rocm7.14`` (ROCm/TheRock#7183).
    pip looks at the label only between wheels of the same public version, and there it takes
    the older ROCm's."""
    _, plus, local = version.partition("+")
    if not plus:
        return None
    for segment in re.split(r"[._-]", local):
        match = re.fullmatch(r"rocm(\d+)", segment, re.IGNORECASE)
        if match and int(match.group(1)) >= 10:
            return (
                f"{version}: PEP 440 compares the label's '{segment}' with 'rocm7' as text, so "
                f"this wheel sorts below a +rocm7/8/9 wheel of the same version and `pip install "
                "--upgrade` (or an index or --find-links folder holding both) takes the older "
                f"ROCm's; install it by its exact version (=={version}) or from an index that "
                f"holds only {segment} wheels"
            )
    return None


def same_release(a: str, b: str) -> bool:
    """Whether two ROCm versions agree as far as both go (``5.2`` and ``5.2.3`` do)."""
    pa, pb = a.split("."), b.split(".")
    n = min(len(pa), len(pb))
    return [int(x) for x in pa[:n]] == [int(x) for x in pb[:n]]


def relabel(version: str, tree_version: str) -> str:
    """``version`` with the ROCm of its local label replaced by ``tree_version`` in the label's
    form (``rocm6.4``, as ``build`` writes it; added when the label names none)."""
    short = dist.rocm_label_version(tree_version)
    base, plus, local = version.partition("+")
    if plus and _LABEL.search(local):
        local = _LABEL.sub(f"rocm{short}", local, count=1)
    elif plus:
        local = f"{local}.rocm{short}"
    else:
        local = f"rocm{short}"
    new = f"{base}+{local}"
    try:
        Version(new)
    except InvalidVersion as err:  # a label rocm-build did not write
        raise RocmTreeError(
            f"cannot relabel version {version} with ROCm {tree_version}: give the wheel a "
            "plain local label (build --version-suffix) and bundle it again"
        ) from err
    return new


def checked_version(version: str, built: str, tree: Path, *, allow: bool, wheel: str) -> str:
    """The version the bundled wheel carries. A wheel built with another ROCm than the tree's
    is refused, or with ``allow`` relabelled with the tree's version."""
    tree_version = dist.read_tree_version(tree)
    if not built or not tree_version or same_release(built, tree_version):
        return version
    if not allow:
        raise RocmTreeError(
            f"{wheel} was built with ROCm {built} but the tree {tree} is ROCm {tree_version}: "
            f"bundle it from a ROCm {built} tree (--rocm), rebuild it against this one, or "
            "pass --allow-rocm-mismatch to bundle it anyway as "
            f"+rocm{dist.rocm_label_version(tree_version)}"
        )
    return relabel(version, tree_version)


def _stem(name: str) -> str:
    return name.split(".so", 1)[0]


def other_rocm(
    host: Mapping[str, elf.ElfInfo], libraries: Sequence[Library], lib_dir: str
) -> list[str]:
    """Members anywhere in the wheel that are a copy of a ROCm library the bundle adds to
    ``lib_dir`` (``libamdhip64.so.5`` beside the tree's ``libamdhip64.so.6``, or a copy in
    ``torch/_vendor``) and that no other ELF file of the wheel or the bundle needs: left there,
    they are dead weight at best, and a second runtime for whatever opens them by name."""
    adds = {_stem(lib.name) for lib in libraries if lib.origin == "rocm"}
    names = {n for lib in libraries for n in (lib.name, *lib.aliases)}
    found: list[str] = []
    for arc in host:
        base = posixpath.basename(arc)
        replaced = posixpath.dirname(arc) == lib_dir and base in names  # the tree's takes its place
        if _stem(base) not in adds or replaced:
            continue
        users = [
            other
            for other, i in [*host.items(), *((lib.arcname, lib.info) for lib in libraries)]
            if other != arc and base in i.needed
        ]
        if not users:
            found.append(arc)
    return sorted(found)


def own_hip(host: Mapping[str, elf.ElfInfo], lib_dir: str) -> list[str]:
    """The wheel's own HIP runtimes (``libamdhip64.so.*`` members outside ``lib_dir``, where
    the tree's takes the place of one) that its ELF files use in place of the tree's: each is
    said, since it is linked against the tree's other libraries (its HSA) and Triton finds HIP
    only as ``<lib_dir>/libamdhip64.so``."""
    needed = {n for info in host.values() for n in info.needed}
    return sorted(
        arc
        for arc in host
        if posixpath.basename(arc).startswith("libamdhip64.so.")
        and posixpath.basename(arc) in needed
        and posixpath.dirname(arc) != lib_dir
    )


def own_hip_alias(
    members: Sequence[str], libraries: Sequence[Library], lib_dir: str, used: Sequence[str]
) -> str:
    """Where Triton will find the wheel's own HIP runtime in use (``used``, from
    :func:`own_hip`): ``<lib_dir>/libamdhip64.so``, unless the wheel or the bundle already puts
    a file there. "" when no own runtime is used or the name is taken."""
    arc = posixpath.join(lib_dir, "libamdhip64.so")
    taken = {*members, *(posixpath.join(lib_dir, n) for lib in libraries for n in lib.aliases)}
    taken.update(lib.arcname for lib in libraries)
    return arc if used and arc not in taken else ""
