"""Set an ELF file's DT_RPATH or DT_RUNPATH as byte patches, applied while the file is streamed.

patchelf reads a whole file into memory and writes it back; for a 1.3 GB ROCm library that is
1.3 GB of memory and a full extra write. A search-path change only touches a few hundred bytes,
so this module computes those bytes and the caller applies them while copying the file into the
wheel:

* ``inplace``: the file already has a DT_RPATH or DT_RUNPATH string at least as long as the new
  one. The string is overwritten (NUL padded, as patchelf does when it shrinks one), the tag
  becomes DT_RPATH and any second search-path entry is dropped from the dynamic array.
* ``append``: no string to reuse. A copy of ``.dynstr`` with the new string at its end is
  appended to the file and mapped by turning the PT_NOTE program header into a PT_LOAD (notes
  stay readable through their section headers); DT_STRTAB/DT_STRSZ and the ``.dynstr`` section
  header point at the copy and a DT_RPATH entry takes a spare slot of the dynamic array. String
  offsets are unchanged, so symbol and version tables stay valid. This is the layout patchelf
  itself produces for shared libraries (new data in a new segment at the end). The PT_LOAD
  entries are then sorted by address among their slots: the PT_NOTE may sit before PT_LOADs
  of its own (kpack-split libraries map their marker and their moved program header table
  after it), and glibc maps a PT_LOAD out of address order over foreign memory.

Every edit is checked with :func:`layout_problems` before it is planned (and the patchelf
fallback's output after it is written): a layout glibc could not map safely is never written.

When neither applies (no spare dynamic slot, no PT_NOTE, 32-bit or big-endian files) the plan is
``None`` and the caller falls back to patchelf.
"""

from __future__ import annotations

import bisect
import itertools
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from rocm_build.binary.elf import _elf

__all__ = [
    "Overlay",
    "PatchedFile",
    "Phdr",
    "RpathEdit",
    "apply_to_file",
    "in_load_order",
    "layout_problems",
    "plan_rpath",
    "read_phdrs",
]

DT_NULL, DT_STRTAB, DT_STRSZ, DT_RPATH, DT_RUNPATH = 0, 5, 10, 15, 29
PT_LOAD, PT_NOTE, PT_PHDR = 1, 4, 6
PF_R = 4
_DYN = struct.Struct("<qQ")
_PHDR = struct.Struct("<IIQQQQQQ")
_SHDR = struct.Struct("<IIQQQQIIQQ")


@dataclass(frozen=True)
class RpathEdit:
    method: Literal["inplace", "append"]
    patches: tuple[tuple[int, bytes], ...]  # (file offset, new bytes), sorted, not overlapping
    append_at: int  # file offset where ``append`` goes (== original size when nothing appended)
    append: bytes
    original_size: int

    @property
    def new_size(self) -> int:
        return self.append_at + len(self.append) if self.append else self.original_size


