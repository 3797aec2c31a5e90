"""kpack archives: a kpack-split library's code objects gathered per (group, target) into
``<root>/.kpack/<group>_<target-id>.kpack``, as ROCm's own tool writes them (``kpacksplit``
makes the host library).

Code objects: an archive holds each device entry of each offload bundle as the code object
itself; an entry of a compressed bundle (``CCOB``, clang's ``--offload-compress``) is stored
decompressed, as the tool does (its ``ccob_parser``: the bundle decompressed no further than its
header's total size, then the entry cut out). The TOC key's ``#<index>`` is the bundle's position
(the tool counts code objects per target, the same where every bundle has every target).

Archives: "KPAK", u32 version 1, u64 TOC offset, zeros to offset 64, the code objects, then the
MessagePack TOC. Scheme ``zstd-per-kernel``: u32 count, then per code object (by ordinal) u32
frame size and a zstd frame (level 3); ``none``: the code objects back to back, the TOC's
``blobs`` list giving each one's absolute offset and size. Code objects go to the archives'
files as they are read, one bundle at a time; the header and TOC are written last.
"""

from __future__ import annotations

import os
import struct
import tempfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import msgpack  # type: ignore[import-untyped]
import zstandard

from rocm_build.binary import elf
from rocm_build.binary.kpacksplit import split_elf

__all__ = [
    "SCHEMES",
    "CodeObject",
    "KpackWriter",
    "SplitResult",
    "archive_name",
    "code_objects",
    "decompress_bundle",
]

ZSTD_LEVEL = 3
ARCHIVE_MAGIC = b"KPAK"
ARCHIVE_VERSION = 1
ARCHIVE_DATA_OFFSET = 64
SCHEMES = ("zstd-per-kernel", "none")
_READ_STEP = 16 << 20  # bytes read (or a bundle's entries decompressed) at a time


@dataclass(frozen=True)
class CodeObject:
    """One target's code object of one bundle, as it went into an archive."""

    index: int  # the bundle's (and its wrapper's) position: the ``#<index>`` of its TOC key
    target: str  # the target id, features kept: ``gfx90a:xnack-``
    bundle_id: str  # ``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-``
    size: int


@dataclass(frozen=True)
class SplitResult:
    library: Path  # the host library written
    kernel_name: str  # ``<source_prefix>/<rel_lib>/<name>``: the TOC keys' stem
    marker: Mapping[str, Any]  # what ``.rocm_kpack_ref`` holds
    marker_vaddr: int
    code_objects: tuple[CodeObject, ...]

    @property
    def archive_names(self) -> frozenset[str]:
        group = self.marker["kpack_search_paths"][0].rsplit("/", 1)[1]
        return frozenset(group.replace("@GFXARCH@", c.target) for c in self.code_objects)


