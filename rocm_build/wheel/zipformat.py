"""The ZIP records the wheel writer writes: local headers, the central directory and the end
records, with ZIP64 fields where a size, offset or count needs them (and which a written wheel
needed: :func:`zip64_reasons`)."""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rocm_build.wheel.wheelread import LOCAL

__all__ = [
    "DOS_EPOCH",
    "ZIP32_LIMIT",
    "Central",
    "write_central",
    "write_end",
    "write_local",
    "zip64_reasons",
]

ZIP32_LIMIT = 0xFFFFFFFF  # sizes/offsets from here on need ZIP64 (tests lower it)
MARKER = 0xFFFFFFFF  # the value a 32-bit field holds when the ZIP64 extra has the real one
DOS_EPOCH = (1980, 1, 1, 0, 0, 0)

CENTRAL = struct.Struct("<4s6H3L5H2L")  # 46 bytes
EOCD = struct.Struct("<4s4H2LH")
EOCD64 = struct.Struct("<4sQ2H2L4Q")
EOCD64_LOC = struct.Struct("<4sLQL")


@dataclass
class Central:
    """A member's central directory entry (its local header repeats most of it)."""

    name: bytes
    flag_bits: int
    compress_type: int
    date_time: tuple[int, int, int, int, int, int]
    crc: int
    compress_size: int
    file_size: int
    header_offset: int
    external_attr: int


def dos_time(dt: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    year = max(dt[0], 1980)
    date = ((year - 1980) << 9) | (dt[1] << 5) | dt[2]
    time = (dt[3] << 11) | (dt[4] << 5) | (dt[5] // 2)
    return date, time


def write_local(fh: BinaryIO, entry: Central, zip64: bool) -> int:
    """Write ``entry``'s local header at ``fh``'s position (returned)."""
    extra = b""
    if zip64:
        extra = struct.pack("<HHQQ", 1, 16, entry.file_size, entry.compress_size)
    date, time = dos_time(entry.date_time)
    offset = fh.tell()
    fh.write(
        LOCAL.pack(
            b"PK\x03\x04",
            45 if zip64 else 20,
            entry.flag_bits,
            entry.compress_type,
            time,
            date,
            entry.crc,
            MARKER if zip64 else entry.compress_size,
            MARKER if zip64 else entry.file_size,
            len(entry.name),
            len(extra),
        )
    )
    fh.write(entry.name)
    fh.write(extra)
    return offset


def write_central(fh: BinaryIO, e: Central) -> None:
    extra_fields: list[int] = []
    file_size, compress_size, offset = e.file_size, e.compress_size, e.header_offset
    if file_size >= ZIP32_LIMIT:
        extra_fields.append(file_size)
        file_size = MARKER
    if compress_size >= ZIP32_LIMIT:
        extra_fields.append(compress_size)
        compress_size = MARKER
    if offset >= ZIP32_LIMIT:
        extra_fields.append(offset)
        offset = MARKER
    extra = b""
    if extra_fields:
        extra = struct.pack(f"<HH{len(extra_fields)}Q", 1, 8 * len(extra_fields), *extra_fields)
    version = 45 if extra_fields else 20
    date, time = dos_time(e.date_time)
    fh.write(
        CENTRAL.pack(
            b"PK\x01\x02",
            (3 << 8) | version,  # made by: Unix, so external_attr holds st_mode
            version,
            e.flag_bits,
            e.compress_type,
            time,
            date,
            e.crc,
            compress_size,
            file_size,
            len(e.name),
            len(extra),
            0,
            0,
            0,
            e.external_attr,
            offset,
        )
    )
    fh.write(e.name)
    fh.write(extra)


def write_end(fh: BinaryIO, count: int, cd_offset: int, cd_size: int) -> None:
    """The end records: ZIP64 ones when the count, offset or size need them."""
    if count > 0xFFFF or cd_offset >= ZIP32_LIMIT or cd_size >= ZIP32_LIMIT:
        eocd64_offset = fh.tell()
        fh.write(
            EOCD64.pack(
                b"PK\x06\x06", EOCD64.size - 12, 45, 45, 0, 0, count, count, cd_size, cd_offset
            )
        )
        fh.write(EOCD64_LOC.pack(b"PK\x06\x07", 0, eocd64_offset, 1))
        count16 = 0xFFFF if count >= 0xFFFF else count
        fh.write(
            EOCD.pack(
                b"PK\x05\x06",
                0,
                0,
                count16,
                count16,
                MARKER if cd_size >= ZIP32_LIMIT else cd_size,
                MARKER if cd_offset >= ZIP32_LIMIT else cd_offset,
                0,
            )
        )
    else:
        fh.write(EOCD.pack(b"PK\x05\x06", 0, 0, count, count, cd_size, cd_offset, 0))


def zip64_reasons(path: Path) -> list[str]:
    """Why the zip file at ``path`` needs ZIP64 records, read from its central directory: members
    of 4 GiB or more, members whose local header starts at or past 4 GiB, more than 65,535
    members, a central directory that starts past 4 GiB. Empty: plain ZIP would do."""
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        start_dir = zf.start_dir
    big = [i for i in infos if max(i.file_size, i.compress_size) >= ZIP32_LIMIT]
    far = [i for i in infos if i.header_offset >= ZIP32_LIMIT]
    reasons: list[str] = []
    if big:
        names = ", ".join(f"{i.filename} ({i.file_size} bytes)" for i in big[:3])
        reasons.append(f"{len(big)} member(s) of 4 GiB or more: {names}")
    if far:
        reasons.append(
            f"{len(far)} of {len(infos)} members start past 4 GiB, from {far[0].filename} "
            f"at offset {far[0].header_offset}"
        )
    if len(infos) > 0xFFFF:
        reasons.append(f"{len(infos)} members, more than 65,535")
    if start_dir >= ZIP32_LIMIT:
        reasons.append(f"the central directory starts at offset {start_dir}")
    return reasons
