"""A kpack writer for test fixtures: ROCm libraries split as TheRock ships them since 2026.

TheRock's ``KPACK_SPLIT_ARTIFACTS`` trees hold each HIP library without its device code and the
device code in per-target archives ``<root>/.kpack/<group>_<target-id>.kpack``. This module
makes such trees from ordinary ROCm trees, so that tests can exercise real split libraries
without ROCm's own tool. The splitting itself is rocm-build's (``rocm_build.binary.kpacksplit``:
the ELF surgery; ``rocm_build.binary.kpackwrite``: the archives), byte-identical to the tool's
output for the same input (``tests/integration/bundle/test_kpack_writer.py`` checks it against a
reference the tool made); this module adds TheRock's groups and stage prefixes and whole trees.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

from rocm_build.binary import elf
from rocm_build.binary.kpacksplit import HIPF, HIPK, MARKER_SECTION, PAGE, split_elf
from rocm_build.binary.kpackwrite import (
    SCHEMES,
    CodeObject,
    KpackWriter,
    SplitResult,
    archive_name,
    code_objects,
    decompress_bundle,
)

__all__ = [
    "HIPF",
    "HIPK",
    "MANIFEST",
    "MARKER_SECTION",
    "PAGE",
    "SCHEMES",
    "THEROCK_GROUPS",
    "THEROCK_PREFIXES",
    "CodeObject",
    "KpackWriter",
    "SplitResult",
    "archive_name",
    "code_objects",
    "decompress_bundle",
    "split_elf",
    "split_library",
    "split_tree",
]

#: TheRock's artifact groups (``<artifact>_lib``) of the libraries a test tree may hold, by the
#: library's name up to ``.so``
THEROCK_GROUPS: Mapping[str, str] = {
    "librocrand": "rand_lib",
    "libhiprand": "rand_lib",
    "librocsparse": "blas_lib",
    "libhipsparse": "blas_lib",
    "librocblas": "blas_lib",
    "libhipblas": "blas_lib",
    "libhipblaslt": "blas_lib",
}

#: where TheRock stages each library's project: the kernel names' prefix
THEROCK_PREFIXES: Mapping[str, str] = {
    "librocrand": "math-libs/rocRAND/stage",
    "libhiprand": "math-libs/hipRAND/stage",
    "librocsparse": "math-libs/rocSPARSE/stage",
    "libhipsparse": "math-libs/hipSPARSE/stage",
    "librocblas": "math-libs/BLAS/rocBLAS/stage",
    "libhipblas": "math-libs/BLAS/hipBLAS/stage",
    "libhipblaslt": "math-libs/BLAS/hipBLASLt/stage",
}

MANIFEST = Path("share/therock/therock_manifest.json")


def split_library(
    src: Path,
    dest_root: Path,
    *,
    rel_lib: str = "lib",
    group: str,
    source_prefix: str,
    scheme: str = "zstd-per-kernel",
) -> SplitResult:
    """Split one library: its host library and its own archives under ``dest_root``."""
    writer = KpackWriter(dest_root, scheme=scheme)
    try:
        result = writer.add_library(src, rel_lib=rel_lib, group=group, source_prefix=source_prefix)
    except BaseException:
        writer.abort()
        raise
    writer.finish()
    return result


def split_tree(
    tree: Path,
    dest: Path,
    groups: Mapping[str, str],
    *,
    prefixes: Mapping[str, str] | None = None,
    scheme: str = "zstd-per-kernel",
) -> list[SplitResult]:
    """Make ``dest`` (which must not exist) a kpack-split copy of the ROCm tree ``tree``: every
    ELF file with device code split (its group from ``groups``, by its name up to ``.so``),
    everything else hard-linked (copied across file systems), symbolic links kept as they are,
    and ``share/therock/therock_manifest.json`` saying ``KPACK_SPLIT_ARTIFACTS``."""
    prefixes = {**THEROCK_PREFIXES, **(prefixes or {})}
    dest.mkdir(parents=True)
    writer = KpackWriter(dest, scheme=scheme)
    results = []
    try:
        for path in _walk(tree):
            rel = path.relative_to(tree)
            out = dest / rel
            if path.is_symlink():
                out.symlink_to(path.readlink())
            elif path.is_dir():
                out.mkdir()
            elif rel == MANIFEST:
                continue
            elif bundles := _device_code(path):
                stem = path.name.split(".so", 1)[0]
                if stem not in groups:
                    raise ValueError(f"{rel} has device code but no group (groups: {dict(groups)})")
                group = groups[stem]
                prefix = prefixes.get(stem, f"{group}/stage")
                results.append(
                    writer.add_library(
                        path,
                        rel_lib=rel.parent.as_posix(),
                        group=group,
                        source_prefix=prefix,
                        bundles=bundles,
                    )
                )
            else:
                try:
                    os.link(path, out)
                except OSError:
                    shutil.copy2(path, out)
    except BaseException:
        writer.abort()
        raise
    writer.finish()
    _write_manifest(tree, dest)
    return results


def _device_code(path: Path) -> tuple[elf.OffloadBundle, ...]:
    """The offload bundles of an ELF file (none: not ELF, or no device code)."""
    with path.open("rb") as fh:
        if fh.read(4) != elf.ELF_MAGIC:
            return ()
    try:
        return elf.offload_bundles(path)
    except elf.NotElfError:
        return ()


def _walk(tree: Path) -> Iterator[Path]:
    """Everything under ``tree``, folders before their contents, links not followed."""
    for top, dirs, files in os.walk(tree):
        dirs.sort()
        for name in sorted(dirs + files):
            yield Path(top, name)


def _write_manifest(tree: Path, dest: Path) -> None:
    source = tree / MANIFEST
    if source.is_file():
        manifest = json.loads(source.read_text())
    else:
        version = tree / ".info" / "version"
        manifest = {
            "the_rock_commit": "",
            "rocm_version": version.read_text().strip() if version.is_file() else "",
            "submodules": [],
        }
    manifest["flags"] = {**manifest.get("flags", {}), "KPACK_SPLIT_ARTIFACTS": True}
    out = dest / MANIFEST
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(manifest, indent=2) + "\n")
