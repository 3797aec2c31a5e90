"""The kpack archive format: header, table of contents and code objects (``kpack`` reads the
libraries that point at them).

``KPAK``, u32 version 1, u64 offset of a MessagePack TOC near the end; between them the data of
the compression scheme. ``zstd-per-kernel``: at ``zstd_offset``, u32 frame count, then per frame a
u32 size and one zstd frame; a TOC entry's ``ordinal`` is the frame's index (rocm-kpack's runtime
``compression.cpp``). ``none``: the TOC's ``blobs`` list holds ``{offset, size}`` per ordinal,
offsets from the start of the file. The TOC: ``{format_version, group_name, gfx_arch_family,
gfx_arches, compression_scheme, zstd_offset, zstd_size | blobs, toc: {"<kernel_name>#<index>":
{<target>: {type, ordinal, original_size, metadata}}}}``.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

import msgpack  # type: ignore[import-untyped]

__all__ = [
    "MAGIC",
    "SCHEMES",
    "VERSION",
    "Archive",
    "KpackFormatError",
    "TocEntry",
    "read_archive",
    "read_archive_from",
    "read_code_object",
]

MAGIC = b"KPAK"
VERSION = 1
SCHEMES = ("zstd-per-kernel", "none")
_HEADER = struct.Struct("<4sIQ")
#: a TOC beyond this is not one a tool wrote (a real one is a few hundred bytes per code object)
MAX_TOC = 64 << 20
_CHUNK = 1 << 20


class KpackFormatError(ValueError):
    """A kpack marker, wrapper or archive that is damaged or not what the tools write."""


@dataclass(frozen=True)
class TocEntry:
    key: str  # "<kernel_name>#<index>"
    kernel_name: str
    index: int
    target: str  # "gfx90a:xnack-"
    type: str  # "hsaco"
    ordinal: int
    original_size: int
    metadata: Mapping[str, Any]


@dataclass(frozen=True)
class Archive:
    """A ``.kpack`` file's header and table of contents (no code object read)."""

    path: str
    size: int
    version: int
    group_name: str
    gfx_arch_family: str
    gfx_arches: tuple[str, ...]
    compression_scheme: str
    zstd_offset: int  # 0 for "none"
    zstd_size: int
    toc_offset: int
    entries: tuple[TocEntry, ...]
    #: (file offset, size) of each ordinal's bytes: a zstd frame, or the code object itself
    frames: tuple[tuple[int, int], ...] = ()

    def for_kernel(self, kernel_name: str) -> tuple[TocEntry, ...]:
        return tuple(e for e in self.entries if e.kernel_name == kernel_name)

    @property
    def kernel_names(self) -> frozenset[str]:
        return frozenset(e.kernel_name for e in self.entries)


def fail(where: object, what: str) -> KpackFormatError:
    return KpackFormatError(f"{where}: {what}")


class _DuplicateKey(ValueError):
    pass


