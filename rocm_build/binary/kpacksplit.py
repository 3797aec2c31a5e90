"""kpack-splitting an ELF library: the host library without its device code, with a
``.rocm_kpack_ref`` marker (``kpackwrite`` writes the code objects to archives).

It follows the layout ROCm's own tool (rocm-kpack ``split_artifacts``) writes, step for step, so
that the output is byte-identical to the tool's for the same input (the integration tests check
it against a reference the tool made). The steps, as the tool takes them:

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

Memory stays bounded whatever a library's size (rocSPARSE: 1.3 GB): the whole pages of
``.hip_fatbin`` are never read. Only x86-64 shared libraries (not programs) are split; anything
else is a ``ValueError`` naming the file.
"""

from __future__ import annotations

import io
import itertools
import os
import struct
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import BinaryIO

from rocm_build.binary import elf

__all__ = ["HIPF", "HIPK", "MARKER_SECTION", "PAGE", "WRAPPER_SECTION", "split_elf"]

PAGE = 0x1000
HIPF = 0x48495046  # "FPIH" little-endian: a wrapper of an embedded fat binary
HIPK = 0x4B504948  # "HIPK": a wrapper whose pointer is a kpack marker
WRAPPER_SIZE = 24  # u32 magic, u32 version, u64 pointer, u64 reserved1
MARKER_SECTION = ".rocm_kpack_ref"
WRAPPER_SECTION = ".hipFatBinSegment"
PHDR_STEP = 16  # a moved program header table has room for a multiple of this many entries
_READ_STEP = 16 << 20  # bytes read at a time

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
            head = _read_at(fh, size, 0, min(size, _EHDR.size), shown)
            if head[:4] != elf.ELF_MAGIC:
                raise ValueError(f"{shown}: not an ELF file")
            if head[4] != 2 or head[5] != 1:
                raise ValueError(
                    f"{shown}: only 64-bit little-endian ELF files can be split (EI_CLASS "
                    f"{head[4]}, EI_DATA {head[5]})"
                )
            ehdr = list(_EHDR.unpack_from(head, 0))
            ident, e_type, machine, version, entry, phoff, shoff, flags = ehdr[:8]
            ehsize, phentsize, phnum, shentsize, shnum, shstrndx = ehdr[8:]
            if machine != EM_X86_64:
                raise ValueError(f"{shown}: machine {machine} is not x86-64 (62)")
            if phentsize != _PHDR.size or shentsize != _SHDR.size or shnum == 0:
                raise ValueError(f"{shown}: unusual header tables (or none): cannot split it")
            table = _read_at(fh, size, phoff, phnum * _PHDR.size, shown)
            phdrs = [_Phdr(*_PHDR.unpack_from(table, i * _PHDR.size)) for i in range(phnum)]
            table = _read_at(fh, size, shoff, shnum * _SHDR.size, shown)
            shdrs = [_Shdr(*_SHDR.unpack_from(table, i * _SHDR.size)) for i in range(shnum)]
            strtab = shdrs[shstrndx]
            table = _read_at(fh, size, strtab.offset, strtab.size, shown)
            names = [table[s.name : table.index(b"\0", s.name)].decode() for s in shdrs]
            if any(p.type == PT_INTERP for p in phdrs):
                # the tool also pins a moved program header table of a program to vaddr == offset
                raise ValueError(f"{shown}: a program (PT_INTERP), not a library: not split here")
            hole_at, hole = _fatbin_pages(shdrs, names)
            data = _read_around(fh, size, hole_at, hole, shown)
        fields = [e_type, machine, version, entry, flags, ehsize, phentsize, shentsize, shstrndx]
        return cls(data, ident, fields, phoff, shoff, phdrs, shdrs, names, hole_at, hole)

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
            self.ident,
            e_type,
            machine,
            version,
            entry,
            self.phoff,
            self.shoff,
            flags,
            ehsize,
            phentsize,
            len(self.phdrs),
            shentsize,
            len(self.shdrs),
            shstrndx,
        )
        self.data[: _EHDR.size] = header
        table = b"".join(p.pack() for p in self.phdrs)
        self.data[self.phoff : self.phoff + len(table)] = table
        table = b"".join(s.pack() for s in self.shdrs)
        self.data[self.shoff : self.shoff + len(table)] = table
        return self.data


def _read_at(fh: BinaryIO, size: int, offset: int, count: int, shown: str) -> bytes:
    if offset + count > size:
        raise ValueError(f"{shown}: a header table lies past the end of the file")
    return os.pread(fh.fileno(), count, offset)


def _read_around(
    fh: io.BufferedReader, size: int, hole_at: int, hole: int, shown: str
) -> bytearray:
    """The file's bytes less [hole_at, hole_at + hole), which are never read."""
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
    return data


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
