"""A kpack writer for test fixtures: ROCm libraries split as TheRock ships them since 2026.

TheRock's ``KPACK_SPLIT_ARTIFACTS`` trees hold each HIP library without its device code and the
device code in per-target archives ``<root>/.kpack/<group>_<target-id>.kpack``. This module
makes such trees from ordinary ROCm trees, so that tests can exercise real split libraries
without ROCm's own tool. It follows the layout that tool (rocm-kpack ``split_artifacts``) writes,
step for step, so that the output is byte-identical to the tool's for the same input
(``tests/integration/bundle/test_kpack_writer.py`` checks it against a reference made by the
tool). The steps, as the tool takes them:

1. the ``.rocm_kpack_ref`` section is added unmapped: its MessagePack content, then a new
   ``.shstrtab`` (the old one with the name appended), then a new section header table, each
   appended to the file (the old string table and header table stay behind, unused);
2. the section is mapped by a new read-only PT_LOAD at the first page above every PT_LOAD, its
   content copied to the first file offset congruent to that address; the program header table
   is rewritten where it is if it fits before the first content after it, else moved to the end
   of the file into a PT_LOAD of its own with room for a multiple of 16 entries (a PT_PHDR is
   pointed at it);
3. each ``__CudaFatBinaryWrapper`` (24 bytes in ``.hipFatBinSegment``) gets magic HIPK, its
   pointer's R_X86_64_RELATIVE addend becomes the marker's address (the pointer's own bytes
   0), and reserved1 the index of its code object;
4. the whole pages inside ``.hip_fatbin`` are cut out of the file (everything after moves down by
   a multiple of the page size, so offsets stay congruent to addresses), the section becomes
   NOBITS and its PT_LOAD is split: what comes before it, its unaligned head, a PT_LOAD with no
   file bytes for the rest of it, what comes after it.

Code objects: an archive holds each device entry of each offload bundle as the code object
itself; an entry of a compressed bundle (``CCOB``, clang's ``--offload-compress``) is stored
decompressed, as the tool does (its ``ccob_parser``: the bundle decompressed no further than its
header's total size, then the entry cut out). The TOC key's ``#<index>`` is the bundle's position
(the tool counts code objects per target, the same where every bundle has every target).

Memory stays bounded whatever a library's size (rocSPARSE: 1.3 GB, 111 bundles): the whole pages
of ``.hip_fatbin`` are never read, the code objects are read one bundle at a time and go
straight to the archives' files, whose header and TOC are written last.

Archives: "KPAK", u32 version 1, u64 TOC offset, zeros to offset 64, the code objects, then the
MessagePack TOC. Scheme ``zstd-per-kernel``: u32 count, then per code object (by ordinal) u32
frame size and a zstd frame (level 3); ``none``: the code objects back to back, the TOC's
``blobs`` list giving each one's absolute offset and size.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import struct
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import msgpack
import zstandard

from rocm_build.binary import elf

PAGE = 0x1000
HIPF = 0x48495046  # "FPIH" little-endian: a wrapper of an embedded fat binary
HIPK = 0x4B504948  # "HIPK": a wrapper whose pointer is a kpack marker
WRAPPER_SIZE = 24  # u32 magic, u32 version, u64 pointer, u64 reserved1
MARKER_SECTION = ".rocm_kpack_ref"
WRAPPER_SECTION = ".hipFatBinSegment"
PHDR_STEP = 16  # a moved program header table has room for a multiple of this many entries
ZSTD_LEVEL = 3
ARCHIVE_MAGIC = b"KPAK"
ARCHIVE_VERSION = 1
ARCHIVE_DATA_OFFSET = 64
SCHEMES = ("zstd-per-kernel", "none")
_READ_STEP = 16 << 20  # bytes read (or a bundle's entries decompressed) at a time

PT_LOAD, PT_INTERP, PT_PHDR = 1, 3, 6
PF_R = 4
SHT_NULL, SHT_PROGBITS, SHT_RELA, SHT_NOBITS = 0, 1, 4, 8
SHF_ALLOC = 2
R_X86_64_RELATIVE = 8
EM_X86_64 = 62

_EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_RELA = struct.Struct("<QQq")

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


def _round_up(value: int, step: int = PAGE) -> int:
    return -(-value // step) * step


def _round_down(value: int, step: int = PAGE) -> int:
    return value // step * step


def _congruent_at_or_after(offset: int, vaddr: int) -> int:
    """The first file offset at or after ``offset`` that is congruent to ``vaddr`` (a page)."""
    return offset + (vaddr - offset) % PAGE


def _fatbin_pages(shdrs: list[_Shdr], names: list[str]) -> tuple[int, int]:
    """The file offset and size of the whole pages inside ``.hip_fatbin``, which step 4 cuts
    out of the file ((0, 0): none, or no such section with file bytes)."""
    for shdr, name in zip(shdrs, names, strict=True):
        if name == elf.FATBIN_SECTION and shdr.type == SHT_PROGBITS:
            start, end = _round_up(shdr.addr), _round_down(shdr.addr + shdr.size)
            if start < end:
                return shdr.offset + start - shdr.addr, end - start
    return 0, 0


@dataclass
class _Phdr:
    type: int
    flags: int
    offset: int
    vaddr: int
    paddr: int
    filesz: int
    memsz: int
    align: int

    def pack(self) -> bytes:
        return _PHDR.pack(*astuple(self))

    def holds_vaddr(self, vaddr: int) -> bool:
        return self.vaddr <= vaddr < self.vaddr + self.memsz


@dataclass
class _Shdr:
    name: int
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int

    def pack(self) -> bytes:
        return _SHDR.pack(*astuple(self))


@dataclass
class _Image:
    """An ELF64 little-endian file being edited: its bytes and its three header tables, which
    are written back (at ``phoff`` and ``shoff``) by :meth:`finish`.

    Offsets are the input file's until :meth:`cut` (step 4), which removes ``hole`` bytes at
    ``hole_at``: the whole pages of ``.hip_fatbin``. Those bytes are never read (``data`` holds
    the file without them), so a 1.3 GB library costs its host part in memory, not its size."""

    data: bytearray  # the file's bytes, less the hole
    ident: bytes
    fields: list[int]  # e_type .. e_shstrndx as in the file (phoff, shoff, counts rewritten)
    phoff: int
    shoff: int
    phdrs: list[_Phdr]
    shdrs: list[_Shdr]
    names: list[str] = field(default_factory=list)
    hole_at: int = 0
    hole: int = 0

    @classmethod
    def parse(cls, path: Path, shown: str) -> _Image:
        """Read the headers, then the file less the whole pages of its ``.hip_fatbin``."""
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size

            def read(offset: int, count: int) -> bytes:
                if offset + count > size:
                    raise ValueError(f"{shown}: a header table lies past the end of the file")
                return os.pread(fh.fileno(), count, offset)

            head = read(0, min(size, _EHDR.size))
            if head[:4] != elf.ELF_MAGIC:
                raise ValueError(f"{shown}: not an ELF file")
            if head[4] != 2 or head[5] != 1:
                raise ValueError(
                    f"{shown}: only 64-bit little-endian ELF files can be split (EI_CLASS "
                    f"{head[4]}, EI_DATA {head[5]})"
                )
            ident, e_type, machine, version, entry, phoff, shoff, flags, ehsize, phentsize, \
                phnum, shentsize, shnum, shstrndx = _EHDR.unpack_from(head, 0)  # fmt: skip
            if machine != EM_X86_64:
                raise ValueError(f"{shown}: machine {machine} is not x86-64 (62)")
            if phentsize != _PHDR.size or shentsize != _SHDR.size or shnum == 0:
                raise ValueError(f"{shown}: unusual header tables (or none): cannot split it")
            table = read(phoff, phnum * _PHDR.size)
            phdrs = [_Phdr(*_PHDR.unpack_from(table, i * _PHDR.size)) for i in range(phnum)]
            table = read(shoff, shnum * _SHDR.size)
            shdrs = [_Shdr(*_SHDR.unpack_from(table, i * _SHDR.size)) for i in range(shnum)]
            strtab = shdrs[shstrndx]
            table = read(strtab.offset, strtab.size)
            names = [table[s.name : table.index(b"\0", s.name)].decode() for s in shdrs]
            if any(p.type == PT_INTERP for p in phdrs):
                # the tool also pins a moved program header table of a program to vaddr == offset
                raise ValueError(f"{shown}: a program (PT_INTERP), not a library: not split here")
            hole_at, hole = _fatbin_pages(shdrs, names)
            data = bytearray(size - hole)
            view = memoryview(data)
            for start, end in ((0, hole_at), (hole_at + hole, size)):
                fh.seek(start)
                into = start if start < hole_at else start - hole
                while start < end:
                    got = fh.readinto(view[into : into + min(_READ_STEP, end - start)])
                    if not got:
                        raise ValueError(f"{shown}: the file ended at {start} while being read")
                    start, into = start + got, into + got
        return cls(
            data,
            ident,
            [e_type, machine, version, entry, flags, ehsize, phentsize, shentsize, shstrndx],
            phoff,
            shoff,
            phdrs,
            shdrs,
            names,
            hole_at,
            hole,
        )

    def at(self, offset: int, size: int = 0) -> int:
        """Where the file's bytes [offset, offset + size) are in :attr:`data`."""
        if offset < self.hole_at:
            if offset + size > self.hole_at:
                raise ValueError(f"bytes at {offset}+{size} reach into .hip_fatbin's pages")
            return offset
        if offset < self.hole_at + self.hole:
            raise ValueError(f"bytes at {offset} lie in .hip_fatbin's pages, never read")
        return offset - self.hole

    def read(self, offset: int, size: int) -> bytes:
        at = self.at(offset, size)
        return bytes(self.data[at : at + size])

    def size(self) -> int:
        """The file's size (in the input's offsets until the cut)."""
        return len(self.data) + self.hole

    def cut(self, at: int, size: int) -> None:
        """Remove the bytes [at, at + size): exactly the hole (never read, so nothing to do)."""
        if (at, size) != (self.hole_at, self.hole):
            raise AssertionError(f"cut {at}+{size} is not the hole {self.hole_at}+{self.hole}")
        self.hole = 0

    def section(self, name: str) -> tuple[int, _Shdr] | None:
        for index, (shdr, shown) in enumerate(zip(self.shdrs, self.names, strict=True)):
            if shown == name:
                return index, shdr
        return None

    def loads(self) -> list[_Phdr]:
        return [p for p in self.phdrs if p.type == PT_LOAD]

    def top_of_memory(self) -> int:
        return _round_up(max(p.vaddr + p.memsz for p in self.loads()))

    def append(self, blob: bytes) -> int:
        offset = self.size()
        self.data += blob
        return offset

    def pad_to(self, offset: int) -> None:
        self.data += bytes(offset - self.size())

    def first_content_after_phdrs(self) -> int:
        """Where the program header table's room ends: the first section or PT_LOAD with file
        bytes after its start (the end of the file if none)."""
        ends = [self.size()]
        ends += [s.offset for s in self.shdrs if s.type != SHT_NULL and s.offset > self.phoff]
        ends += [p.offset for p in self.loads() if p.filesz > 0 and p.offset > self.phoff]
        return min(ends)

    def place_phdrs(self) -> None:
        """Keep the program header table where it is if the entries fit, else move it to the
        end of the file, into a PT_LOAD of its own (and point a PT_PHDR at it)."""
        needed = len(self.phdrs) * _PHDR.size
        if needed <= self.first_content_after_phdrs() - self.phoff:
            for p in self.phdrs:
                if p.type == PT_PHDR:  # the table grew in place (the tool leaves it short)
                    p.filesz = p.memsz = max(p.filesz, needed)
            return
        vaddr = self.top_of_memory()
        offset = _congruent_at_or_after(self.size(), vaddr)
        self.pad_to(offset)
        room = _round_up(len(self.phdrs) + 1, PHDR_STEP) * _PHDR.size
        for p in self.phdrs:
            if p.type == PT_PHDR:
                p.offset, p.vaddr, p.paddr, p.filesz, p.memsz = offset, vaddr, vaddr, room, room
        self.phdrs.append(_Phdr(PT_LOAD, PF_R, offset, vaddr, vaddr, room, room, PAGE))
        self.append(bytes(room))  # the entries are written by finish()
        self.phoff = offset

    def finish(self) -> bytearray:
        """The edited file (after the cut: no hole left)."""
        assert self.hole == 0
        e_type, machine, version, entry, flags, ehsize, phentsize, shentsize, shstrndx = self.fields
        header = _EHDR.pack(
            self.ident, e_type, machine, version, entry, self.phoff, self.shoff, flags, ehsize,
            phentsize, len(self.phdrs), shentsize, len(self.shdrs), shstrndx,
        )  # fmt: skip
        self.data[: _EHDR.size] = header
        table = b"".join(p.pack() for p in self.phdrs)
        self.data[self.phoff : self.phoff + len(table)] = table
        table = b"".join(s.pack() for s in self.shdrs)
        self.data[self.shoff : self.shoff + len(table)] = table
        return self.data


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
        self.tmp = path.with_name(f".{path.name}.tmp")
        self.fh = self.tmp.open("wb")
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
        kernel_name = f"{source_prefix.strip('/')}/{rel_lib}/{src.name}"
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
                    archive.add(f"{kernel_name}#{index}", code, meta)
                    objects.append(CodeObject(index, target, entry.bundle_id, len(code)))
        return SplitResult(out, kernel_name, marker, marker_vaddr, tuple(objects))

    def finish(self) -> list[Path]:
        """Put the archives in place; their paths."""
        self._finished = True
        return [archive.close() for _key, archive in sorted(self._archives.items())]

    def abort(self) -> None:
        """Remove the archives' temporary files (after a failure)."""
        self._finished = True
        for archive in self._archives.values():
            archive.abort()


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