class _Archive:
    """One archive being written: its code objects go to a temporary file as they come (so a
    gigabyte of device code is never held in memory), its table of contents is kept and written
    last, with the header, by :meth:`close`."""

    def __init__(self, path: Path, group: str, target: str, scheme: str) -> None:
        if path.exists():
            raise ValueError(f"{path} exists: one KpackWriter writes a group's archives")
        self.path, self.group, self.target, self.scheme = path, group, target, scheme
        self.toc: dict[str, dict[str, dict[str, Any]]] = {}
        self.blobs: list[dict[str, int]] = []  # scheme "none": each code object's place
        self.count = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        self.tmp = Path(tmp)  # a new name (O_EXCL): never a file or link planted beforehand
        self.fh = os.fdopen(fd, "wb")
        self.fh.write(bytes(ARCHIVE_DATA_OFFSET + (0 if scheme == "none" else 4)))

    def add(self, key: str, data: bytes, metadata: dict[str, str]) -> None:
        entries = self.toc.setdefault(key, {})
        if self.target in entries:
            raise ValueError(f"{key} has two code objects for {self.target}")
        entries[self.target] = {
            "type": "hsaco",
            "ordinal": self.count,
            "original_size": len(data),
            "metadata": metadata,
        }
        self.count += 1
        if self.scheme == "none":
            self.blobs.append({"offset": self.fh.tell(), "size": len(data)})
            self.fh.write(data)
        else:
            frame = zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
            self.fh.write(struct.pack("<I", len(frame)))
            self.fh.write(frame)

    def close(self) -> Path:
        """Write the table of contents and the header; put the archive in place."""
        start, end = ARCHIVE_DATA_OFFSET, self.fh.tell()
        meta: dict[str, Any] = {"compression_scheme": self.scheme}
        if self.scheme == "none":
            meta["blobs"] = self.blobs
        else:
            meta |= {"zstd_offset": start, "zstd_size": end - start}
        toc = {
            "format_version": ARCHIVE_VERSION,
            "group_name": self.group,
            "gfx_arch_family": self.target,
            "gfx_arches": [self.target],
            "toc": self.toc,
            **meta,
        }
        self.fh.write(msgpack.packb(toc, use_bin_type=True))
        self.fh.seek(0)
        self.fh.write(struct.pack("<4sIQ", ARCHIVE_MAGIC, ARCHIVE_VERSION, end))
        if self.scheme != "none":
            self.fh.seek(start)
            self.fh.write(struct.pack("<I", self.count))
        self.fh.close()
        self.tmp.chmod(0o644)
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        self.fh.close()
        self.tmp.unlink(missing_ok=True)


def archive_name(group: str, target: str) -> str:
    return f"{group}_{target}.kpack"


class KpackWriter:
    """Splits libraries into host libraries under ``dest_root`` and code objects gathered per
    (group, target) into ``dest_root/.kpack/<group>_<target>.kpack``, put in place by
    :meth:`finish` (libraries of one group share their archives). Archives that already exist
    are refused: one writer makes a group's archives.

    Memory stays bounded whatever the libraries' size: a library's host part is read (never
    the whole pages of its ``.hip_fatbin``), its code objects are read one bundle at a time
    (a compressed bundle decompressed whole, as ROCm's tool does) and go straight to the
    archives' files."""

    def __init__(self, dest_root: Path, *, scheme: str = "zstd-per-kernel") -> None:
        if scheme not in SCHEMES:
            raise ValueError(f"unknown compression scheme {scheme!r} (known: {SCHEMES})")
        self.dest_root = dest_root
        self.scheme = scheme
        self._archives: dict[tuple[str, str], _Archive] = {}
        self._finished = False
        #: code objects given to the archives so far (a failed library that wrote none left
        #: them as they were)
        self.written = 0

    def add_library(
        self,
        src: Path,
        *,
        rel_lib: str = "lib",
        group: str,
        source_prefix: str,
        bundles: tuple[elf.OffloadBundle, ...] | None = None,
    ) -> SplitResult:
        """Write ``src``'s host library to ``dest_root/rel_lib/<name>`` and its code objects
        to the archives (``bundles``: its offload bundles, if already read)."""
        if self._finished:
            raise ValueError("this KpackWriter has written its archives")
        rel_lib = rel_lib.strip("/")
        # a library at dest_root itself (rel_lib ""): its kernel name and marker skip the folder
        folder = f"{rel_lib}/" if rel_lib else ""
        kernel_name = f"{source_prefix.strip('/')}/{folder}{src.name}"
        kpack_dir = os.path.relpath(self.dest_root / ".kpack", self.dest_root / rel_lib)
        marker = {
            "kpack_search_paths": [f"{kpack_dir}/{group}_@GFXARCH@.kpack"],
            "kernel_name": kernel_name,
        }
        if bundles is None:
            bundles = elf.offload_bundles(src)
        host, marker_vaddr = split_elf(
            src, msgpack.packb(marker, use_bin_type=True), bundles, str(src)
        )
        out = self.dest_root / rel_lib / src.name
        _write(out, host, src.stat().st_mode & 0o7777)
        del host
        objects = self._add_code_objects(src, bundles, group, kernel_name, source_prefix)
        return SplitResult(out, kernel_name, marker, marker_vaddr, tuple(objects))

    def _add_code_objects(
        self,
        src: Path,
        bundles: tuple[elf.OffloadBundle, ...],
        group: str,
        kernel_name: str,
        source_prefix: str,
    ) -> list[CodeObject]:
        objects: list[CodeObject] = []
        with src.open("rb") as fh:
            for index, bundle in enumerate(bundles):
                for entry, code in code_objects(fh, bundle, str(src)):
                    target = elf.target_id_of_bundle_id(entry.bundle_id)
                    assert target is not None
                    archive = self._archives.get((group, target))
                    if archive is None:
                        path = self.dest_root / ".kpack" / archive_name(group, target)
                        archive = _Archive(path, group, target, self.scheme)
                        self._archives[group, target] = archive
                    meta = {"target": entry.bundle_id, "source_prefix": source_prefix}
                    self.written += 1
                    archive.add(f"{kernel_name}#{index}", code, meta)
                    objects.append(CodeObject(index, target, entry.bundle_id, len(code)))
        return objects

    def finish(self) -> list[Path]:
        """Put the archives in place; their paths."""
        self._finished = True
        return [archive.close() for _key, archive in sorted(self._archives.items())]

    def abort(self) -> None:
        """Remove the archives' temporary files (after a failure)."""
        self._finished = True
        for archive in self._archives.values():
            archive.abort()


