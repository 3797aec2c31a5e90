"""A small read-only ELF reader for the smoke tests (standard library only).

The smoke suite runs inside the environment under test, which holds only the wheels, pytest and
their dependencies, so it cannot rely on pyelftools being there. It needs three facts per file:
the dynamic entries (NEEDED, SONAME, RPATH, RUNPATH), the machine (host code vs. AMDGPU device
objects), and the gfx targets of the HIP offload bundles in ``.hip_fatbin``.
"""

from __future__ import annotations

import mmap
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
EM_AMDGPU = 224
SHT_DYNAMIC = 6
DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH = 1, 14, 15, 29
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"


@dataclass
class ElfInfo:
    path: Path
    machine: int
    needed: list[str] = field(default_factory=list)
    soname: str = ""
    rpath: list[str] = field(default_factory=list)
    runpath: list[str] = field(default_factory=list)
    has_fatbin: bool = False
    targets: set[str] = field(default_factory=set)
    # Compressed bundles we could not open (no zstd module in this Python): their targets are
    # unknown, which a test must report rather than treat as "no targets".
    unreadable_bundles: int = 0

    @property
    def is_device_code(self) -> bool:
        return self.machine == EM_AMDGPU


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def read(path: Path) -> ElfInfo | None:
    """ELF facts of ``path``; None for anything that is not a little-endian 64-bit ELF file."""
    with path.open("rb") as fh:
        try:
            data = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty file
            return None
    with data:
        if data[:4] != ELF_MAGIC or data[4] != 2 or data[5] != 1:
            return None
        machine = struct.unpack_from("<H", data, 18)[0]
        info = ElfInfo(path=path, machine=machine)
        sections = _sections(data)
        names = _section_names(data, sections)
        for index, (sh_type, offset, size, link, entsize) in enumerate(sections):
            name = names[index]
            if sh_type == SHT_DYNAMIC and link < len(sections):
                _read_dynamic(data, offset, size, entsize or 16, sections[link], info)
            elif name == ".hip_fatbin":
                info.has_fatbin = True
                _read_bundles(data, offset, size, info)
        return info


Section = tuple[int, int, int, int, int]  # type, offset, size, link, entsize


def _sections(data: mmap.mmap) -> list[Section]:
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shoff == 0 or shoff + shnum * shentsize > len(data):
        return []
    out: list[Section] = []
    for i in range(shnum):
        base = shoff + i * shentsize
        _name, sh_type, _flags, _addr, offset, size, link, _info, _align, entsize = (
            struct.unpack_from("<IIQQQQIIQQ", data, base)
        )
        out.append((sh_type, offset, size, link, entsize))
    return out


def _section_names(data: mmap.mmap, sections: list[Section]) -> list[str]:
    if not sections:
        return []
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize = struct.unpack_from("<H", data, 0x3A)[0]
    shstrndx = struct.unpack_from("<H", data, 0x3E)[0]
    if shstrndx >= len(sections):
        return [""] * len(sections)
    strtab_offset = sections[shstrndx][1]
    names = []
    for i in range(len(sections)):
        name_offset = struct.unpack_from("<I", data, shoff + i * shentsize)[0]
        names.append(_cstring(data, strtab_offset + name_offset))
    return names


def _cstring(data: mmap.mmap, offset: int) -> str:
    end = data.find(b"\0", offset)
    if end < 0:
        end = len(data)
    return data[offset:end].decode("utf-8", errors="replace")


def _read_dynamic(
    data: mmap.mmap, offset: int, size: int, entsize: int, strtab: Section, info: ElfInfo
) -> None:
    str_offset = strtab[1]
    for pos in range(offset, offset + size - entsize + 1, entsize):
        tag, value = struct.unpack_from("<qQ", data, pos)
        if tag == 0:
            break
        if tag == DT_NEEDED:
            info.needed.append(_cstring(data, str_offset + value))
        elif tag == DT_SONAME:
            info.soname = _cstring(data, str_offset + value)
        elif tag == DT_RPATH:
            info.rpath = [p for p in _cstring(data, str_offset + value).split(":") if p]
        elif tag == DT_RUNPATH:
            info.runpath = [p for p in _cstring(data, str_offset + value).split(":") if p]


def target_of(bundle_id: str) -> str | None:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` -> ``gfx90a``; host entries -> None."""
    kind, _, rest = bundle_id.partition("-")
    if not kind.startswith("hip") or "amdgcn" not in rest:
        return None
    # The target ID follows the triple: "amdgcn-amd-amdhsa-" plus an empty environment field.
    match = re.search(r"(gfx[0-9a-z]+)(?::|$)", rest)
    return match.group(1) if match else None


def parse_bundle(blob: bytes | mmap.mmap, start: int = 0) -> tuple[list[str], int]:
    """Entry ids of the uncompressed bundle at ``start`` and the offset just past it."""
    pos = start + len(BUNDLE_MAGIC)
    (count,) = struct.unpack_from("<Q", blob, pos)
    pos += 8
    ids: list[str] = []
    end = pos
    for _ in range(count):
        entry_offset, entry_size, id_len = struct.unpack_from("<QQQ", blob, pos)
        pos += 24
        ids.append(bytes(blob[pos : pos + id_len]).decode("ascii", errors="replace"))
        pos += id_len
        end = max(end, start + entry_offset + entry_size)
    return ids, max(end, pos)


def _decompress(payload: bytes) -> bytes | None:
    try:
        from compression import zstd  # type: ignore[import-not-found]  # Python 3.14+

        return bytes(zstd.decompress(payload))
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found]

        return bytes(zstandard.ZstdDecompressor().decompress(payload, max_output_size=1 << 34))
    except ImportError:
        return None


def _compressed_payload(blob: mmap.mmap, start: int, limit: int) -> tuple[bytes, int]:
    """Payload of a ``CCOB`` bundle and the offset just past it (header versions 1-3)."""
    version, _method = struct.unpack_from("<HH", blob, start + 4)
    if version >= 3:
        total, _uncompressed, _hash = struct.unpack_from("<QQQ", blob, start + 8)
        header = 32
    elif version == 2:
        total, _uncompressed, _hash = struct.unpack_from("<IIQ", blob, start + 8)
        header = 24
    else:
        _uncompressed, _hash = struct.unpack_from("<IQ", blob, start + 8)
        total, header = limit - start, 20
    end = min(start + total, limit)
    return bytes(blob[start + header : end]), end


def _read_bundles(data: mmap.mmap, offset: int, size: int, info: ElfInfo) -> None:
    limit = offset + size
    pos = offset
    while pos < limit:
        next_plain = data.find(BUNDLE_MAGIC, pos, limit)
        next_packed = data.find(COMPRESSED_MAGIC, pos, limit)
        starts = [p for p in (next_plain, next_packed) if p >= 0]
        if not starts:
            return
        pos = min(starts)
        if pos == next_plain:
            ids, pos = parse_bundle(data, pos)
        else:
            payload, pos = _compressed_payload(data, pos, limit)
            inner = _decompress(payload)
            if inner is None or not inner.startswith(BUNDLE_MAGIC):
                info.unreadable_bundles += 1
                continue
            ids, _ = parse_bundle(inner, 0)
        for bundle_id in ids:
            target = target_of(bundle_id)
            if target:
                info.targets.add(target)
