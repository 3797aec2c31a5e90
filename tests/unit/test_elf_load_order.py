"""ELF edits keep every PT_LOAD in address order: mapped the way glibc maps a library.

glibc's ``_dl_map_segments`` reserves the span from the first PT_LOAD *in the table* to the end
of the last one, then maps every segment MAP_FIXED at its address. A segment out of order lies
past the reservation and is mapped over whatever is there, without an error. ``glibc_map`` does
the same with real ``mmap`` calls (through ctypes, in this process) and reports whether a
sentinel region placed just past the reserved span survived. The sentinel region covers every
address a segment of the file could reach, so a bad file overwrites only the sentinel.

The input is a kpack-split library made by ROCm's own tool (``shared/kpack-reference``): its
PT_NOTE sits before the two PT_LOADs kpack appended, which is what made the ``append`` edit
place its new PT_LOAD out of order.
"""

from __future__ import annotations

import ctypes
import mmap
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from rocm_build.binary import elf, elfpatch

PAGE = mmap.PAGESIZE
PROT_NONE, MAP_FIXED = 0, 0x10  # Linux values; not in the mmap module
PATTERN = b"\xa5\x5a\xc3\x3c"

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_int,
    ctypes.c_long,
]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
MAP_FAILED = ctypes.c_void_p(-1).value


def _down(x: int) -> int:
    return x & ~(PAGE - 1)


def _up(x: int) -> int:
    return (x + PAGE - 1) & ~(PAGE - 1)


def _map(addr: int, length: int, prot: int, flags: int, fd: int = -1, off: int = 0) -> int:
    got = _libc.mmap(addr, length, prot, flags, fd, off)
    if got == MAP_FAILED or got is None:
        raise OSError(ctypes.get_errno(), "mmap")
    return int(got)