def code_objects(
    fh: BinaryIO, bundle: elf.OffloadBundle, shown: str
) -> Iterator[tuple[elf.OffloadEntry, bytes]]:
    """The device entries of ``bundle`` (in the file ``fh``) and their code objects, as ROCm's
    tool takes them: an uncompressed bundle's entries as they lie in the file; a compressed
    bundle (``CCOB``) decompressed whole, no further than its total size says, and its entries
    cut from the result (the tool's ``ccob_parser``; it takes only zstd, method 1, where this
    also takes zlib). The host entry (no target, or empty) is left out."""
    device = [e for e in bundle.entries if elf.target_id_of_bundle_id(e.bundle_id) and e.size > 0]
    if not bundle.compressed:
        for entry in device:
            code = os.pread(fh.fileno(), entry.size, bundle.file_offset + entry.offset)
            if len(code) != entry.size:
                raise ValueError(
                    f"{shown}: {entry.bundle_id} of the bundle at "
                    f"{bundle.file_offset} lies past the end of the file"
                )
            yield entry, code
        return
    inner = decompress_bundle(fh, bundle, shown)
    for entry in device:
        if entry.offset + entry.size > len(inner):
            raise ValueError(
                f"{shown}: {entry.bundle_id} lies past the end of the compressed bundle at "
                f"{bundle.file_offset} ({len(inner)} bytes decompressed)"
            )
        yield entry, bytes(inner[entry.offset : entry.offset + entry.size])


def decompress_bundle(fh: BinaryIO, bundle: elf.OffloadBundle, shown: str) -> bytearray:
    """The uncompressed bundle a compressed one (``CCOB``) holds, read in steps."""
    head = bundle.ccob
    assert head is not None
    if head.method == 1:
        dobj: Any = zstandard.ZstdDecompressor().decompressobj()
    else:
        dobj = zlib.decompressobj()
    out = bytearray()
    pos, end = bundle.file_offset + head.payload, bundle.file_offset + bundle.size
    while pos < end and not dobj.eof:
        block = os.pread(fh.fileno(), min(_READ_STEP, end - pos), pos)
        if not block:
            break
        pos += len(block)
        out += dobj.decompress(block)
        if len(out) > head.raw_size:
            break
    if len(out) != head.raw_size:
        raise ValueError(
            f"{shown}: the compressed bundle at {bundle.file_offset} decompressed to "
            f"{len(out)} bytes, its header says {head.raw_size}"
        )
    return out


def _write(path: Path, data: bytes | bytearray, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        tmp.chmod(mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