def plan_rpath(path: Path | str, rpath: str, *, runpath: bool = False) -> RpathEdit | None:
    """The byte patches that give ``path`` exactly ``DT_RPATH=rpath`` and no DT_RUNPATH
    (``runpath``: ``DT_RUNPATH=rpath`` and no DT_RPATH)."""
    new = rpath.encode()
    path_tag = DT_RUNPATH if runpath else DT_RPATH
    with _elf(path) as (elf, mm):
        if elf.elfclass != 64 or not elf.little_endian:
            return None
        dynamic = elf.get_section_by_name(".dynamic")
        dynstr = elf.get_section_by_name(".dynstr")
        if dynamic is None or dynstr is None:
            return None
        dyn_off = int(dynamic["sh_offset"])
        slots = int(dynamic["sh_size"]) // _DYN.size
        entries: list[tuple[int, int]] = []
        for i in range(slots):
            tag, val = _DYN.unpack_from(mm, dyn_off + i * _DYN.size)
            if tag == DT_NULL:
                break
            entries.append((tag, val))
        str_off = int(dynstr["sh_offset"])
        str_size = int(dynstr["sh_size"])
        paths = [(i, v) for i, (t, v) in enumerate(entries) if t in (DT_RPATH, DT_RUNPATH)]
        patches: list[tuple[int, bytes]] = []
        for _i, val in paths:
            end = mm.find(b"\0", str_off + val, str_off + str_size)
            if end >= 0 and end - (str_off + val) >= len(new):
                old_len = end - (str_off + val)
                patches.append((str_off + val, new + b"\0" * (old_len - len(new))))
                keep = [e for e in entries if e[0] not in (DT_RPATH, DT_RUNPATH)]
                keep.append((path_tag, val))
                patches.append((dyn_off, _dynamic_bytes(keep, slots)))
                return RpathEdit("inplace", tuple(sorted(patches)), len(mm), b"", len(mm))
        # append: a new .dynstr with the string at its end, in a new PT_LOAD
        keep = [e for e in entries if e[0] not in (DT_RPATH, DT_RUNPATH)]
        if len(keep) + 2 > slots:
            return None
        phoff, phnum = int(elf["e_phoff"]), int(elf["e_phnum"])
        phdrs: list[Phdr] = [_PHDR.unpack_from(mm, phoff + i * _PHDR.size) for i in range(phnum)]
        notes = [i for i, p in enumerate(phdrs) if p[0] == PT_NOTE]
        loads = [p for p in phdrs if p[0] == PT_LOAD]
        if not notes or not loads:
            return None
        align = max(0x1000, *(p[7] for p in loads))
        end_vaddr = max(p[3] + p[6] for p in loads)  # p_vaddr + p_memsz
        size = len(mm)
        at = (size + 15) & ~15
        vaddr = ((end_vaddr + align - 1) & ~(align - 1)) + (at % align)
        table = bytes(mm[str_off : str_off + str_size])
        if not table.endswith(b"\0"):
            table += b"\0"
        blob = table + new + b"\0"
        keep = [
            (DT_STRTAB, vaddr)
            if t == DT_STRTAB
            else (DT_STRSZ, len(blob))
            if t == DT_STRSZ
            else (t, v)
            for t, v in keep
        ]
        keep.append((path_tag, len(table)))
        patches.append((dyn_off, _dynamic_bytes(keep, slots)))
        note = notes[-1]
        phdrs[note] = (PT_LOAD, PF_R, at, vaddr, vaddr, len(blob), len(blob), align)
        phdrs = in_load_order(phdrs)
        if layout_problems(phdrs, at + len(blob)):
            return None  # the caller's fallback (patchelf) is checked the same way
        patches.append((phoff, b"".join(_PHDR.pack(*p) for p in phdrs)))
        shoff, shentsize = int(elf["e_shoff"]), int(elf["e_shentsize"])
        index = _section_index(elf, ".dynstr")
        sh = list(_SHDR.unpack_from(mm, shoff + index * shentsize))
        sh[3], sh[4], sh[5] = vaddr, at, len(blob)  # sh_addr, sh_offset, sh_size
        patches.append((shoff + index * shentsize, _SHDR.pack(*sh)))
        padding = b"\0" * (at - size)
        return RpathEdit("append", tuple(sorted(patches)), size, padding + blob, size)


#: a program header as ``_PHDR`` packs it: (p_type, p_flags, p_offset, p_vaddr, p_paddr,
#: p_filesz, p_memsz, p_align)
Phdr = tuple[int, int, int, int, int, int, int, int]


def in_load_order(phdrs: Sequence[Phdr]) -> list[Phdr]:
    """``phdrs`` with the PT_LOAD entries sorted by address among the slots PT_LOAD entries
    hold (the other entries keep their slots). glibc reserves the span from the first PT_LOAD
    in the table to the end of the last one and maps each segment MAP_FIXED at its address:
    a segment out of order lies outside that span, over whatever is mapped there."""
    slots = [i for i, p in enumerate(phdrs) if p[0] == PT_LOAD]
    loads = sorted((phdrs[i] for i in slots), key=lambda p: p[3])
    out = list(phdrs)
    for i, p in zip(slots, loads, strict=True):
        out[i] = p
    return out


