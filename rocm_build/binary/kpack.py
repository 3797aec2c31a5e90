"""Read kpack-split ROCm libraries (TheRock since 2026): a host library's marker and wrappers,
which archive holds its device code for a GPU, and the split tree's archives.

A split library's ``.hip_fatbin`` is NOBITS; a ``.rocm_kpack_ref`` section (its own PT_LOAD) holds
the MessagePack map ``{kernel_name, kpack_search_paths}``; each ``__CudaFatBinaryWrapper`` of
``.hipFatBinSegment`` (u32 magic, u32 version, u64 pointer, u64 reserved1) says ``HIPK``, not
``HIPF``, points at the marker (an ``R_*_RELATIVE`` relocation's addend: the stored 8 bytes may be
0) and keeps its code object's index in reserved1: the TOC key is ``<kernel_name>#<index>``. The
archives themselves: :mod:`rocm_build.binary.kpackfile`.

HIP asks the kpack loader with the device's target id and then its generic processor with the same
features (CLR ``TargetToGeneric``); the loader replaces ``@GFXARCH@`` by each and by its feature
subsets, dropping features from the right first (``gfx90a:sramecc+:xnack-``, ``gfx90a:sramecc+``,
``gfx90a:xnack-``, ``gfx90a``), and resolves a relative path from the library's own folder. Older
tools wrote a ``.kpm`` manifest path instead of the pattern (:attr:`KpackRef.manifest`).
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.binary import elf
from rocm_build.binary.elf import Source, _elf, _shown
from rocm_build.binary.kpackfile import (
    Archive,
    KpackFormatError,
    TocEntry,
    fail,
    read_archive,
    read_archive_from,
    read_code_object,
    unpack_one,
)
from rocm_build.common import arch

__all__ = [
    "GFXARCH",
    "HIPF",
    "HIPK",
    "KPACK_DIR",
    "MARKER_SECTION",
    "Archive",
    "KpackFormatError",
    "KpackRef",
    "TocEntry",
    "Wrapper",
    "candidates",
    "check_consistent",
    "is_split_tree",
    "lookup_names",
    "marker_address",
    "read_archive",
    "read_archive_from",
    "read_code_object",
    "read_ref",
    "resolve",
    "serves",
    "split_libraries",
    "tree_archives",
    "tree_loader",
    "wrappers",
]

MARKER_SECTION = ".rocm_kpack_ref"
KPACK_DIR = ".kpack"
GFXARCH = "@GFXARCH@"
WRAPPER_SECTION = ".hipFatBinSegment"
HIPF = 0x48495046
HIPK = 0x4B504948
MANIFEST_SUFFIX = ".kpm"
THEROCK_MANIFEST = "share/therock/therock_manifest.json"

_WRAPPER = struct.Struct("<IIQQ")
_RELA = struct.Struct("<QQq")
_RELATIVE = {"EM_X86_64": 8, "EM_AARCH64": 1027}
_RELA_CHUNK = _RELA.size << 15
#: the marker the loader parses is at most this long (its MAX_METADATA_SIZE)
MAX_MARKER = 64 << 10
#: TheRock's manifest is a few KiB
MAX_MANIFEST = 1 << 20


@dataclass(frozen=True)
class KpackRef:
    """The marker of a split library."""

    kernel_name: str  # the TOC key's base: "math-libs/rocRAND/stage/lib/librocrand.so.1.1"
    search_paths: tuple[str, ...]  # as written: "../.kpack/rand_lib_@GFXARCH@.kpack"
    manifest: str | None  # the older form's ``.kpm`` path; None for the pattern form


@dataclass(frozen=True)
class Wrapper:
    """One ``__CudaFatBinaryWrapper``."""

    file_offset: int
    magic: str  # "HIPK" or "HIPF"
    index: int  # reserved1: the code object's index in the TOC key
    address: int  # where its pointer points (the relocation's addend)


def _parse_ref(value: Any, where: str) -> KpackRef:
    if not isinstance(value, dict):
        raise fail(where, f"{MARKER_SECTION} is not a map")
    name = value.get("kernel_name")
    paths = value.get("kpack_search_paths")
    if not isinstance(name, str) or not name:
        raise fail(where, f"{MARKER_SECTION} has no kernel_name string")
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        raise fail(where, f"{MARKER_SECTION} has no kpack_search_paths list of strings")
    for p in paths:
        if not p or p.startswith(("/", "\\")) or (len(p) > 1 and p[1] == ":"):
            raise fail(where, f"{MARKER_SECTION} search path {p!r} is not relative")
    manifest = next((p for p in paths if p.endswith(MANIFEST_SUFFIX)), None)
    return KpackRef(name, tuple(paths), manifest)


def read_ref(path: Source) -> KpackRef | None:
    """The marker of ``path``; None when it has no ``.rocm_kpack_ref`` section (not split)."""
    where = _shown(path)
    with _elf(path) as (elf, mm):
        section = elf.get_section_by_name(MARKER_SECTION)
        if section is None:
            return None
        start, size = int(section["sh_offset"]), int(section["sh_size"])
        if section["sh_type"] == "SHT_NOBITS" or start + size > len(mm):
            raise fail(where, f"{MARKER_SECTION} has no bytes in the file")
        data = mm[start : start + min(size, MAX_MARKER)]
    return _parse_ref(unpack_one(data, where, MARKER_SECTION), where)


def marker_address(path: Source) -> tuple[int, int] | None:
    """(address, size) of the marker section, None without one."""
    with _elf(path) as (elf, _mm):
        section = elf.get_section_by_name(MARKER_SECTION)
        if section is None:
            return None
        return int(section["sh_addr"]), int(section["sh_size"])


def _relative_addends(elf: Any, mm: Any, lo: int, hi: int) -> dict[int, int]:
    """Addends of the RELATIVE relocations of ``.rela.dyn`` that patch addresses in [lo, hi)."""
    rtype = _RELATIVE.get(elf["e_machine"])
    section = elf.get_section_by_name(".rela.dyn")
    if rtype is None or section is None or not elf.little_endian or elf.elfclass != 64:
        return {}
    start, size = int(section["sh_offset"]), int(section["sh_size"])
    end = min(start + size - size % _RELA.size, len(mm))
    found: dict[int, int] = {}
    for at in range(start, end, _RELA_CHUNK):  # a big library's table is megabytes: by pieces
        for offset, info, addend in _RELA.iter_unpack(mm[at : min(at + _RELA_CHUNK, end)]):
            if info & 0xFFFFFFFF == rtype and lo <= offset < hi:
                found[offset] = addend
    return found


def wrappers(path: Source) -> tuple[Wrapper, ...]:
    """Every ``__CudaFatBinaryWrapper`` of ``path``, in file order (empty without the section)."""
    where = _shown(path)
    with _elf(path) as (elf, mm):
        section = elf.get_section_by_name(WRAPPER_SECTION)
        if section is None or section["sh_type"] == "SHT_NOBITS":
            return ()
        start, size, addr = (int(section[k]) for k in ("sh_offset", "sh_size", "sh_addr"))
        if size % _WRAPPER.size or start + size > len(mm):
            raise fail(where, f"{WRAPPER_SECTION} is {size} bytes, not whole wrappers in the file")
        addends = _relative_addends(elf, mm, addr, addr + size)
        found = []
        for i, (magic, _version, pointer, index) in enumerate(
            _WRAPPER.iter_unpack(mm[start : start + size])
        ):
            if magic not in (HIPF, HIPK):
                raise fail(where, f"wrapper {i} has magic {magic:#x}, neither HIPF nor HIPK")
            name = "HIPK" if magic == HIPK else "HIPF"
            target = addends.get(addr + i * _WRAPPER.size + 8, pointer)
            found.append(Wrapper(start + i * _WRAPPER.size, name, index, target))
        return tuple(found)


def lookup_names(target: str) -> tuple[str, ...]:
    """What replaces ``@GFXARCH@``, in the loader's order: the target id, then its generic
    processor with the same features (HIP's ``TargetToGeneric``), each followed by its feature
    subsets, dropping features from the right first (the loader's power set, by descending
    mask)."""
    processor, *feats = target.split(":")
    generic = next((g for g, members in arch.GENERIC.items() if processor in members), None)
    names: list[str] = []
    for proc in (processor, generic):
        if proc is None:
            continue
        n = len(feats)
        for mask in range((1 << n) - 1, -1, -1):
            kept = [f for i, f in enumerate(feats) if mask & (1 << (n - 1 - i))]
            name = ":".join([proc, *kept])
            if name not in names:
                names.append(name)
    return tuple(names)


def candidates(ref: KpackRef, target: str) -> tuple[str, ...]:
    """The archive paths the loader tries for ``target``, relative as written: each name of
    :func:`lookup_names` in every pattern (the loader looks for a target in all archives before
    the next), then the paths without a pattern (which target they hold is inside them). A
    ``.kpm`` manifest is not an archive and is left out."""
    patterns = [p for p in ref.search_paths if GFXARCH in p]
    out = [p.replace(GFXARCH, name, 1) for name in lookup_names(target) for p in patterns]
    out += [p for p in ref.search_paths if GFXARCH not in p and not p.endswith(MANIFEST_SUFFIX)]
    return tuple(dict.fromkeys(out))


def _join(library_dir: str, relative: str, where: str) -> str:
    """``relative`` from ``library_dir``, normalised; climbing above its root is an error."""
    if relative.startswith("/") or "\\" in relative:
        raise fail(where, f"search path {relative!r} is not a relative posix path")
    absolute = library_dir.startswith("/")
    parts = [p for p in library_dir.split("/") if p not in ("", ".")]
    for part in relative.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise fail(where, f"search path {relative!r} climbs above the tree root")
            parts.pop()
        else:
            parts.append(part)
    return ("/" if absolute else "") + "/".join(parts)


def resolve(
    library_dir: str, ref: KpackRef, target: str, exists: Callable[[str], bool]
) -> str | None:
    """The first archive of :func:`candidates` that ``exists``, joined to ``library_dir`` (the
    library's own folder) and normalised; None when none does. Every candidate is checked first:
    an absolute one, or one whose ``..`` climbs above ``library_dir``'s root, is an error."""
    where = f"{library_dir or '.'} ({ref.kernel_name})"
    paths = [_join(library_dir, c, where) for c in candidates(ref, target)]
    return next((p for p in paths if exists(p)), None)


def _indices(archive: Archive, kernel_name: str) -> dict[str, list[int]]:
    """The code-object indices ``archive`` holds of ``kernel_name``, by target."""
    out: dict[str, list[int]] = {}
    for e in archive.for_kernel(kernel_name):
        out.setdefault(e.target, []).append(e.index)
    return {target: sorted(held) for target, held in out.items()}


def serves(archive: Archive, ref: KpackRef, wrapper_count: int, target: str) -> bool:
    """Does ``archive`` hold every code object (index 0..n-1) of ``ref`` for one target id that
    :func:`arch.serves_id` ``target``?"""
    wanted = set(range(wrapper_count))
    held = _indices(archive, ref.kernel_name).items()
    return bool(wanted) and any(wanted <= set(i) and arch.serves_id(c, target) for c, i in held)


def check_consistent(
    ref: KpackRef,
    found: tuple[Wrapper, ...],
    archive: Archive,
    marker: tuple[int, int] | None = None,
) -> None:
    """Raise unless the wrappers are HIPK with indices 0..n-1 (pointing into ``marker`` when
    given) and ``archive`` holds exactly those indices of ``ref.kernel_name`` for each target."""
    where = archive.path
    if not found:
        raise fail(where, f"{ref.kernel_name} has no wrappers")
    if any(w.magic != "HIPK" for w in found):
        raise fail(where, f"{ref.kernel_name} has a wrapper that is not HIPK")
    indices = sorted(w.index for w in found)
    if indices != list(range(len(found))):
        raise fail(where, f"{ref.kernel_name}: wrapper indices {indices} are not 0..n-1")
    if marker is not None and any(
        not marker[0] <= w.address < marker[0] + marker[1] for w in found
    ):
        raise fail(where, f"{ref.kernel_name} has a wrapper that does not point at its marker")
    by_target = _indices(archive, ref.kernel_name)
    if not by_target:
        raise fail(where, f"holds no code object of {ref.kernel_name}")
    for target, held in sorted(by_target.items()):
        if held != indices:
            count = f"code objects {held} for {len(found)} wrappers"
            raise fail(where, f"{ref.kernel_name} {target}: {count}")


def _flagged(root: Path) -> bool:
    manifest = root / THEROCK_MANIFEST
    try:
        if (
            manifest.is_symlink()
            or not manifest.is_file()
            or manifest.stat().st_size > MAX_MANIFEST
        ):
            return False
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    flags = data.get("flags") if isinstance(data, dict) else None
    return isinstance(flags, dict) and flags.get("KPACK_SPLIT_ARTIFACTS") is True


def is_split_tree(root: Path) -> bool:
    """Is ``root`` a kpack-split tree: TheRock's manifest says so, or it holds archives? (A
    library with a marker is its callers' to check.)"""
    return _flagged(root) or bool(tree_archives(root))


def tree_archives(root: Path) -> tuple[Path, ...]:
    """``root/.kpack/*.kpack``, sorted: regular files, or links to regular files in the tree."""
    folder = root / KPACK_DIR
    try:
        top = root.resolve()
        if not folder.resolve().is_relative_to(top) or not folder.is_dir():
            return ()
        entries = list(os.scandir(folder))
    except OSError:
        return ()
    found = []
    for entry in entries:
        if not entry.name.endswith(".kpack"):
            continue
        path = Path(entry.path)
        try:
            if entry.is_symlink():
                real = path.resolve()
                if not real.is_relative_to(top) or not real.is_file():
                    continue
            elif not entry.is_file(follow_symlinks=False):
                continue
        except OSError:
            continue
        found.append(path)
    return tuple(sorted(found))


def tree_loader(root: Path) -> Path | None:
    """The tree's kpack loader (TheRock ships it as ``lib/librocm_kpack.so*``, which its HIP
    runtime uses to find code objects in archives), or None: a runtime without it (Debian's)
    never finds a kpack-split library's kernels."""
    lib = root / "lib"
    try:
        found = sorted(p for p in lib.glob("librocm_kpack.so*") if p.is_file())
    except OSError:
        return None
    return found[0] if found else None


def split_libraries(root: Path, limit: int = 0) -> tuple[Path, ...]:
    """Libraries in ``root/lib`` with a kpack marker, smallest first (``limit``: at most that
    many; 0: all)."""
    out: list[Path] = []
    try:
        candidates = sorted(
            (p for p in (root / "lib").glob("lib*.so*") if p.is_file() and not p.is_symlink()),
            key=lambda p: p.stat().st_size,
        )
    except OSError:
        return ()
    for path in candidates:
        try:
            if elf.read_elf(path).has_kpack_ref:
                out.append(path)
        except (OSError, elf.NotElfError):
            continue
        if limit and len(out) >= limit:
            break
    return tuple(out)
