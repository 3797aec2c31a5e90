"""Pruning offload bundles: keep the device code that serves some gfx targets, drop the rest.

An ELF library's ``.hip_fatbin`` holds offload bundles (see :mod:`rocm_build.binary.elf`), one entry
per target. A one-GPU wheel needs the host entry and the entries that serve its targets
(:func:`rocm_build.common.arch.serves_id`: the exact processor, its feature variants, the generic
processors that cover it). Everything here is planned from the bundles' headers and applied as
:class:`~rocm_build.binary.elfpatch.Overlay` s while the file is streamed into the wheel, so the
library is never read whole and its layout does not move:

* uncompressed bundle: a new header lists the kept entries at their original offsets (zeros
  after it up to the old header's end), and the dropped entries' bytes become zeros. Section
  sizes, file offsets and the ``.hipFatBinSegment`` pointers stay as they are;
* compressed bundle (``CCOB`` v1-v3, zlib or zstd): decompressed as a stream, the kept entries
  laid out again (each at its old alignment), compressed with the same method at the first level
  that makes it no larger than the old one, written in place with its header's sizes and hash
  updated, zeros after it. When no level gets it small enough it stays as it was.

Entries this module cannot name (another triple, another kind) are kept.
"""

from __future__ import annotations

import hashlib
import logging
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO

from rocm_build.binary import elf, inflate
from rocm_build.binary.elf import CcobHeader, OffloadBundle, OffloadEntry
from rocm_build.binary.elfpatch import Overlay
from rocm_build.common import arch

__all__ = [
    "BundleCut",
    "PrunePlan",
    "PruneSummary",
    "keeps_entry",
    "overlays",
    "plan_prune",
    "recompress",
]

log = logging.getLogger(__name__)

#: Levels tried, in order, when a compressed bundle is written again (zlib's and zstd's scales).
LEVELS = {0: (6, 9), 1: (5, 9, 19)}
#: Bumped when what the overlays produce changes: part of the deflate cache's key.
FORMAT = "prune-1"
_CHUNK = 1 << 20


def keeps_entry(bundle_id: str, targets: Sequence[str]) -> bool:
    """Is the entry ``bundle_id`` kept for ``targets``? The host entry and entries of other
    kinds are; a device entry when its target id serves one of the targets."""
    target = elf.target_id_of_bundle_id(bundle_id)
    return target is None or any(arch.serves_id(target, t) for t in targets)


@dataclass(frozen=True)
class BundleCut:
    """One bundle and what pruning keeps of it."""

    bundle: OffloadBundle
    kept: tuple[OffloadEntry, ...]
    dropped: tuple[OffloadEntry, ...]

    @property
    def changed(self) -> bool:
        return bool(self.dropped)


@dataclass(frozen=True)
class PruneSummary:
    """What pruning one file keeps and drops, in numbers: its bundles (pruned, compressed), the
    target ids kept and dropped, the bytes of code objects kept and dropped (uncompressed)."""

    bundles: int
    pruned_bundles: int
    compressed_bundles: int
    kept: tuple[str, ...]
    dropped: tuple[str, ...]
    kept_bytes: int
    dropped_bytes: int

    def as_json(self) -> dict[str, Any]:
        return {
            "bundles": self.bundles,
            "pruned_bundles": self.pruned_bundles,
            "compressed_bundles": self.compressed_bundles,
            "kept": list(self.kept),
            "dropped": list(self.dropped),
            "kept_bytes": self.kept_bytes,
            "dropped_bytes": self.dropped_bytes,
        }


