"""Data trees of the bundled libraries: which files go into the wheel, where, for which targets."""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from rocm_build.binary import elf
from rocm_build.bundle.model import DataFile
from rocm_build.common import arch
from rocm_build.common.treepath import TreeGuard, denied, reading, walk_files

__all__ = [
    "AOTRITON_IMAGES",
    "aotriton_family_serves",
    "aotriton_images_out",
    "data_destination",
    "data_mode",
    "data_target_gaps",
    "gfx_tokens",
    "looked_up_at",
    "program_info",
    "select_data",
]

#: Flash attention's kernel images: ``aotriton.images/amd-<family>/`` beside libaotriton, one
#: folder per GPU family, named with ``x`` for any digit (``amd-gfx11xx``, ``amd-gfx120x``).
AOTRITON_IMAGES = "aotriton.images"
_FAMILY = re.compile(r"gfx[0-9a-fx]+")


def gfx_tokens(path: str) -> set[str]:
    return arch.gfx_tokens(path)


def aotriton_family_serves(family: str, targets: Sequence[str]) -> bool:
    """Does the aotriton image folder ``family`` (``amd-gfx942``, ``amd-gfx11xx``) hold kernels
    for one of ``targets``? A name of another shape is kept (it may serve any target)."""
    name = family.lower().removeprefix("amd-")
    if not targets or not _FAMILY.fullmatch(name):
        return True
    return any(
        len(member) == len(name) and all(f in ("x", m) for m, f in zip(member, name, strict=True))
        for target in targets
        for member in arch.members(target)
    )


def _image_family(path: str) -> str | None:
    parts = path.split("/")
    for i, part in enumerate(parts[:-2]):
        if part == AOTRITON_IMAGES:
            return parts[i + 1]
    return None


