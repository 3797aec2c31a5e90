"""Reading what a kpack split made, as the checks see it: an archive's TOC and code objects, a
(split) library's ELF through pyelftools, what glibc's loader would refuse of its mapping, and
whether every device entry of a library's bundles is in its target's archive."""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import zstandard
from elftools.elf.elffile import ELFFile
from elftools.elf.relocation import RelocationSection

from rocm_build.binary import elf


def read_archive(path: Path) -> tuple[dict[str, Any], Callable[[int], bytes]]:
    """An archive's TOC and a function giving the code object of an ordinal."""
    data = path.read_bytes()
    magic, version, toc_at = struct.unpack_from("<4sIQ", data)
    assert (magic, version) == (b"KPAK", 1)
    toc: dict[str, Any] = msgpack.unpackb(data[toc_at:], raw=False)
    if toc["compression_scheme"] == "none":
        blobs = toc["blobs"]
        return toc, lambda i: data[blobs[i]["offset"] : blobs[i]["offset"] + blobs[i]["size"]]
    start, size = toc["zstd_offset"], toc["zstd_size"]
    assert start + size == toc_at
    (count,) = struct.unpack_from("<I", data, start)
    frames, pos = [], start + 4
    for _ in range(count):
        (length,) = struct.unpack_from("<I", data, pos)
        frames.append(data[pos + 4 : pos + 4 + length])
        pos += 4 + length
    assert pos == start + size

    def code(i: int) -> bytes:
        out: bytes = zstandard.ZstdDecompressor().decompress(frames[i])
        return out

    return toc, code


def archives(root: Path) -> dict[str, tuple[dict[str, Any], Callable[[int], bytes]]]:
    return {p.name: read_archive(p) for p in sorted((root / ".kpack").iterdir())}


class Elf:
    """What the checks read of a (split) library, through pyelftools."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.size = path.stat().st_size
        with path.open("rb") as fh:
            f = ELFFile(fh)
            self.header = dict(f.header)
            self.segments = [dict(s.header) for s in f.iter_segments()]
            self.sections = {
                s.name: (dict(s.header), s.data() if s["sh_type"] != "SHT_NOBITS" else b"")
                for s in f.iter_sections()
            }
            self.relocations = {
                r["r_offset"]: (r["r_info_type"], r["r_addend"])
                for s in f.iter_sections()
                if isinstance(s, RelocationSection) and s.is_RELA()
                for r in s.iter_relocations()
            }

    def loads(self) -> list[dict[str, Any]]:
        return [s for s in self.segments if s["p_type"] == "PT_LOAD"]

    def marker(self) -> dict[str, Any]:
        found: dict[str, Any] = msgpack.unpackb(self.sections[".rocm_kpack_ref"][1], raw=False)
        return found

    def wrappers(self) -> list[tuple[int, int, int, int, int]]:
        """(magic, version, pointer, reserved1, relocation addend) of each wrapper."""
        head, data = self.sections[".hipFatBinSegment"]
        out = []
        for i in range(len(data) // 24):
            magic, version, pointer, reserved = struct.unpack_from("<IIQQ", data, i * 24)
            rtype, addend = self.relocations[head["sh_addr"] + i * 24 + 8]
            assert rtype == 8  # R_X86_64_RELATIVE
            out.append((magic, version, pointer, reserved, addend))
        return out


def mapping_problems(lib: Elf) -> list[str]:
    """What glibc's loader would refuse or mis-map: PT_LOADs out of address order, file
    ranges past the end, offsets not congruent to addresses, headers outside every PT_LOAD."""
    problems = []
    loads = lib.loads()
    for a, b in itertools.pairwise(loads):
        if b["p_vaddr"] < a["p_vaddr"] + a["p_memsz"]:
            problems.append(f"PT_LOAD at {b['p_vaddr']:#x} below the one before it")
    for s in loads:
        if s["p_offset"] + s["p_filesz"] > lib.size:
            problems.append(f"PT_LOAD at {s['p_vaddr']:#x} reads past the end of the file")
        if (s["p_offset"] - s["p_vaddr"]) % s["p_align"]:
            problems.append(f"PT_LOAD at {s['p_vaddr']:#x}: offset not congruent to address")
        if s["p_filesz"] > s["p_memsz"]:
            problems.append(f"PT_LOAD at {s['p_vaddr']:#x}: more file bytes than memory")
    table = (lib.header["e_phoff"], lib.header["e_phnum"] * lib.header["e_phentsize"])
    for p in (s for s in lib.segments if s["p_type"] == "PT_PHDR"):
        if p["p_offset"] != table[0] or p["p_filesz"] < table[1]:
            problems.append("PT_PHDR does not describe the program header table")
        if not any(
            s["p_offset"] <= p["p_offset"]
            and p["p_offset"] + p["p_filesz"] <= s["p_offset"] + s["p_filesz"]
            and s["p_vaddr"] - s["p_offset"] == p["p_vaddr"] - p["p_offset"]
            for s in loads
        ):
            problems.append("PT_PHDR is mapped by no PT_LOAD")
    if not any(
        s["p_offset"] <= table[0] and sum(table) <= s["p_offset"] + s["p_filesz"] for s in loads
    ):
        problems.append("the program header table is in no PT_LOAD")
    return problems


def decompressed(src: Path, bundle: elf.OffloadBundle) -> bytes:
    """The uncompressed bundle a compressed one holds, decompressed in one call (not as the
    writer does it, in steps)."""
    with src.open("rb") as fh:
        fh.seek(bundle.file_offset)
        blob = fh.read(bundle.size)
    head = elf.ccob_header(blob, 0)
    assert head.method == 1  # zstd
    out: bytes = zstandard.ZstdDecompressor().decompress(
        blob[head.payload : head.total], max_output_size=head.raw_size
    )
    assert len(out) == head.raw_size
    return out


def check_archived(src: Path, root: Path, kernel_name: str, group: str) -> int:
    """Every device entry of every bundle of ``src`` is in its target's archive under ``root``
    as the bytes of the (decompressed) original entry; how many."""
    found = archives(root)
    seen = 0
    for index, bundle in enumerate(elf.offload_bundles(src)):
        inner = decompressed(src, bundle) if bundle.compressed else None
        for entry in bundle.entries:
            target = elf.target_id_of_bundle_id(entry.bundle_id)
            if target is None or not entry.size:
                continue
            if inner is None:
                with src.open("rb") as fh:
                    fh.seek(bundle.file_offset + entry.offset)
                    original = fh.read(entry.size)
            else:
                original = inner[entry.offset : entry.offset + entry.size]
            assert original[:4] == elf.ELF_MAGIC, entry.bundle_id  # an AMDGPU code object
            toc, code = found[f"{group}_{target}.kpack"]
            item = toc["toc"][f"{kernel_name}#{index}"][target]
            assert code(item["ordinal"]) == original, (index, entry.bundle_id)
            assert item["original_size"] == entry.size
            seen += 1
    assert seen == sum(len(t["toc"]) for t, _ in found.values())
    return seen