@dataclass(frozen=True)
class PrunePlan:
    """What pruning ``path`` for ``targets`` keeps, bundle by bundle."""

    path: str
    targets: tuple[str, ...]
    cuts: tuple[BundleCut, ...]

    @property
    def changed(self) -> tuple[BundleCut, ...]:
        return tuple(c for c in self.cuts if c.changed)

    @property
    def kept_bytes(self) -> int:
        """Bytes of the kept device code objects (uncompressed)."""
        return sum(e.size for c in self.cuts for e in c.kept if e.target)

    @property
    def dropped_bytes(self) -> int:
        return sum(e.size for c in self.cuts for e in c.dropped)

    @property
    def ids_before(self) -> tuple[str, ...]:
        return _ids(e for c in self.cuts for e in (*c.kept, *c.dropped))

    @property
    def ids_after(self) -> tuple[str, ...]:
        return _ids(e for c in self.cuts for e in c.kept)

    def key(self) -> str:
        """What the overlays make of the file, for the deflate cache's key."""
        text = repr([(c.bundle.file_offset, [e.bundle_id for e in c.kept]) for c in self.changed])
        return f"{FORMAT} {hashlib.sha256(text.encode()).hexdigest()}"

    def summary(self) -> PruneSummary:
        return PruneSummary(
            bundles=len(self.cuts),
            pruned_bundles=len(self.changed),
            compressed_bundles=sum(1 for c in self.cuts if c.bundle.compressed),
            kept=self.ids_after,
            dropped=tuple(sorted(set(self.ids_before) - set(self.ids_after))),
            kept_bytes=self.kept_bytes,
            dropped_bytes=self.dropped_bytes,
        )


def _ids(entries: Iterator[OffloadEntry]) -> tuple[str, ...]:
    return tuple(sorted({t for e in entries if (t := elf.target_id_of_bundle_id(e.bundle_id))}))


def plan_prune(
    path: Path | str, targets: Sequence[str], bundles: Sequence[OffloadBundle] | None = None
) -> PrunePlan:
    """The cut of every bundle of ``path`` (``bundles``: already read). Raises
    :class:`~rocm_build.binary.elf.BundleFormatError` for a damaged bundle."""
    found = elf.offload_bundles(path) if bundles is None else bundles
    cuts = []
    for b in found:
        kept = tuple(e for e in b.entries if keeps_entry(e.bundle_id, targets))
        dropped = tuple(e for e in b.entries if not keeps_entry(e.bundle_id, targets))
        cuts.append(BundleCut(b, kept, dropped))
    return PrunePlan(str(path), tuple(targets), tuple(cuts))


def overlays(plan: PrunePlan) -> list[Overlay]:
    """The overlays that turn ``plan.path`` into its pruned form (see the module docstring)."""
    out: list[Overlay] = []
    for cut in plan.changed:
        b = cut.bundle
        if b.compressed:
            out.append(Overlay(b.file_offset, b.size, make=partial(recompress, plan.path, cut)))
            continue
        out.append(Overlay(b.file_offset, b.header_size, bundle_header(cut.kept)))
        keep = sorted((e.offset, e.offset + e.size) for e in cut.kept if e.size)
        for e in sorted(cut.dropped, key=lambda e: e.offset):
            # bytes a kept entry also names (one code object under two ids) stay
            for lo, hi in _minus((e.offset, e.offset + e.size), keep):
                out.append(Overlay(b.file_offset + lo, hi - lo))
    return _merged(out)


