"""Read-only ELF facts: SONAME, NEEDED, RPATH/RUNPATH, symbol versions, offload-bundle targets.

Files are opened through ``mmap`` and parsed with pyelftools, which only touches the headers and
sections it is asked for, so a 1.3 GB library costs a few pages of memory, not its size. Where a
file is not on disk (a wheel member a plan reads in place), the functions take a
:class:`ByteView` instead of a path: a seekable stream that also slices like a buffer.

Offload bundles (the device code of a HIP host library) live in the ``.hip_fatbin`` section, one
bundle per translation unit, back to back (usually 4 KiB aligned). Two formats occur:

* uncompressed: ``__CLANG_OFFLOAD_BUNDLE__``, u64 entry count, then per entry u64 offset (from the
  bundle start), u64 size, u64 id length and the id (``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-``);
* compressed (``--offload-compress``): ``CCOB``, u16 version, u16 method (0 zlib, 1 zstd), then
  the total size (v2: u32, v3: u64; absent in v1), the uncompressed size (v1/v2: u32, v3: u64) and
  a u64 hash, then the payload, which decompresses to an uncompressed bundle. Only the first few
  KiB of the payload are decompressed: the entry ids sit at the start of the inner bundle.

Size: every read-only ELF fact behind one mmap-backed reader (files and in-place wheel members
alike).
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, cast

from rocm_build.binary import inflate

if TYPE_CHECKING:
    from elftools.elf.elffile import ELFFile

__all__ = [
    "BundleFormatError",
    "ByteView",
    "CcobHeader",
    "ElfInfo",
    "NotElfError",
    "OffloadBundle",
    "OffloadEntry",
    "is_elf",
    "offload_bundles",
    "offload_targets",
    "read_elf",
    "target_id_of_bundle_id",
    "target_of_bundle_id",
]

ELF_MAGIC = b"\x7fELF"
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
CCOB_MAGIC = b"CCOB"
ZSTD_FRAME_MAGIC = b"\x28\xb5\x2f\xfd"
FATBIN_SECTION = ".hip_fatbin"
#: the marker of a kpack-split library (see :mod:`rocm_build.binary.kpack`)
KPACK_REF_SECTION = ".rocm_kpack_ref"

# How much decompressed output is enough to read a bundle's entry table. Entry ids are ~40 bytes
# and a bundle has one entry per target plus the host one, so 64 KiB covers hundreds of targets.
_HEADER_PREFIX = 64 * 1024


class NotElfError(ValueError):
    """The file is not an ELF file (or is truncated/corrupt)."""


class BundleFormatError(NotElfError):
    """An offload bundle whose header is damaged (entries past its section, a compressed
    bundle's size field that disagrees with the section, an unknown format version)."""


@dataclass(frozen=True)
class ElfInfo:
    """What the dynamic loader and a bundler need to know about one ELF file."""

    path: str
    machine: str  # pyelftools e_machine name: "EM_X86_64", "EM_AARCH64", "EM_AMDGPU", ...
    elf_class: int  # 32 or 64
    elf_type: str  # "ET_DYN", "ET_EXEC", "ET_REL"
    soname: str | None
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    #: Symbol versions required from other objects, e.g. ("GLIBC_2.14", "GLIBCXX_3.4.21").
    version_needs: tuple[str, ...]
    has_fatbin: bool
    #: (library, versions) pairs from .gnu.version_r, e.g. ("libc.so.6", ("GLIBC_2.14",)).
    versions_by_library: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: read from a :class:`ByteView` (``path`` names it, no file): the C strings of its
    #: ``.rodata`` that name a shared library (``*.so*``), for :func:`strings_present`'s question
    #: asked without the file; None when read from a file
    so_strings: frozenset[str] | None = None
    #: has a ``.rocm_kpack_ref`` section: kpack-split, its device code in archives (kpack.py)
    has_kpack_ref: bool = False
    #: has a PT_INTERP segment (asks for a program interpreter: a position-independent program)
    has_interp: bool = False

    @property
    def is_host(self) -> bool:
        """Code the host's dynamic loader runs (not a GPU code object)."""
        return self.machine not in ("EM_AMDGPU", "EM_CUDA")

    @property
    def is_executable(self) -> bool:
        """A program (ET_EXEC, or an ET_DYN with PT_INTERP), not a library."""
        return self.elf_type == "ET_EXEC" or (self.elf_type == "ET_DYN" and self.has_interp)

    @property
    def search_path(self) -> tuple[str, ...]:
        """The effective entries: the loader ignores DT_RPATH when DT_RUNPATH is present."""
        return self.runpath if self.runpath else self.rpath

    @property
    def glibc_versions(self) -> tuple[str, ...]:
        """Only the ``GLIBC_*`` versions among :attr:`version_needs`."""
        return tuple(v for v in self.version_needs if v.startswith("GLIBC_"))


@dataclass(frozen=True)
class OffloadEntry:
    bundle_id: str  # "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"
    offset: int  # within the (decompressed) bundle
    size: int

    @property
    def target(self) -> str | None:
        """The gfx name without features, or None for the host entry."""
        return target_of_bundle_id(self.bundle_id)


@dataclass(frozen=True)
class OffloadBundle:
    file_offset: int  # where the bundle starts in the file
    size: int  # bytes it occupies in the file (compressed size for CCOB)
    compressed: bool
    entries: tuple[OffloadEntry, ...]
    #: bytes of the header: magic, count and entry table (CCOB: the CCOB header)
    header_size: int = 0
    #: CCOB only: the header's fields
    ccob: CcobHeader | None = None

    @property
    def targets(self) -> frozenset[str]:
        return frozenset(t for e in self.entries if (t := e.target))


class ByteView(Protocol):
    """A file's bytes without the file: a seekable stream that also slices (``view[a:b]``),
    has a length and finds (what ``mmap`` offers and the readers here use)."""

    name: str

    def __len__(self) -> int: ...
    def __getitem__(self, key: slice) -> bytes: ...
    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int: ...
    def read(self, size: int = -1) -> bytes: ...
    def seek(self, offset: int, whence: int = 0) -> int: ...
    def tell(self) -> int: ...


#: what the readers here take: a file's path, or its bytes as a :class:`ByteView`
Source = Path | str | ByteView

_SO_STRING = re.compile(rb"(?<=\0)[\w.+-]*\.so(?:\.\d+)*(?=\0)")  # a library file's name


def is_elf(path: Path | str) -> bool:
    try:
        with Path(path).open("rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


@dataclass(frozen=True)
class CcobHeader:
    """The fields of a compressed bundle's header (clang's ``--offload-compress``)."""

    version: int  # 1, 2 or 3
    method: int  # 0 zlib, 1 zstd
    total: int | None  # bytes of the whole compressed bundle, header included (None in v1)
    raw_size: int  # bytes of the bundle it decompresses to
    digest: bytes  # 8 bytes: the start of the MD5 of the decompressed bundle
    payload: int  # offset of the compressed data from the bundle start


@contextmanager
def _mapped(path: Source) -> Iterator[Any]:
    """The bytes of ``path``: the file mapped, or the view as it is."""
    if not isinstance(path, (str, Path)):
        if not len(path):
            raise NotElfError(f"{path.name}: empty file")
        yield path
        return
    with Path(path).open("rb") as fh:
        try:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError as err:  # empty file
            raise NotElfError(f"{path}: empty file") from err
        try:
            yield mm
        finally:
            mm.close()


@contextmanager
def _elf(path: Source) -> Iterator[tuple[ELFFile, Any]]:
    # pyelftools is imported on first use: it costs ~0.2 s, which the no-op check does not need.
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    with _mapped(path) as mm:
        if mm[:4] != ELF_MAGIC:
            raise NotElfError(f"{_shown(path)}: not an ELF file")
        try:
            yield ELFFile(cast(IO[bytes], mm)), mm
        except (ELFError, struct.error) as err:
            raise NotElfError(f"{_shown(path)}: unreadable ELF file ({err})") from err


def _shown(path: Source) -> str:
    return str(path) if isinstance(path, (str, Path)) else path.name


def _tag_text(tag: Any, attr: str) -> str:
    # pyelftools sets these attributes per tag kind; its stubs do not know them.
    return str(getattr(tag, attr))


def _split_path(value: Any) -> tuple[str, ...]:
    text = value.decode() if isinstance(value, bytes) else str(value)
    return tuple(p for p in text.split(":") if p)


def read_elf(path: Source) -> ElfInfo:
    """The dynamic-linking facts of ``path``; raises :class:`NotElfError` for anything else.
    From a :class:`ByteView`, also its ``.rodata``'s library names (``so_strings``)."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.gnuversions import GNUVerNeedSection

    with _elf(path) as (elf, _mm):
        soname: str | None = None
        needed: list[str] = []
        rpath: list[str] = []
        runpath: list[str] = []
        versions: set[str] = set()
        by_library: list[tuple[str, tuple[str, ...]]] = []
        has_fatbin = has_kpack_ref = False
        for section in elf.iter_sections():
            if section.name == FATBIN_SECTION and section["sh_type"] != "SHT_NOBITS":
                has_fatbin = True
            has_kpack_ref = has_kpack_ref or section.name == KPACK_REF_SECTION
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    kind = tag.entry.d_tag
                    if kind == "DT_NEEDED":
                        needed.append(_tag_text(tag, "needed"))
                    elif kind == "DT_SONAME":
                        soname = _tag_text(tag, "soname")
                    elif kind == "DT_RPATH":
                        rpath.extend(_split_path(_tag_text(tag, "rpath")))
                    elif kind == "DT_RUNPATH":
                        runpath.extend(_split_path(_tag_text(tag, "runpath")))
            elif isinstance(section, GNUVerNeedSection):
                for verneed, auxiliaries in section.iter_versions():
                    names = tuple(str(aux.name) for aux in auxiliaries)
                    versions.update(names)
                    by_library.append((str(verneed.name), names))
        if elf["e_type"] == "ET_NONE" or elf["e_machine"] == "EM_NONE":
            raise NotElfError(f"{_shown(path)}: an ELF file of no type or no machine")
        viewed = not isinstance(path, (str, Path))
        return ElfInfo(
            path=_shown(path),
            machine=str(elf["e_machine"]),
            elf_class=int(elf.elfclass),
            elf_type=str(elf["e_type"]),
            soname=soname,
            needed=tuple(needed),
            rpath=tuple(rpath),
            runpath=tuple(runpath),
            version_needs=tuple(sorted(versions, key=_version_sort_key)),
            has_fatbin=has_fatbin,
            versions_by_library=tuple(by_library),
            so_strings=_so_strings(elf, _mm) if viewed else None,
            has_kpack_ref=has_kpack_ref,
            has_interp=any(seg["p_type"] == "PT_INTERP" for seg in elf.iter_segments()),
        )


_RODATA_STEP = 1 << 20  # bytes of .rodata scanned at a time
_LONGEST_NAME = 4096  # a string longer than this between NULs names no library file


def _rodata_strings(elf: ELFFile, mm: Any) -> Iterator[bytes]:
    """The ``.rodata`` section in pieces that start after a NUL and end before one (each piece
    NUL-framed, so whole C strings match as in the whole section), a few MB at a time: its
    size is the file's word, and a crafted one may cover the whole (inflated) file."""
    section = elf.get_section_by_name(".rodata")
    if section is None or section["sh_type"] == "SHT_NOBITS":
        return
    pos = int(section["sh_offset"])
    end = min(pos + int(section["sh_size"]), len(mm))
    carry, partial = b"", False  # partial: the carry is the end of a longer string
    while pos < end:
        block = carry + bytes(mm[pos : min(pos + _RODATA_STEP, end)])
        pos += _RODATA_STEP
        cut = len(block) if pos >= end else block.rfind(b"\0")
        if cut < 0:  # no NUL in a whole step: keep only what could still end a short string
            carry, partial = block[-_LONGEST_NAME:], partial or len(block) > _LONGEST_NAME
            continue
        body = block[:cut]
        if partial:  # the first string's start was dropped: it names nothing
            first = body.find(b"\0")
            body = body[first + 1 :] if first >= 0 else b""
        rest = block[cut + 1 :]
        carry, partial = rest[-_LONGEST_NAME:], len(rest) > _LONGEST_NAME
        yield b"\0" + body + b"\0"


def _so_strings(elf: ELFFile, mm: Any) -> frozenset[str]:
    found: set[str] = set()
    for piece in _rodata_strings(elf, mm):
        if b".so" in piece:
            found.update(m.decode(errors="replace") for m in _SO_STRING.findall(piece))
    return frozenset(found)


def strings_present(path: Path | str, names: Iterable[str]) -> frozenset[str]:
    """Which of ``names`` occur as whole C strings in the file's read-only data (``.rodata``).

    This is where the literal a library passes to ``dlopen`` lives; device code and symbol
    tables are not searched, so a 1.3 GB library costs a scan of its few MB of ``.rodata``.
    """
    wanted = sorted({re.escape(n.encode()) for n in names}, key=len, reverse=True)
    if not wanted:
        return frozenset()
    pattern = re.compile(b"(?<=\0)(?:" + b"|".join(wanted) + b")(?=\0)")
    found: set[str] = set()
    with _elf(path) as (elf, mm):
        for piece in _rodata_strings(elf, mm):
            found.update(m.decode() for m in pattern.findall(piece))
    return frozenset(found)


def _version_sort_key(name: str) -> tuple[str, tuple[int, ...]]:
    base, _, number = name.partition("_")
    parts = tuple(int(p) for p in re.findall(r"\d+", number))
    return base, parts


# --- offload bundles ------------------------------------------------------------------------------

# <kind>-<triple>-<target id>; the triple is amdgcn-amd-amdhsa with an optional (often empty)
# environment component, so "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-" and the older
# "hip-amdgcn-amd-amdhsa-gfx906" both parse.
_ID_RE = re.compile(r"^(?P<kind>[^-]+)-(?P<triple>amdgcn-amd-amdhsa(?:-[^-]*)?)-(?P<tid>.+)$")


def target_of_bundle_id(bundle_id: str) -> str | None:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` -> ``gfx90a``; host/other entries -> None."""
    target = target_id_of_bundle_id(bundle_id)
    return target.split(":", 1)[0] if target else None


def target_id_of_bundle_id(bundle_id: str) -> str | None:
    """``hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-`` -> ``gfx90a:xnack-`` (features kept)."""
    match = _ID_RE.match(bundle_id)
    if not match or match["tid"].startswith(":"):
        return None
    return str(match["tid"])


def _parse_bundle_header(
    data: bytes | Any, start: int, limit: int, *, strict: bool = False
) -> tuple[tuple[OffloadEntry, ...], int, int]:
    """Entries of the uncompressed bundle at ``start``, its size (end of its last entry) and
    the size of its header. ``strict``: ``limit`` is where the bundle's room ends (its section's
    end), so an entry past it is a damaged header, not a short read."""
    pos = start + len(BUNDLE_MAGIC)
    if pos + 8 > limit:
        raise BundleFormatError("truncated offload bundle header")
    (count,) = struct.unpack("<Q", data[pos : pos + 8])
    pos += 8
    if count > 100_000:
        raise BundleFormatError(f"implausible offload bundle entry count {count}")
    entries: list[OffloadEntry] = []
    end = pos
    for _ in range(count):
        if pos + 24 > limit:
            raise BundleFormatError("truncated offload bundle entry table")
        offset, size, id_len = struct.unpack("<QQQ", data[pos : pos + 24])
        pos += 24
        if pos + id_len > limit:
            raise BundleFormatError("truncated offload bundle id")
        bundle_id = bytes(data[pos : pos + id_len]).decode("ascii", "replace")
        pos += id_len
        entries.append(OffloadEntry(bundle_id, offset, size))
        end = max(end, start + offset + size)
    if strict:
        for e in entries:
            if e.size and (e.offset < pos - start or start + e.offset + e.size > limit):
                raise BundleFormatError(
                    f"entry {e.bundle_id} at {e.offset}+{e.size} lies outside the bundle "
                    f"(header {pos - start} bytes, {limit - start} bytes of room)"
                )
    end = max(end, pos)
    return tuple(entries), end - start, pos - start


_CCOB_HEADER = {1: 20, 2: 24, 3: 32}  # bytes of a compressed bundle's header, by version


def ccob_header(data: bytes | Any, start: int, end: int | None = None) -> CcobHeader:
    """The header of the compressed bundle at ``start`` (``end``: where its room ends)."""
    end = len(data) if end is None else end
    if start + 8 > end:
        raise BundleFormatError(f"truncated compressed bundle header at {start}")
    version, method = struct.unpack("<HH", data[start + 4 : start + 8])
    if method not in (0, 1):
        raise BundleFormatError(f"unknown compression method {method} of a compressed bundle")
    if version not in _CCOB_HEADER:
        raise BundleFormatError(f"unknown compressed offload bundle version {version}")
    if start + _CCOB_HEADER[version] > end:
        raise BundleFormatError(f"truncated compressed bundle header at {start}")
    if version == 1:
        (raw,) = struct.unpack("<I", data[start + 8 : start + 12])
        head = CcobHeader(version, method, None, raw, bytes(data[start + 12 : start + 20]), 20)
    elif version == 2:
        total, raw = struct.unpack("<II", data[start + 8 : start + 16])
        head = CcobHeader(version, method, total, raw, bytes(data[start + 16 : start + 24]), 24)
    else:
        total, raw = struct.unpack("<QQ", data[start + 8 : start + 24])
        head = CcobHeader(version, method, total, raw, bytes(data[start + 24 : start + 32]), 32)
    if head.raw_size > inflate.RAW_LIMIT:
        raise BundleFormatError(
            f"compressed bundle at {start} says it decompresses to {head.raw_size} bytes, more "
            f"than a bundle may ({inflate.RAW_LIMIT >> 30} GiB)"
        )
    return head


class _Span:
    """Bytes [pos, limit) of a buffer, read in order (what a decompressor takes)."""

    def __init__(self, data: Any, pos: int, limit: int) -> None:
        self._data, self._pos, self._limit = data, pos, limit

    def __call__(self, n: int) -> bytes:
        hi = min(self._pos + n, self._limit)
        block = bytes(self._data[self._pos : hi]) if hi > self._pos else b""
        self._pos += len(block)
        return block


def _decompress_prefix(
    mm: Any, head: CcobHeader, start: int, limit: int, *, want_end: bool
) -> tuple[bytes, int | None]:
    """The first bytes of a compressed payload and, if ``want_end``, where the payload ends
    (v1 has no size field: a zstd frame is walked, zlib is decompressed to its end, never past
    the size its header declares)."""
    payload = start + head.payload
    method = 1 if mm[payload : payload + 4] == ZSTD_FRAME_MAGIC else 0
    stream = inflate.Decompressed(_Span(mm, payload, limit), method, head.raw_size)
    try:
        prefix = stream.read(min(_HEADER_PREFIX, head.raw_size + 1))
        if not want_end:
            return prefix, None
        if method == 1:
            return prefix, inflate.zstd_frame_end(mm, payload, limit)
        if stream.drain() != head.raw_size:
            raise BundleFormatError(
                f"compressed bundle at {start} decompresses to {stream.done} bytes, its header "
                f"says {head.raw_size}"
            )
    except inflate.FormatError as err:
        raise BundleFormatError(f"compressed bundle at {start}: its payload {err}") from err
    consumed = stream.consumed
    return prefix, limit if consumed is None else payload + consumed


def _next_bundle(mm: Any, pos: int, end: int) -> tuple[int, bool]:
    """Where the next bundle starts at or after ``pos`` (-1: none) and whether it is an
    uncompressed one. Bundles lie back to back, so the search looks in a window that doubles
    until it finds one: a search to the section's end would read every page of a 1.3 GB
    library (into this process's resident memory, as the file is mapped) to find a magic that
    occurs in none of them."""
    window = 1 << 16
    while pos < end:
        hi = min(end, pos + window + len(BUNDLE_MAGIC))
        plain, ccob = mm.find(BUNDLE_MAGIC, pos, hi), mm.find(CCOB_MAGIC, pos, hi)
        if plain >= 0 and (ccob < 0 or plain < ccob):
            return plain, True
        if ccob >= 0:
            return ccob, False
        pos, window = pos + window, window * 2
    return -1, False


_RELEASE_EVERY = 32 << 20  # bytes of a mapped file walked between releases of its pages


def _release(mm: Any, start: int, end: int) -> int:
    """Drop this process's mapping of the pages of ``mm`` in [start, end) (rounded down to
    pages); returns where the next release starts. A page fault maps a whole large folio of the
    page cache (1 MB and more per bundle header read, measured), so walking the 235 bundles of a
    1.8 GB rocSOLVER left 270 MB of it resident in this process (the peak memory a user sees);
    the pages stay in the page cache, and a later read maps them again."""
    page = mmap.PAGESIZE
    lo, hi = start - start % page, end - end % page
    if not isinstance(mm, mmap.mmap):  # a view keeps a bounded cache of its own
        return start
    if hi > lo and hi - lo >= _RELEASE_EVERY and hasattr(mmap, "MADV_DONTNEED"):
        mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)
        return hi
    return start


def _walk_bundles(mm: Any, start: int, end: int) -> Iterator[OffloadBundle]:
    pos = released = start
    while pos < end:
        released = _release(mm, released, pos)
        pos, plain = _next_bundle(mm, pos, end)
        if pos < 0:
            return
        if plain:
            entries, size, header = _parse_bundle_header(mm, pos, end, strict=True)
            yield OffloadBundle(pos, size, False, entries, header)
        else:
            head = ccob_header(mm, pos, end)
            total = head.total
            if total is not None and not head.payload < total <= end - pos:
                raise BundleFormatError(
                    f"compressed bundle at {pos}: its size field says {total} bytes, the "
                    f"section has {end - pos} left"
                )
            # The total size tells where the bundle ends: scanning for the next "CCOB" would be
            # wrong, compressed data can contain those bytes.
            limit = pos + total if total else end
            prefix, payload_end = _decompress_prefix(mm, head, pos, limit, want_end=total is None)
            if not prefix.startswith(BUNDLE_MAGIC):
                raise BundleFormatError(f"compressed offload bundle at {pos} holds no bundle")
            entries, _inner, _head = _parse_bundle_header(prefix, 0, len(prefix))
            for e in entries:
                if e.offset + e.size > head.raw_size:
                    raise BundleFormatError(
                        f"compressed bundle at {pos}: entry {e.bundle_id} at {e.offset}+{e.size} "
                        f"lies past the {head.raw_size} bytes its header says it decompresses to"
                    )
            size = total if total else (payload_end or end) - pos
            yield OffloadBundle(pos, size, True, entries, head.payload, head)
        pos += max(size, len(BUNDLE_MAGIC))


def offload_bundles(path: Source) -> tuple[OffloadBundle, ...]:
    """Every offload bundle in the ``.hip_fatbin`` section of ``path`` (empty if none)."""
    with _elf(path) as (elf, mm):
        section = elf.get_section_by_name(FATBIN_SECTION)
        if section is None or section["sh_type"] == "SHT_NOBITS":
            return ()
        start = int(section["sh_offset"])
        end = min(start + int(section["sh_size"]), len(mm))
        return tuple(_walk_bundles(mm, start, end))


def offload_bundles_at(path: Source, start: int, size: int) -> tuple[OffloadBundle, ...]:
    """Every offload bundle in a byte range of any file: a PE image's ``.hip_fat`` section."""
    with _mapped(path) as mm:
        return tuple(_walk_bundles(mm, start, min(start + size, len(mm))))


def offload_targets(path: Path | str) -> frozenset[str]:
    """The gfx targets ``path`` carries device code for (features stripped: ``gfx90a``)."""
    targets: set[str] = set()
    for bundle in offload_bundles(path):
        targets |= bundle.targets
    return frozenset(targets)