def _pairs(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(f"duplicate key {key!r}")
        out[key] = value
    return out


def unpack_one(data: bytes, where: object, what: str) -> Any:
    """The first MessagePack object in ``data`` (the loader stops at its end, as here)."""
    unpacker = msgpack.Unpacker(
        raw=False,
        strict_map_key=True,
        object_pairs_hook=_pairs,
        max_buffer_size=max(len(data), 1),
    )
    unpacker.feed(data)
    try:
        return unpacker.unpack()
    except msgpack.OutOfData as err:
        raise fail(where, f"{what} is truncated MessagePack") from err
    except _DuplicateKey as err:
        raise fail(where, f"{what}: {err}") from err
    except (ValueError, TypeError, msgpack.UnpackException) as err:
        raise fail(where, f"{what} is not MessagePack ({err})") from err


def _int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _split_key(key: str) -> tuple[str, int]:
    name, sep, index = key.rpartition("#")
    if sep and index.isdigit() and index.isascii():
        return name, int(index)
    return key, 0  # an older archive's bare key: the library's only code object


def _entries(toc: Any, where: str, ordinals: int) -> tuple[TocEntry, ...]:
    if not isinstance(toc, dict):
        raise fail(where, "TOC 'toc' is not a map")
    entries: list[TocEntry] = []
    seen: set[tuple[str, int, str]] = set()
    for key, targets in toc.items():
        if not isinstance(targets, dict):
            raise fail(where, f"TOC entry {key!r} is not a map of targets")
        name, index = _split_key(key)
        for target, meta in targets.items():
            if not isinstance(meta, dict):
                raise fail(where, f"TOC entry {key!r} {target!r} is not a map")
            kind, ordinal, size = meta.get("type"), meta.get("ordinal"), meta.get("original_size")
            extra = meta.get("metadata", {})
            if not isinstance(kind, str) or not _int(ordinal) or not _int(size):
                raise fail(where, f"TOC entry {key!r} {target!r} lacks type/ordinal/original_size")
            if not isinstance(extra, dict):
                raise fail(where, f"TOC entry {key!r} {target!r} metadata is not a map")
            if ordinal >= ordinals:
                raise fail(where, f"TOC entry {key!r} {target!r}: ordinal {ordinal} of {ordinals}")
            if (name, index, target) in seen:
                raise fail(where, f"TOC holds {name!r} #{index} {target!r} twice")
            seen.add((name, index, target))
            entries.append(TocEntry(key, name, index, target, kind, ordinal, size, extra))
    return tuple(entries)


def _zstd_frames(fh: Any, where: str, start: int, size: int) -> tuple[tuple[int, int], ...]:
    """(offset, size) of each frame of the ``zstd-per-kernel`` region at ``start``."""
    end = start + size
    fh.seek(start)
    head = fh.read(4)
    if size < 4 or len(head) != 4:
        raise fail(where, "zstd region has no frame count")
    (count,) = struct.unpack("<I", head)
    if count > (size - 4) // 4:
        raise fail(where, f"zstd region of {size} bytes cannot hold {count} frames")
    frames: list[tuple[int, int]] = []
    pos = start + 4
    for i in range(count):
        fh.seek(pos)
        raw = fh.read(4)
        if pos + 4 > end or len(raw) != 4:
            raise fail(where, f"zstd frame {i}'s size lies past the zstd region")
        (length,) = struct.unpack("<I", raw)
        if pos + 4 + length > end:
            raise fail(where, f"zstd frame {i} ({length} bytes) runs past the zstd region")
        frames.append((pos + 4, length))
        pos += 4 + length
    return tuple(frames)


def _blobs(value: Any, where: str, lo: int, hi: int) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list):
        raise fail(where, "TOC of scheme 'none' has no 'blobs' list")
    out: list[tuple[int, int]] = []
    for i, blob in enumerate(value):
        if not isinstance(blob, dict) or not _int(blob.get("offset")) or not _int(blob.get("size")):
            raise fail(where, f"TOC blob {i} is not {{offset, size}}")
        if blob["offset"] < lo or blob["offset"] + blob["size"] > hi:
            raise fail(where, f"TOC blob {i} lies outside the data region")
        out.append((blob["offset"], blob["size"]))
    return tuple(out)


_TOC_KEYS: dict[str, type | tuple[type, ...]] = {
    "format_version": int,
    "group_name": str,
    "gfx_arch_family": str,
    "gfx_arches": list,
    "compression_scheme": str,
    "toc": dict,
}


def _check_toc(toc: Any, where: str) -> dict[str, Any]:
    if not isinstance(toc, dict):
        raise fail(where, "TOC is not a map")
    for key, kind in _TOC_KEYS.items():
        if not isinstance(toc.get(key), kind) or isinstance(toc.get(key), bool):
            raise fail(where, f"TOC lacks {key!r} or it is not a {getattr(kind, '__name__', kind)}")
    if toc["format_version"] != VERSION:
        raise fail(where, f"TOC format_version {toc['format_version']} is not {VERSION}")
    if not all(isinstance(a, str) for a in toc["gfx_arches"]):
        raise fail(where, "TOC gfx_arches is not a list of strings")
    if toc["compression_scheme"] not in SCHEMES:
        raise fail(where, f"unknown compression_scheme {toc['compression_scheme']!r}")
    return toc


