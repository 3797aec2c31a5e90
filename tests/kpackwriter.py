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
from collections.abc import Iterator, Mapping
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import Any

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
    are written back (at ``phoff`` and ``shoff``) by :meth:`finish`."""

    data: bytearray
    ident: bytes
    fields: list[int]  # e_type .. e_shstrndx as in the file (phoff, shoff, counts rewritten)
    phoff: int
    shoff: int
    phdrs: list[_Phdr]
    shdrs: list[_Shdr]
    names: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, data: bytes, shown: str) -> _Image:
        if data[:4] != elf.ELF_MAGIC:
            raise ValueError(f"{shown}: not an ELF file")
        if data[4] != 2 or data[5] != 1:
            raise ValueError(
                f"{shown}: only 64-bit little-endian ELF files can be split (EI_CLASS {data[4]}, "
                f"EI_DATA {data[5]})"
            )
        ident, e_type, machine, version, entry, phoff, shoff, flags, ehsize, phentsize, phnum, \
            shentsize, shnum, shstrndx = _EHDR.unpack_from(data, 0)  # fmt: skip
        if machine != EM_X86_64:
            raise ValueError(f"{shown}: machine {machine} is not x86-64 (62)")
        if phentsize != _PHDR.size or shentsize != _SHDR.size or shnum == 0:
            raise ValueError(f"{shown}: unusual header tables (or none): cannot split it")
        phdrs = [_Phdr(*_PHDR.unpack_from(data, phoff + i * _PHDR.size)) for i in range(phnum)]
        shdrs = [_Shdr(*_SHDR.unpack_from(data, shoff + i * _SHDR.size)) for i in range(shnum)]
        image = cls(
            bytearray(data),
            ident,
            [e_type, machine, version, entry, flags, ehsize, phentsize, shentsize, shstrndx],
            phoff,
            shoff,
            phdrs,
            shdrs,
        )
        strtab = shdrs[shstrndx]
        table = data[strtab.offset : strtab.offset + strtab.size]
        image.names = [table[s.name : table.index(b"\0", s.name)].decode() for s in shdrs]
        if any(p.type == PT_INTERP for p in phdrs):
            # the tool also pins a moved program header table of a program to vaddr == offset
            raise ValueError(f"{shown}: a program (PT_INTERP), not a library: not split here")
        return image

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
        offset = len(self.data)
        self.data += blob
        return offset

    def pad_to(self, offset: int) -> None:
        self.data += bytes(offset - len(self.data))

    def first_content_after_phdrs(self) -> int:
        """Where the program header table's room ends: the first section or PT_LOAD with file
        bytes after its start (the end of the file if none)."""
        ends = [len(self.data)]
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
        offset = _congruent_at_or_after(len(self.data), vaddr)
        self.pad_to(offset)
        room = _round_up(len(self.phdrs) + 1, PHDR_STEP) * _PHDR.size
        for p in self.phdrs:
            if p.type == PT_PHDR:
                p.offset, p.vaddr, p.paddr, p.filesz, p.memsz = offset, vaddr, vaddr, room, room
        self.phdrs.append(_Phdr(PT_LOAD, PF_R, offset, vaddr, vaddr, room, room, PAGE))
        self.append(bytes(room))  # the entries are written by finish()
        self.phoff = offset

    def finish(self) -> bytes:
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
        return bytes(self.data)


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


@dataclass
class _Archive:
    group: str
    target: str
    scheme: str
    toc: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    pieces: list[bytes] = field(default_factory=list)  # by ordinal: frames, or code objects

    def add(self, key: str, data: bytes, metadata: dict[str, str]) -> None:
        entries = self.toc.setdefault(key, {})
        if self.target in entries:
            raise ValueError(f"{key} has two code objects for {self.target}")
        entries[self.target] = {
            "type": "hsaco",
            "ordinal": len(self.pieces),
            "original_size": len(data),
            "metadata": metadata,
        }
        if self.scheme == "none":
            self.pieces.append(data)
        else:
            self.pieces.append(zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data))

    def encode(self) -> bytes:
        start = ARCHIVE_DATA_OFFSET
        meta: dict[str, Any] = {"compression_scheme": self.scheme}
        if self.scheme == "none":
            blob = b"".join(self.pieces)
            offsets = [
                start + sum(len(p) for p in self.pieces[:i]) for i in range(len(self.pieces))
            ]
            meta["blobs"] = [
                {"offset": o, "size": len(p)} for o, p in zip(offsets, self.pieces, strict=True)
            ]
        else:
            parts = [struct.pack("<I", len(self.pieces))]
            for frame in self.pieces:
                parts += [struct.pack("<I", len(frame)), frame]
            blob = b"".join(parts)
            meta |= {"zstd_offset": start, "zstd_size": len(blob)}
        toc = {
            "format_version": ARCHIVE_VERSION,
            "group_name": self.group,
            "gfx_arch_family": self.target,
            "gfx_arches": [self.target],
            "toc": self.toc,
            **meta,
        }
        head = struct.pack("<4sIQ", ARCHIVE_MAGIC, ARCHIVE_VERSION, start + len(blob))
        packed: bytes = msgpack.packb(toc, use_bin_type=True)
        return head + bytes(start - len(head)) + blob + packed


def archive_name(group: str, target: str) -> str:
    return f"{group}_{target}.kpack"


class KpackWriter:
    """Splits libraries into host libraries under ``dest_root`` and code objects gathered per
    (group, target) into ``dest_root/.kpack/<group>_<target>.kpack``, written by :meth:`finish`
    (libraries of one group share their archives). Archives that already exist are refused:
    one writer makes a group's archives."""

    def __init__(self, dest_root: Path, *, scheme: str = "zstd-per-kernel") -> None:
        if scheme not in SCHEMES:
            raise ValueError(f"unknown compression scheme {scheme!r} (known: {SCHEMES})")
        self.dest_root = dest_root
        self.scheme = scheme
        self._archives: dict[tuple[str, str], _Archive] = {}
        self._finished = False

    def add_library(
        self, src: Path, *, rel_lib: str = "lib", group: str, source_prefix: str
    ) -> SplitResult:
        """Write ``src``'s host library to ``dest_root/rel_lib/<name>`` and keep its code
        objects for the archives."""
        if self._finished:
            raise ValueError("this KpackWriter has written its archives")
        rel_lib = rel_lib.strip("/")
        kernel_name = f"{source_prefix.strip('/')}/{rel_lib}/{src.name}"
        kpack_dir = os.path.relpath(self.dest_root / ".kpack", self.dest_root / rel_lib)
        marker = {
            "kpack_search_paths": [f"{kpack_dir}/{group}_@GFXARCH@.kpack"],
            "kernel_name": kernel_name,
        }
        data = src.read_bytes()
        bundles = elf.offload_bundles(src)
        host, marker_vaddr = split_elf(
            data, msgpack.packb(marker, use_bin_type=True), bundles, str(src)
        )
        objects: list[CodeObject] = []
        for index, bundle in enumerate(bundles):
            payload = _bundle_bytes(data, bundle)
            for entry in bundle.entries:
                target = elf.target_id_of_bundle_id(entry.bundle_id)
                if target is None or entry.size == 0:
                    continue  # the host entry
                code = payload[entry.offset : entry.offset + entry.size]
                archive = self._archives.setdefault(
                    (group, target), _Archive(group, target, self.scheme)
                )
                meta = {"target": entry.bundle_id, "source_prefix": source_prefix}
                archive.add(f"{kernel_name}#{index}", code, meta)
                objects.append(CodeObject(index, target, entry.bundle_id, len(code)))
        out = self.dest_root / rel_lib / src.name
        _write(out, host, src.stat().st_mode & 0o7777)
        return SplitResult(out, kernel_name, marker, marker_vaddr, tuple(objects))

    def finish(self) -> list[Path]:
        """Write the archives; their paths."""
        self._finished = True
        written = []
        for (group, target), archive in sorted(self._archives.items()):
            path = self.dest_root / ".kpack" / archive_name(group, target)
            if path.exists():
                raise ValueError(f"{path} exists: one KpackWriter writes a group's archives")
            _write(path, archive.encode(), 0o644)
            written.append(path)
        return written


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
    result = writer.add_library(src, rel_lib=rel_lib, group=group, source_prefix=source_prefix)
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
    for path in _walk(tree):
        rel = path.relative_to(tree)
        out = dest / rel
        if path.is_symlink():
            out.symlink_to(path.readlink())
        elif path.is_dir():
            out.mkdir()
        elif rel == MANIFEST:
            continue
        elif _has_device_code(path):
            stem = path.name.split(".so", 1)[0]
            if stem not in groups:
                raise ValueError(f"{rel} has device code but no group (groups: {dict(groups)})")
            group = groups[stem]
            prefix = prefixes.get(stem, f"{group}/stage")
            results.append(
                writer.add_library(
                    path, rel_lib=rel.parent.as_posix(), group=group, source_prefix=prefix
                )
            )
        else:
            try:
                os.link(path, out)
            except OSError:
                shutil.copy2(path, out)
    writer.finish()
    _write_manifest(tree, dest)
    return results