def _minus(span: tuple[int, int], keep: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    parts = [span]
    for klo, khi in keep:
        parts = [
            p for lo, hi in parts for p in ((lo, min(hi, klo)), (max(lo, khi), hi)) if p[0] < p[1]
        ]
    return parts


def _merged(items: list[Overlay]) -> list[Overlay]:
    """Overlays sorted, zero ones that touch or overlap merged (two dropped ids may share bytes)."""
    out: list[Overlay] = []
    for o in sorted(items, key=lambda o: o.offset):
        last = out[-1] if out else None
        zeros = last and not o.data and o.make is None and not last.data and last.make is None
        if last and zeros and o.offset <= last.offset + last.length:
            end = max(last.offset + last.length, o.offset + o.length)
            out[-1] = Overlay(last.offset, end - last.offset)
            continue
        out.append(o)
    return out


def bundle_header(entries: Sequence[OffloadEntry]) -> bytes:
    """An uncompressed bundle's header listing ``entries`` (offsets from the bundle start)."""
    head = bytearray(elf.BUNDLE_MAGIC + struct.pack("<Q", len(entries)))
    for e in entries:
        raw = e.bundle_id.encode("ascii")
        head += struct.pack("<QQQ", e.offset, e.size, len(raw)) + raw
    return bytes(head)


# --- compressed bundles ---------------------------------------------------------------------------


def _alignment(offset: int) -> int:
    """The alignment ``offset`` has (a power of two, at most 4 KiB: clang's bundle alignment)."""
    return min(offset & -offset, 4096) if offset else 4096


def _layout(kept: Sequence[OffloadEntry]) -> tuple[list[OffloadEntry], int]:
    """The kept entries at new offsets (in the old order, each at its old alignment) and the
    new bundle's size."""
    pos = len(bundle_header(kept))
    moved: dict[int, OffloadEntry] = {}
    for i, e in sorted(enumerate(kept), key=lambda p: (p[1].offset, p[0])):
        align = _alignment(e.offset)
        pos = (pos + align - 1) // align * align
        moved[i] = OffloadEntry(e.bundle_id, pos, e.size)
        pos += e.size
    return [moved[i] for i in range(len(kept))], pos


class _Slice:
    """``size`` bytes of an open file from ``start``, as a stream."""

    def __init__(self, fh: BinaryIO, start: int, size: int) -> None:
        self._fh, self._at, self._left = fh, start, size

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        self._fh.seek(self._at)
        data = self._fh.read(n)
        self._at += len(data)
        self._left -= len(data)
        return data


def _compressor(method: int, level: int) -> Any:
    if method == 1:
        import zstandard

        return zstandard.ZstdCompressor(level=level).compressobj()
    return zlib.compressobj(level)


def _inner(fh: BinaryIO, cut: BundleCut, head: CcobHeader) -> Iterator[bytes]:
    """The pruned inner bundle, in pieces (decompressing the old one as it goes, never past
    the size its header declares: see :mod:`rocm_build.binary.inflate`)."""
    moved, _size = _layout(cut.kept)
    b = cut.bundle
    payload = _Slice(fh, b.file_offset + head.payload, b.size - head.payload)
    reader = inflate.Decompressed(payload.read, head.method, head.raw_size)
    yield bundle_header(moved)
    pos = len(bundle_header(moved))
    order = sorted(range(len(cut.kept)), key=lambda i: (cut.kept[i].offset, i))
    for i in order:
        old, new = cut.kept[i], moved[i]
        yield bytes(new.offset - pos)
        pos = new.offset + new.size
        if not old.size:
            continue
        if old.offset < reader.done:
            raise elf.BundleFormatError("compressed bundle: two entries share bytes")
        reader.skip(old.offset - reader.done)
        left = old.size
        while left:
            block = reader.read(min(_CHUNK, left))
            if not block:
                raise elf.BundleFormatError("compressed bundle: entry past its end")
            left -= len(block)
            yield block
    if reader.drain() != head.raw_size:
        raise elf.BundleFormatError(
            f"compressed bundle decompresses to {reader.done} bytes, its header says "
            f"{head.raw_size}"
        )


def _packed(fh: BinaryIO, cut: BundleCut, head: CcobHeader, level: int) -> bytes | None:
    """The bundle of ``cut`` compressed again at ``level``; None once it is larger than the old
    one (no use going on: it would not fit in its place)."""
    comp = _compressor(head.method, level)
    digest = hashlib.md5(usedforsecurity=False)
    parts: list[bytes] = []
    raw = packed = 0
    room = cut.bundle.size - head.payload
    for piece in _inner(fh, cut, head):
        digest.update(piece)
        raw += len(piece)
        parts.append(comp.compress(piece))
        packed += len(parts[-1])
        if packed > room:
            return None
    parts.append(comp.flush())
    payload = b"".join(parts)
    total = head.payload + len(payload)
    if head.version == 1:
        sizes = struct.pack("<I", raw)
    else:
        sizes = struct.pack("<II" if head.version == 2 else "<QQ", total, raw)
    fields = struct.pack("<HH", head.version, head.method) + sizes + digest.digest()[:8]
    return elf.CCOB_MAGIC + fields + payload


def recompress(path: str, cut: BundleCut) -> bytes:
    """The bytes that replace the compressed bundle of ``cut`` (no more than it had)."""
    b = cut.bundle
    assert b.ccob is not None
    with Path(path).open("rb") as fh:
        try:
            for level in LEVELS[b.ccob.method]:
                out = _packed(fh, cut, b.ccob, level)
                if out is not None and len(out) <= b.size:
                    return out
        except inflate.FormatError as err:
            raise elf.BundleFormatError(f"compressed bundle at {b.file_offset}: {err}") from err
        log.warning(
            "%s: the compressed bundle at %d is no smaller pruned at any level tried: kept whole",
            path,
            b.file_offset,
        )
        fh.seek(b.file_offset)
        return fh.read(b.size)