def split_elf(
    src: Path, marker: bytes, bundles: tuple[elf.OffloadBundle, ...], shown: str
) -> tuple[bytearray, int]:
    """The host library of the ELF file ``src`` (whose offload bundles are ``bundles``) with
    the kpack marker ``marker``, and the marker's address. The whole pages of ``.hip_fatbin``
    are never read."""
    image = _Image.parse(src, shown)
    fatbin_at = image.section(elf.FATBIN_SECTION)
    wrappers_at = image.section(WRAPPER_SECTION)
    if fatbin_at is None or fatbin_at[1].type != SHT_PROGBITS:
        raise ValueError(f"{shown}: no {elf.FATBIN_SECTION} section with device code")
    if wrappers_at is None or wrappers_at[1].type != SHT_PROGBITS:
        raise ValueError(f"{shown}: no {WRAPPER_SECTION} section (no fat binary wrappers)")
    if image.section(MARKER_SECTION) is not None:
        raise ValueError(f"{shown}: already has a {MARKER_SECTION} section")
    fatbin, wrappers = fatbin_at[1], wrappers_at[1]
    if wrappers.size % WRAPPER_SIZE or wrappers.size // WRAPPER_SIZE != len(bundles):
        raise ValueError(
            f"{shown}: {WRAPPER_SECTION} holds {wrappers.size / WRAPPER_SIZE:g} wrappers for "
            f"{len(bundles)} offload bundles: cannot tell which code object is whose"
        )
    relocs = _wrapper_relocations(image, wrappers, shown)
    for index, bundle in enumerate(bundles):
        (magic,) = struct.unpack_from("<I", image.read(wrappers.offset + index * WRAPPER_SIZE, 4))
        points_at = fatbin.addr + bundle.file_offset - fatbin.offset
        if magic != HIPF:
            raise ValueError(f"{shown}: wrapper {index} has magic {magic:#x}, not HIPF")
        if relocs[index][1] != points_at:
            raise ValueError(
                f"{shown}: wrapper {index} points at {relocs[index][1]:#x}, not at offload "
                f"bundle {index} ({points_at:#x})"
            )
    _check_layout(image, fatbin, shown)

    # 1. the marker section, unmapped: content, a longer .shstrtab, a new section header table
    content_at = image.append(marker)
    shstrndx = image.fields[-1]
    strtab = image.shdrs[shstrndx]
    names = image.read(strtab.offset, strtab.size)
    strtab.offset = image.append(names + MARKER_SECTION.encode() + b"\0")
    strtab.size = len(names) + len(MARKER_SECTION) + 1
    section = _Shdr(len(names), SHT_PROGBITS, 0, 0, content_at, len(marker), 0, 0, 1, 0)
    image.shdrs.append(section)
    image.names.append(MARKER_SECTION)
    image.shoff = image.append(bytes(len(image.shdrs) * _SHDR.size))

    # 2. map it: a PT_LOAD of its own at the first page above all others
    vaddr = image.top_of_memory()
    if content_at % PAGE != vaddr % PAGE:
        image.pad_to(_congruent_at_or_after(image.size(), vaddr))
        content_at = image.append(marker)
    image.phdrs.append(
        _Phdr(PT_LOAD, PF_R, content_at, vaddr, vaddr, len(marker), len(marker), PAGE)
    )
    image.place_phdrs()
    section.flags |= SHF_ALLOC
    section.addr, section.offset = vaddr, content_at

    # 3. the wrappers: HIPK, pointing at the marker, reserved1 = their code object's index
    for index, (rela_at, _addend) in enumerate(relocs):
        at = image.at(wrappers.offset + index * WRAPPER_SIZE, WRAPPER_SIZE)
        version = struct.unpack_from("<I", image.data, at + 4)[0]
        struct.pack_into("<IIQQ", image.data, at, HIPK, version, 0, index)
        at = image.at(rela_at, _RELA.size)
        offset, info, _old = _RELA.unpack_from(image.data, at)
        _RELA.pack_into(image.data, at, offset, info, vaddr)

    # 4. cut the whole pages of .hip_fatbin out of the file
    _cut_fatbin(image, fatbin)
    return image.finish(), vaddr