def layout_problems(phdrs: Sequence[Phdr], file_size: int) -> list[str]:
    """What makes ``phdrs`` unsafe to load (empty: nothing): PT_LOADs that do not ascend by
    p_vaddr or overlap, a file range past the end, an offset not congruent to its address, a
    PT_PHDR after a PT_LOAD or outside every PT_LOAD."""
    problems = []
    loads = [p for p in phdrs if p[0] == PT_LOAD]
    for a, b in itertools.pairwise(loads):
        if b[3] < a[3] + a[6]:
            problems.append(f"PT_LOAD at {b[3]:#x} follows the one at {a[3]:#x} (out of order)")
    for p in loads:
        if p[2] + p[5] > file_size:
            problems.append(f"PT_LOAD at {p[3]:#x} reads past the end of the file")
        if p[7] > 1 and p[2] % p[7] != p[3] % p[7]:
            problems.append(f"PT_LOAD at {p[3]:#x}: offset {p[2]:#x} not congruent")
    for i, p in enumerate(phdrs):
        if p[0] != PT_PHDR:
            continue
        if any(q[0] == PT_LOAD for q in phdrs[:i]):
            problems.append("PT_PHDR follows a PT_LOAD")
        inside = [
            q
            for q in loads
            if q[3] <= p[3] and p[3] + p[6] <= q[3] + q[5] and p[2] - q[2] == p[3] - q[3]
        ]
        if not inside:
            problems.append(f"PT_PHDR at {p[3]:#x} lies in no PT_LOAD")
    return problems


def read_phdrs(path: Path) -> tuple[list[Phdr], int]:
    """The program headers of a 64-bit little-endian ELF file, and the file's size."""
    with path.open("rb") as f:
        head = f.read(64)
        if head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
            raise ValueError(f"{path}: not a 64-bit little-endian ELF file")
        phoff, phentsize, phnum = (
            struct.unpack_from("<Q", head, 32)[0],
            *struct.unpack_from("<HH", head, 54),
        )
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        size = os.fstat(f.fileno()).st_size
    if phentsize != _PHDR.size or len(table) != phentsize * phnum:
        raise ValueError(f"{path}: damaged program header table")
    return [_PHDR.unpack_from(table, i * phentsize) for i in range(phnum)], size


def _section_index(elf: object, name: str) -> int:
    for i, section in enumerate(elf.iter_sections()):  # type: ignore[attr-defined]
        if section.name == name:
            return i
    raise ValueError(name)


def _dynamic_bytes(entries: Sequence[tuple[int, int]], slots: int) -> bytes:
    out = b"".join(_DYN.pack(t, v) for t, v in entries)
    return out + b"\0" * ((slots - len(entries)) * _DYN.size)


@dataclass(frozen=True)
class Overlay:
    """``length`` bytes at ``offset`` replaced by ``data`` (or what ``make`` returns, made when
    the stream first reaches them), zeros after it up to ``length``: how other edits (pruned
    offload bundles) join the search-path patches in one stream."""

    offset: int
    length: int
    data: bytes = b""
    make: Callable[[], bytes] | None = field(default=None, compare=False)