def read_archive(path: Path) -> Archive:
    """Header and TOC of the archive ``path`` (no code object read); memory bounded. Anything
    but a regular file (a FIFO that would block, a folder, a device) is refused unread."""
    with _open_regular(path) as fh:
        return read_archive_from(fh, os.fstat(fh.fileno()).st_size, str(path))


def _open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file (a FIFO is not waited on)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise fail(path, "not a regular file")
    return os.fdopen(fd, "rb")


def read_archive_from(fh: Any, size: int, where: str) -> Archive:
    """:func:`read_archive` of ``size`` bytes read through ``fh`` (``read`` and ``seek``: an
    open file, or a wheel member read in place), named ``where`` in errors."""
    header = fh.read(_HEADER.size)
    if len(header) != _HEADER.size or header[:4] != MAGIC:
        raise fail(where, f"not a kpack archive (magic {header[:4]!r}, not {MAGIC!r})")
    _magic, version, toc_offset = _HEADER.unpack(header)
    if version != VERSION:
        raise fail(where, f"unknown kpack version {version} (this reader knows {VERSION})")
    if not _HEADER.size <= toc_offset < size:
        raise fail(where, f"TOC offset {toc_offset} lies outside the file ({size} bytes)")
    if size - toc_offset > MAX_TOC:
        raise fail(where, f"TOC of {size - toc_offset} bytes is over {MAX_TOC}")
    fh.seek(toc_offset)
    toc = _check_toc(unpack_one(fh.read(), where, "TOC"), where)
    scheme = toc["compression_scheme"]
    zstd_offset, zstd_size = toc.get("zstd_offset", 0), toc.get("zstd_size", 0)
    if scheme == "zstd-per-kernel":
        if not _int(zstd_offset) or not _int(zstd_size) or "zstd_size" not in toc:
            raise fail(where, "TOC lacks integer zstd_offset/zstd_size")
        if zstd_offset < _HEADER.size or zstd_offset + zstd_size > toc_offset:
            raise fail(where, f"zstd region {zstd_offset}+{zstd_size} lies outside the data")
        frames = _zstd_frames(fh, where, zstd_offset, zstd_size)
    else:
        frames = _blobs(toc.get("blobs"), where, _HEADER.size, toc_offset)
        zstd_offset = zstd_size = 0
    entries = _entries(toc["toc"], where, len(frames))
    names = (toc["group_name"], toc["gfx_arch_family"], tuple(toc["gfx_arches"]), scheme)
    return Archive(
        where, size, version, *names, zstd_offset, zstd_size, toc_offset, entries, frames
    )


def _inflate(frame: bytes, expected: int, where: str, what: str) -> bytes:
    """One zstd frame inflated, never past ``expected`` bytes; it must give exactly that."""
    import zstandard

    out = bytearray()
    try:
        reader = zstandard.ZstdDecompressor().stream_reader(frame, read_across_frames=False)
        while len(out) <= expected:
            chunk = reader.read(min(_CHUNK, expected + 1 - len(out)))
            if not chunk:
                break
            out += chunk
    except zstandard.ZstdError as err:
        raise fail(where, f"{what}: zstd frame does not inflate ({err})") from err
    if len(out) != expected:
        more = "more than" if len(out) > expected else f"{len(out)}, not"
        raise fail(where, f"{what} inflates to {more} its original_size {expected}")
    return bytes(out)


def read_code_object(path: Path, archive: Archive, entry: TocEntry) -> bytes:
    """The code object ``entry`` names, decompressed and checked against its original_size."""
    where = str(path)
    what = f"{entry.key} {entry.target}"
    if not 0 <= entry.ordinal < len(archive.frames):
        raise fail(where, f"{what}: ordinal {entry.ordinal} of {len(archive.frames)}")
    offset, length = archive.frames[entry.ordinal]
    if archive.compression_scheme == "none" and length != entry.original_size:
        raise fail(where, f"{what} is {length} bytes, its original_size {entry.original_size}")
    with _open_regular(path) as fh:
        if os.fstat(fh.fileno()).st_size != archive.size:
            raise fail(where, "changed since its TOC was read")
        fh.seek(offset)
        data = fh.read(length)
    if len(data) != length:
        raise fail(where, f"{what} runs past the end of the file")
    if archive.compression_scheme == "none":
        return data
    return _inflate(data, entry.original_size, where, what)