def _wrapper_relocations(image: _Image, wrappers: _Shdr, shown: str) -> list[tuple[int, int]]:
    """Per wrapper: the file offset of the R_X86_64_RELATIVE relocation of its pointer and
    that relocation's addend (the pointer's value)."""
    wanted = {wrappers.addr + i * WRAPPER_SIZE + 8: i for i in range(wrappers.size // WRAPPER_SIZE)}
    found: dict[int, tuple[int, int]] = {}
    for shdr in image.shdrs:
        if shdr.type != SHT_RELA:
            continue
        step = shdr.entsize or _RELA.size
        for at in range(shdr.offset, shdr.offset + shdr.size, step):
            offset, info, addend = _RELA.unpack_from(image.data, image.at(at, _RELA.size))
            if offset in wanted:
                if info & 0xFFFFFFFF != R_X86_64_RELATIVE:
                    raise ValueError(
                        f"{shown}: the pointer of wrapper {wanted[offset]} has relocation type "
                        f"{info & 0xFFFFFFFF}, not R_X86_64_RELATIVE"
                    )
                found[wanted[offset]] = (at, addend)
    missing = sorted(set(wanted.values()) - set(found))
    if missing:
        raise ValueError(f"{shown}: no RELA relocation for the pointer of wrappers {missing}")
    return [found[i] for i in range(len(wanted))]


def _check_layout(image: _Image, fatbin: _Shdr, shown: str) -> None:
    loads = image.loads()
    if any(a.vaddr > b.vaddr for a, b in itertools.pairwise(loads)):
        raise ValueError(f"{shown}: its PT_LOADs are not in ascending address order")
    holder = [p for p in loads if p.holds_vaddr(fatbin.addr)]
    if len(holder) != 1:
        raise ValueError(f"{shown}: {elf.FATBIN_SECTION} is not in exactly one PT_LOAD")
    seg = holder[0]
    inside = fatbin.addr + fatbin.size <= seg.vaddr + seg.filesz
    if not inside or fatbin.offset - seg.offset != fatbin.addr - seg.vaddr:
        raise ValueError(f"{shown}: {elf.FATBIN_SECTION} is not mapped from its file bytes")


def _cut_fatbin(image: _Image, fatbin: _Shdr) -> None:
    start, end = _round_up(fatbin.addr), _round_down(fatbin.addr + fatbin.size)
    if start >= end:
        return  # no whole page: the tool leaves the section as it is
    cut_at = fatbin.offset + start - fatbin.addr
    cut = end - start
    image.cut(cut_at, cut)
    fat_end = fatbin.addr + fatbin.size
    new: list[_Phdr] = []
    for p in image.phdrs:
        if not (p.type == PT_LOAD and p.holds_vaddr(fatbin.addr)):
            if p.offset > cut_at:
                p.offset -= cut
            new.append(p)
            continue

        def part(offset: int, vaddr: int, filesz: int, memsz: int, p: _Phdr = p) -> _Phdr:
            return _Phdr(PT_LOAD, p.flags, offset, vaddr, vaddr, filesz, memsz, p.align)

        if p.vaddr < fatbin.addr:
            size = fatbin.addr - p.vaddr
            new.append(part(p.offset, p.vaddr, min(size, p.filesz), size))
        if fatbin.addr < start:
            new.append(part(fatbin.offset, fatbin.addr, start - fatbin.addr, start - fatbin.addr))
        new.append(part(cut_at, start, 0, fat_end - start))
        after = p.offset + p.filesz - (fatbin.offset + fatbin.size)
        if fat_end < p.vaddr + p.memsz and after > 0:
            new.append(
                part(fatbin.offset + fatbin.size - cut, fat_end, after, p.vaddr + p.memsz - fat_end)
            )
    image.phdrs = new
    if image.shoff > cut_at:
        image.shoff -= cut
    if image.phoff > cut_at:
        image.phoff -= cut
    image.place_phdrs()
    for s in image.shdrs:
        if s is fatbin:
            s.type = SHT_NOBITS
        elif s.offset > cut_at:
            s.offset -= cut


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


def _write(path: Path, data: bytes | bytearray, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.chmod(mode)
    os.replace(tmp, path)


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