def aotriton_images_out(
    members: Iterable[str], targets: Sequence[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Wheel members in aotriton image folders of families that serve none of ``targets`` (left
    out of the bundle), and those families."""
    out: list[str] = []
    families: set[str] = set()
    for name in members:
        family = _image_family(name)
        if family is not None and not aotriton_family_serves(family, targets):
            out.append(name)
            families.add(family)
    return tuple(out), tuple(sorted(families))


def data_destination(lib_dir: str, tree: str) -> str:
    """Where a data tree goes so the libraries in ``lib_dir`` find it as in the ROCm tree."""
    tree = tree.strip("/")
    if tree.startswith("lib/"):
        return posixpath.join(lib_dir, tree[len("lib/") :])
    parent, base = posixpath.split(lib_dir.rstrip("/"))
    root = parent if base == "lib" else lib_dir
    return posixpath.join(root, tree) if root else tree


def _tree_owner(tree: str) -> str:
    """The library a data tree belongs to: the folder after the last lib/ or share/."""
    parts = tree.strip("/").split("/")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in ("lib", "share"):
            owner = parts[i + 1].split(".")[0].lower()
            return owner[3:] if owner.startswith("lib") else owner
    return parts[0].lower()


def select_data(
    rocm: Path,
    trees: Sequence[str],
    lib_dir: str,
    library_names: Iterable[str],
    targets: Sequence[str],
    read_from: Mapping[str, str] | None = None,
    guard: TreeGuard | None = None,
) -> tuple[list[DataFile], int]:
    """Files of the data trees whose owner library is bundled, filtered to ``targets``.

    Trees are named as in the Linux layout; ``read_from`` gives another place in the tree to
    read one from (Windows keeps ``lib/rocblas/library`` in ``bin/rocblas/library``). Symlinks
    are followed while they stay inside the tree; one that leads outside it (and outside the
    folders ``guard`` allows) stops the bundle. A file this user cannot read stops it too.
    """
    guard = guard or TreeGuard.of(rocm)
    names = [n.lower() for n in library_names]
    files: list[DataFile] = []
    skipped = 0
    for tree in trees:
        src = rocm / (read_from or {}).get(tree, tree)
        owner = _tree_owner(tree)
        if not any(owner in n for n in names):
            continue
        with reading(f"the data tree {tree}"):
            if not src.exists():
                continue
            is_file = src.is_file()
        guard.check(src)
        dest = data_destination(lib_dir, looked_up_at(rocm, tree))
        paths = [src] if is_file else walk_files(src, guard, f"the data tree {tree}")
        for path in paths:
            if not os.access(path, os.R_OK):
                raise denied(PermissionError(13, "Permission denied", str(path)), "a data file")
            rel = "" if path == src else path.relative_to(src).as_posix()
            tokens = gfx_tokens(rel or path.name)
            family = _image_family(posixpath.join(tree, rel)) if rel else None
            if not arch.keeps(tokens, targets) or (
                family is not None and not aotriton_family_serves(family, targets)
            ):
                skipped += 1
                continue
            arc = posixpath.join(dest, rel) if rel else dest
            mode = data_mode(path)
            rpath = None
            if mode & 0o111 and program_info(path) is not None:
                here = posixpath.relpath(lib_dir or ".", posixpath.dirname(arc) or ".")
                rpath = "$ORIGIN" if here == "." else f"$ORIGIN/{here}"
            files.append(DataFile(str(path), arc, path.stat().st_size, mode, rpath))
    return files, skipped


def data_mode(path: Path) -> int:
    """A data file's mode in a wheel: 0o755 for a file the tree has executable (rocFFT's
    ``rocfft_rtc_helper``, which rocFFT runs), else 0o644."""
    return 0o755 if path.stat().st_mode & 0o111 else 0o644


def program_info(path: Path) -> elf.ElfInfo | None:
    """The ELF facts of ``path`` when it is a host program (ET_EXEC, or ET_DYN with PT_INTERP):
    it needs a search path to the bundled libraries as they do."""
    if not elf.is_elf(path):
        return None
    try:
        info = elf.read_elf(path)
    except elf.NotElfError:
        return None
    return info if info.is_host and info.is_executable else None


def looked_up_at(rocm: Path, tree: str) -> str:
    """Where the tree's library looks for the data tree ``tree``.

    A link in the tree at ``<parent>/<folder>/<name>`` that leads to ``<parent>/<name>`` (the
    versioned folder Debian's rocBLAS reads, ``lib/rocblas/4.4.1/library``) says where the
    library looks; a wheel holds no links, so the data goes there. Otherwise: ``tree`` itself.
    """
    src = rocm / tree
    try:
        if src.is_symlink() or not src.is_dir():
            return tree
        real = src.resolve()
        folders = sorted(p for p in src.parent.iterdir() if p.is_dir() and not p.is_symlink())
        for folder in folders:
            link = folder / src.name
            if link.is_symlink() and link.resolve() == real:
                return posixpath.join(posixpath.dirname(tree.strip("/")), folder.name, src.name)
    except OSError:
        return tree
    return tree


def data_target_gaps(
    rocm: Path, trees: Sequence[str], library_names: Iterable[str], targets: Sequence[str]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Data trees of bundled libraries that carry files for some gfx targets but none for some
    of ``targets``: the library will not find its kernels there (rocBLAS from Debian has none
    for gfx942, say). Nothing when every target's data is kept (no ``targets``)."""
    names = [n.lower() for n in library_names]
    gaps: list[tuple[str, tuple[str, ...]]] = []
    for tree in trees if targets else ():
        src = rocm / tree
        if not any(_tree_owner(tree) in n for n in names) or not src.is_dir():
            continue
        found: set[str] = set()
        for _dirpath, _dirs, files in os.walk(src, followlinks=True):
            for name in files:
                found |= gfx_tokens(name)
        missing = tuple(t for t in targets if found and not arch.covered(t, found))
        if missing:
            gaps.append((tree, missing))
    return tuple(gaps)