def glibc_map(path: Path) -> bool:
    """Map ``path``'s PT_LOADs as glibc does; True when the sentinel past the span survived."""
    phdrs, _size = elfpatch.read_phdrs(path)
    loads = [p for p in phdrs if p[0] == elfpatch.PT_LOAD]
    first, last = loads[0], loads[-1]  # table order, as glibc takes them
    span = _up(last[3] + last[6]) - _down(first[3])
    reach = _up(max(p[3] + p[6] for p in loads)) - _down(first[3]) + PAGE
    total = max(span, reach) + PAGE
    anon = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    base = _map(0, total, PROT_NONE, anon)
    try:
        sentinel = base + span
        size = total - span
        _map(sentinel, size, mmap.PROT_READ | mmap.PROT_WRITE, anon | MAP_FIXED)
        ctypes.memmove(sentinel, PATTERN * (size // len(PATTERN)), size)
        load_bias = base - _down(first[3])
        with path.open("rb") as f:
            for p in loads:
                start = _down(p[3])
                if p[5]:
                    length = _up(p[3] + p[5]) - start
                    at = load_bias + start
                    _map(
                        at,
                        length,
                        mmap.PROT_READ,
                        mmap.MAP_PRIVATE | MAP_FIXED,
                        f.fileno(),
                        _down(p[2]),
                    )
                zero_from = _up(p[3] + p[5]) if p[5] else start
                if p[3] + p[6] > zero_from:  # .bss and NOBITS sections: anonymous zeros
                    _map(
                        load_bias + zero_from,
                        _up(p[3] + p[6]) - zero_from,
                        mmap.PROT_READ,
                        anon | MAP_FIXED,
                    )
        return ctypes.string_at(sentinel, size) == PATTERN * (size // len(PATTERN))
    finally:
        _libc.munmap(base, total)


@pytest.fixture
def split_lib(kpack_reference: Path, tmp_path: Path) -> Path:
    lib = tmp_path / "librocrand.so.1.1"
    shutil.copyfile(kpack_reference / "lib" / "librocrand.so.1.1", lib)
    return lib


def _edited(lib: Path, rpath: str = "$ORIGIN:$ORIGIN/../rocm/lib") -> Path:
    edit = elfpatch.plan_rpath(lib, rpath)
    assert edit is not None
    assert edit.method == "append"
    out = lib.with_name(lib.name + ".edited")
    return elfpatch.apply_to_file(lib, edit, out)


def test_the_reference_maps_safely_before_any_edit(split_lib: Path) -> None:
    phdrs, size = elfpatch.read_phdrs(split_lib)
    assert elfpatch.layout_problems(phdrs, size) == []
    assert glibc_map(split_lib)


def test_append_keeps_pt_loads_in_address_order(split_lib: Path) -> None:
    out = _edited(split_lib)
    phdrs, size = elfpatch.read_phdrs(out)
    loads = [p[3] for p in phdrs if p[0] == elfpatch.PT_LOAD]
    assert loads == sorted(loads)
    assert len(loads) == 9  # 8 of the reference and the new one
    assert elfpatch.layout_problems(phdrs, size) == []
    assert glibc_map(out), "a segment was mapped past glibc's reservation"
    info = elf.read_elf(out)
    assert info.rpath == ("$ORIGIN", "$ORIGIN/../rocm/lib")
    # the marker and the moved program header table keep their segments
    assert elfpatch.read_phdrs(split_lib)[0][-2:] == [
        p for p in phdrs if p[3] in (0x1835000, 0x1836000)
    ]


def test_the_mapping_check_catches_a_table_out_of_order(split_lib: Path) -> None:
    """The check can fail: the same edit with its new PT_LOAD left in the PT_NOTE's slot (what
    the ``append`` edit wrote before) overwrites the sentinel."""
    out = _edited(split_lib)
    phdrs, size = elfpatch.read_phdrs(out)
    unsorted = _new_load_in_note_slot(phdrs)
    assert elfpatch.layout_problems(unsorted, size)
    data = bytearray(out.read_bytes())
    phoff = int.from_bytes(data[32:40], "little")
    data[phoff : phoff + 56 * len(unsorted)] = b"".join(elfpatch._PHDR.pack(*p) for p in unsorted)
    bad = out.with_name("unsorted.so")
    bad.write_bytes(bytes(data))
    assert not glibc_map(bad)


def _new_load_in_note_slot(phdrs: Sequence[elfpatch.Phdr]) -> list[elfpatch.Phdr]:
    slots = [i for i, p in enumerate(phdrs) if p[0] == elfpatch.PT_LOAD]
    newest = max((phdrs[i] for i in slots), key=lambda p: p[3])
    others = sorted((phdrs[i] for i in slots if phdrs[i] != newest), key=lambda p: p[3])
    out = list(phdrs)
    # the PT_NOTE's old slot is the 7th of the 9 PT_LOAD slots here: it gets the newest
    order = [*others[:6], newest, *others[6:]]
    for i, p in zip(slots, order, strict=True):
        out[i] = p
    return out


def test_in_load_order_moves_only_pt_loads() -> None:
    load = elfpatch.PT_LOAD
    table: list[elfpatch.Phdr] = [
        (elfpatch.PT_PHDR, 4, 64, 64, 64, 112, 112, 8),
        (load, 4, 0, 0, 0, 0x1000, 0x1000, 0x1000),
        (load, 4, 0x3000, 0x3000, 0x3000, 0x10, 0x10, 0x1000),
        (2, 6, 0x100, 0x100, 0x100, 0x10, 0x10, 8),
        (load, 4, 0x2000, 0x2000, 0x2000, 0x10, 0x10, 0x1000),
    ]
    out = elfpatch.in_load_order(table)
    assert [p[3] for p in out] == [64, 0, 0x2000, 0x100, 0x3000]
    assert elfpatch.layout_problems(out, 0x4000) == []
    assert "out of order" in elfpatch.layout_problems(table, 0x4000)[0]


def test_layout_problems_names_each_rule() -> None:
    load, phdr = elfpatch.PT_LOAD, elfpatch.PT_PHDR
    ok = (load, 4, 0, 0, 0, 0x1000, 0x1000, 0x1000)
    past_end = (load, 4, 0x1000, 0x1000, 0x1000, 0x5000, 0x5000, 0x1000)
    skewed = (load, 4, 0x1010, 0x2000, 0x2000, 0x10, 0x10, 0x1000)
    assert "past the end" in elfpatch.layout_problems([ok, past_end], 0x2000)[0]
    assert "not congruent" in elfpatch.layout_problems([ok, skewed], 0x3000)[0]
    late_phdr = (phdr, 4, 64, 64, 64, 56, 56, 8)
    assert elfpatch.layout_problems([ok, late_phdr], 0x1000) == ["PT_PHDR follows a PT_LOAD"]
    outside = (phdr, 4, 0x8000, 0x8000, 0x8000, 56, 56, 8)
    assert "in no PT_LOAD" in elfpatch.layout_problems([outside, ok], 0x1000)[0]