def split_elf(
    data: bytes, marker: bytes, bundles: tuple[elf.OffloadBundle, ...], shown: str
) -> tuple[bytes, int]:
    """The host library of the ELF file ``data`` (whose offload bundles are ``bundles``) with
    the kpack marker ``marker``, and the marker's address."""
    image = _Image.parse(data, shown)
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
        (magic,) = struct.unpack_from("<I", data, wrappers.offset + index * WRAPPER_SIZE)
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
    names = bytes(image.data[strtab.offset : strtab.offset + strtab.size])
    strtab.offset = image.append(names + MARKER_SECTION.encode() + b"\0")
    strtab.size = len(names) + len(MARKER_SECTION) + 1
    section = _Shdr(len(names), SHT_PROGBITS, 0, 0, content_at, len(marker), 0, 0, 1, 0)
    image.shdrs.append(section)
    image.names.append(MARKER_SECTION)
    image.shoff = image.append(bytes(len(image.shdrs) * _SHDR.size))

    # 2. map it: a PT_LOAD of its own at the first page above all others
    vaddr = image.top_of_memory()
    if content_at % PAGE != vaddr % PAGE:
        image.pad_to(_congruent_at_or_after(len(image.data), vaddr))
        content_at = image.append(marker)
    image.phdrs.append(
        _Phdr(PT_LOAD, PF_R, content_at, vaddr, vaddr, len(marker), len(marker), PAGE)
    )
    image.place_phdrs()
    section.flags |= SHF_ALLOC
    section.addr, section.offset = vaddr, content_at

    # 3. the wrappers: HIPK, pointing at the marker, reserved1 = their code object's index
    for index, (rela_at, _addend) in enumerate(relocs):
        at = wrappers.offset + index * WRAPPER_SIZE
        version = struct.unpack_from("<I", image.data, at + 4)[0]
        struct.pack_into("<IIQQ", image.data, at, HIPK, version, 0, index)
        offset, info, _old = _RELA.unpack_from(image.data, rela_at)
        _RELA.pack_into(image.data, rela_at, offset, info, vaddr)

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
            offset, info, addend = _RELA.unpack_from(image.data, at)
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
    del image.data[cut_at : cut_at + cut]
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


def _bundle_bytes(data: bytes, bundle: elf.OffloadBundle) -> bytes:
    """The uncompressed bundle: its entries' offsets count from its start."""
    raw = data[bundle.file_offset : bundle.file_offset + bundle.size]
    if not bundle.compressed:
        return raw
    head = bundle.ccob
    assert head is not None
    payload = raw[head.payload :]
    if head.method == 1:
        out: bytes = zstandard.ZstdDecompressor().decompressobj().decompress(payload)
    else:
        import zlib

        out = zlib.decompressobj().decompress(payload)
    if len(out) != head.raw_size:
        raise ValueError(f"compressed bundle at {bundle.file_offset} did not decompress whole")
    return out


def _has_device_code(path: Path) -> bool:
    with path.open("rb") as fh:
        if fh.read(4) != elf.ELF_MAGIC:
            return False
    try:
        return bool(elf.offload_bundles(path))
    except elf.NotElfError:
        return False


def _walk(tree: Path) -> Iterator[Path]:
    """Everything under ``tree``, folders before their contents, links not followed."""
    for top, dirs, files in os.walk(tree):
        dirs.sort()
        for name in sorted(dirs + files):
            yield Path(top, name)


def _write(path: Path, data: bytes, mode: int) -> None:
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