class _Made:
    """One overlay's ``make`` result, made once however many threads ask for it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.value: bytes | None = None


_MADE_KEEP = 8  # overlays' made bytes kept (least recently used go): the pieces in flight share


class PatchedFile:
    """A read-only stream of ``path`` with ``edit`` (may be None) and ``overlays`` applied: what
    the edited file would hold. Overlays are sorted, do not overlap each other or the edit's
    patches, and lie inside the original file. ``read`` goes in order; ``pread`` reads any part
    and may be called from several threads at once (the wheel writer's pieces)."""

    def __init__(
        self, path: Path, edit: RpathEdit | None, overlays: Sequence[Overlay] = ()
    ) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        size = os.fstat(self._fd).st_size
        self._edit = edit or RpathEdit("inplace", (), size, b"", size)
        patches = [Overlay(off, len(data), data) for off, data in self._edit.patches]
        self._overlays = sorted(
            (o for o in [*patches, *overlays] if o.length > 0), key=lambda o: o.offset
        )
        self._starts = [o.offset for o in self._overlays]
        # overlay offset -> the bytes ``make`` returned (a few: the stream moves on)
        self._made: OrderedDict[int, _Made] = OrderedDict()
        self._lock = threading.Lock()
        self._pos = 0

    @property
    def size(self) -> int:
        return self._edit.new_size

    @property
    def rereads(self) -> bool:
        """Whether a second reading costs only the reads: no overlay is made on demand (a
        pruned compressed bundle, compressed again when first reached)."""
        return all(o.make is None for o in self._overlays)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> PatchedFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _bytes(self, o: Overlay, lo: int, hi: int) -> bytes:
        """Bytes ``lo:hi`` (relative to ``o.offset``) of what overlay ``o`` puts there."""
        data = o.data if o.make is None else self._make(o, o.make)
        part = data[lo:hi]
        return part + bytes(hi - lo - len(part))

    def _make(self, o: Overlay, make: Callable[[], bytes]) -> bytes:
        with self._lock:
            made = self._made.get(o.offset)
            if made is None:
                made = self._made[o.offset] = _Made()
                while len(self._made) > _MADE_KEEP:
                    self._made.popitem(last=False)
            else:
                self._made.move_to_end(o.offset)
        with made.lock:  # the first thread makes it; the others wait for its bytes
            if made.value is None:
                made.value = make()
            return made.value

    def _hits(self, start: int, end: int) -> bool:
        # Sorted, apart and not empty: of the overlays that start before ``end``, the last one
        # reaches furthest.
        j = bisect.bisect_left(self._starts, end)
        return j > 0 and self._overlays[j - 1].offset + self._overlays[j - 1].length > start

    def _zeros(self, start: int, end: int) -> int:
        """How many bytes to read from ``start`` if all of them are an overlay's zeros; 0 if not."""
        end = min(end, self._edit.original_size)
        i = bisect.bisect_right(self._starts, start) - 1
        if i < 0:
            return 0
        o = self._overlays[i]
        zero = o.make is None and o.offset + len(o.data) <= start
        return end - start if zero and o.offset + o.length >= end else 0

    def _overlay(self, chunk: bytearray, start: int) -> None:
        end = start + len(chunk)
        i = max(bisect.bisect_right(self._starts, start) - 1, 0)
        while i < len(self._overlays) and self._overlays[i].offset < end:
            o = self._overlays[i]
            lo, hi = max(o.offset, start), min(o.offset + o.length, end)
            if lo < hi:
                chunk[lo - start : hi - start] = self._bytes(o, lo - o.offset, hi - o.offset)
            i += 1

    def read(self, n: int = -1) -> bytes:
        data = self.pread(self._pos, self.size - self._pos if n < 0 else n)
        self._pos += len(data)
        return data

    def pread(self, offset: int, n: int) -> bytes:
        """Up to ``n`` bytes of the edited file from ``offset``."""
        edit = self._edit
        n = min(n, edit.new_size - offset)
        if n <= 0:
            return b""
        start, end = offset, offset + n
        parts: list[bytes] = []
        if start < edit.original_size and (zeros := self._zeros(start, end)):
            parts.append(bytes(zeros))  # dropped device code: not read at all
        elif start < edit.original_size:
            raw = _pread(self._fd, min(end, edit.original_size) - start, start)
            # only a few blocks carry edits: the rest pass through uncopied
            if self._hits(start, start + len(raw)):
                chunk = bytearray(raw)
                self._overlay(chunk, start)
                raw = bytes(chunk)
            parts.append(raw)
        if end > edit.original_size and edit.append:
            lo = max(start, edit.append_at) - edit.append_at
            hi = end - edit.append_at
            parts.append(edit.append[lo:hi])
        return parts[0] if len(parts) == 1 else b"".join(parts)


def _pread(fd: int, n: int, offset: int) -> bytes:
    parts = []
    while n > 0 and (block := os.pread(fd, n, offset)):
        parts.append(block)
        offset += len(block)
        n -= len(block)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def apply_to_file(src: Path, edit: RpathEdit, dest: Path) -> Path:
    """Write the edited file to ``dest`` (streamed)."""
    with PatchedFile(src, edit) as pf, dest.open("wb") as out:
        while block := pf.read(1 << 20):
            out.write(block)
    dest.chmod(src.stat().st_mode & 0o7777)
    return dest
