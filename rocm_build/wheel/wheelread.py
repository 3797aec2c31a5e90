"""Reading a wheel: its name, members, RECORD; every member name checked, every byte read checked.

Part of the wheel I/O that :mod:`rocm_build.wheel.wheelfile` re-exports (import it from there).

Size: the checked reader: member names, RECORD and every byte read go through one class.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import json
import os
import struct
import zipfile
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)

from rocm_build.common.errors import BundleError, UnsafeInput
from rocm_build.wheel.membernames import check_member_names, shown
from rocm_build.wheel.wheelopen import open_zip

CHUNK = 1 << 20  # read/copy unit
#: compressions a member may have (stored, deflated: what wheels use; bzip2, lzma: what zip
#: readers know); another, or encryption, makes the member unreadable to pip: refused
READABLE_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA)
#: the most bytes a member read whole (METADATA, WHEEL, a JSON record) may inflate to: a
#: crafted one of 1.5 GB would otherwise be held in memory, several times over once parsed
TEXT_LIMIT = 16 << 20
#: RECORD's limit: a line per file (torch's: about 3 MB)
RECORD_LIMIT = 128 << 20
LOCAL = struct.Struct("<4s5H3L2H")  # a local header: signature .. extra length (30 bytes)
_WINDOW = 1 << 16  # bytes read at a time while the local headers are checked


def record_hash(digest: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass(frozen=True)
class RecordEntry:
    path: str
    hash: str  # "sha256=..." or "" (RECORD itself)
    size: int | None


@dataclass(frozen=True)
class WheelName:
    """A wheel file name, parsed; ``str()`` gives it back in canonical form."""

    distribution: str  # as in the file name (underscores, case kept)
    version: str
    build: str
    tags: tuple[str, ...]  # "cp311-cp311-linux_x86_64", ...

    @classmethod
    def parse(cls, filename: str) -> WheelName:
        try:
            _name, _ver, build, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename as err:
            raise BundleError(f"{filename}: not a wheel file name ({err})") from err
        parts = filename[: -len(".whl")].split("-")
        build_text = f"{build[0]}{build[1]}" if build else ""
        return cls(parts[0], parts[1], build_text, _tag_strings(tags))

    @property
    def python_tag(self) -> str:
        return ".".join(sorted({t.split("-")[0] for t in self.tags}))

    @property
    def abi_tag(self) -> str:
        return ".".join(sorted({t.split("-")[1] for t in self.tags}))

    @property
    def platform_tag(self) -> str:
        return ".".join(sorted({t.split("-")[2] for t in self.tags}))

    def with_platform(self, platform: str) -> WheelName:
        tags = tuple(
            f"{py}-{abi}-{plat}"
            for py in self.python_tag.split(".")
            for abi in self.abi_tag.split(".")
            for plat in platform.split(".")
        )
        return WheelName(self.distribution, self.version, self.build, tags)

    def with_version(self, version: str) -> WheelName:
        return WheelName(self.distribution, version, self.build, self.tags)

    def __str__(self) -> str:
        build = f"-{self.build}" if self.build else ""
        ver = self.version.replace("-", "_")
        return (
            f"{self.distribution}-{ver}{build}-{self.python_tag}-{self.abi_tag}"
            f"-{self.platform_tag}.whl"
        )


def _tag_strings(tags: Iterable[Tag]) -> tuple[str, ...]:
    return tuple(sorted(f"{t.interpreter}-{t.abi}-{t.platform}" for t in tags))


@dataclass(frozen=True)
class Member:
    """One archive member as the input's central directory describes it."""

    name: str
    header_offset: int
    compress_type: int
    compress_size: int
    file_size: int
    crc: int
    date_time: tuple[int, int, int, int, int, int]
    external_attr: int
    flag_bits: int

    @property
    def is_dir(self) -> bool:
        return self.name.endswith("/")

    @property
    def mode(self) -> int:
        return (self.external_attr >> 16) & 0o7777


class WheelReader:
    """A wheel opened for reading: members, RECORD, METADATA, WHEEL; streams, never loads.

    Opening it checks, from the central directory alone (no member is read), that every member
    name is safe to extract (:func:`check_member_names`), that METADATA, WHEEL and RECORD are
    there, and that RECORD lists exactly the files with their sizes. Every member read out in
    full (``read_bytes``, ``extract``, ``WheelWriter.copy_member``) is checked against its RECORD
    hash in the same pass; a mismatch raises :class:`UnsafeInput`.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.name = WheelName.parse(self.path.name)
        self._zip = open_zip(self.path)
        try:
            infos = self._zip.infolist()
            check_member_names(self.path.name, ((i.filename, i.external_attr) for i in infos))
            self.members: tuple[Member, ...] = tuple(
                Member(
                    name=info.filename,
                    header_offset=info.header_offset,
                    compress_type=info.compress_type,
                    compress_size=info.compress_size,
                    file_size=info.file_size,
                    crc=info.CRC,
                    date_time=info.date_time,
                    external_attr=info.external_attr,
                    flag_bits=info.flag_bits,
                )
                for info in infos
            )
            self._by_name = {m.name: m for m in self.members}
            #: member -> where its data starts, its local header checked against the directory
            self._offsets = self._checked_locals()
            self.dist_info = self._find_dist_info()
            for required in ("METADATA", "WHEEL", "RECORD"):
                if f"{self.dist_info}/{required}" not in self._by_name:
                    raise self._unsafe(f"{self.dist_info}/{required}", "is missing")
            #: member -> its verified RECORD hash, once its bytes have been read and checked
            self.verified: dict[str, str] = {}
            self.record: dict[str, RecordEntry] = {}  # RECORD's own check: size and CRC-32
            self.record = self._read_record()
            self._check_record()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        fp = self._zip.fp  # open_zip's file: the zip leaves it open
        self._zip.close()
        if fp is not None:
            fp.close()

    def __enter__(self) -> WheelReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unsafe(self, member: str, why: str) -> UnsafeInput:
        return UnsafeInput(
            f"{self.path.name}: member '{shown(member)}' {why}: the wheel is unsafe or "
            "corrupt; do not install it, rebuild it (or download it again from a source you trust)"
        )

    def _find_dist_info(self) -> str:
        tops = {m.name.split("/", 1)[0] for m in self.members if "/" in m.name}
        want = canonicalize_name(self.name.distribution)
        for top in sorted(tops):
            if top.endswith(".dist-info"):
                name = top[: -len(".dist-info")].rsplit("-", 1)[0]
                if canonicalize_name(name) == want:
                    return top
        raise UnsafeInput(
            f"{self.path.name}: no .dist-info folder for {self.name.distribution} (no METADATA, "
            "WHEEL or RECORD): not a valid wheel; rebuild it"
        )

    def _read_record(self) -> dict[str, RecordEntry]:
        """RECORD, parsed: a row naming a file the wheel does not have stops the read there."""
        name = f"{self.dist_info}/RECORD"
        text = self.read_bytes(name, limit=RECORD_LIMIT).decode("utf-8", errors="replace")
        unsigned = (name, f"{name}.jws", f"{name}.p7s")
        out: dict[str, RecordEntry] = {}
        try:
            for row in csv.reader(io.StringIO(text)):
                if not row:
                    continue
                path = row[0]
                if path not in self._by_name and path not in unsigned:
                    raise self._unsafe(path, "is listed in RECORD but not in the wheel")
                digest = row[1] if len(row) > 1 else ""
                size = int(row[2]) if len(row) > 2 and row[2] else None
                out[path] = RecordEntry(path, digest, size)
        except (csv.Error, ValueError) as err:
            raise self._unsafe(name, f"cannot be read ({err})") from None
        return out

    def _check_record(self) -> None:
        """RECORD against the central directory: same files, same sizes (no member is read)."""
        record_name = f"{self.dist_info}/RECORD"
        unsigned = (record_name, f"{record_name}.jws", f"{record_name}.p7s")
        for m in self.members:
            if m.is_dir or m.name in unsigned:
                continue
            entry = self.record.get(m.name)
            if entry is None:
                raise self._unsafe(m.name, "is not listed in RECORD")
            if entry.size is not None and entry.size != m.file_size:
                raise self._unsafe(m.name, f"has {m.file_size} bytes but RECORD says {entry.size}")
            if entry.hash and _record_algo(entry.hash) is None:
                raise self._unsafe(m.name, f"has the hash '{shown(entry.hash)}' in RECORD")

    def member(self, name: str) -> Member:
        try:
            return self._by_name[name]
        except KeyError:
            raise BundleError(f"{self.path.name}: has no member {name}") from None

    def has(self, name: str) -> bool:
        return name in self._by_name

    def checker(self, name: str) -> RecordCheck:
        """A running check of ``name``'s bytes against RECORD and the central directory."""
        member = self.member(name)
        entry = self.record.get(name)
        return RecordCheck(name, member.file_size, member.crc, entry.hash if entry else "", self)

    def read_bytes(self, name: str, *, limit: int = TEXT_LIMIT) -> bytes:
        """Whole member, checked against RECORD: for small text files (METADATA, WHEEL). One
        that would inflate to more than ``limit`` bytes is refused unread."""
        member = self.member(name)
        if member.file_size > limit:
            raise self._unsafe(
                name,
                f"inflates to {member.file_size} bytes, more than such a file may have "
                f"({limit >> 20} MiB)",
            )
        check = self.checker(name)
        parts: list[bytes] = []
        try:
            with self._zip.open(name) as fh:  # reads no more than the directory's size
                while block := fh.read(CHUNK):
                    check.update(block)
                    parts.append(block)
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise self._unsafe(name, f"cannot be read ({err})") from None
        check.finish()
        return b"".join(parts)

    def read_text(self, name: str) -> str:
        try:
            return self.read_bytes(name).decode("utf-8")
        except UnicodeDecodeError as err:
            raise self._unsafe(
                name, f"is not UTF-8 text ({err.reason} at byte {err.start})"
            ) from None

    def read_json_object(self, name: str) -> dict[str, Any] | None:
        """The member as a JSON object (checked against RECORD); None when it is no JSON, is
        nested too deep to read, or holds another type (a crafted or another tool's file)."""
        try:
            data = json.loads(self.read_bytes(name))
        except (ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None

    def open(self, name: str) -> IO[bytes]:
        """The member's bytes as a stream, not checked against RECORD (see ``extract``)."""
        return self._zip.open(name)

    def head(self, name: str, size: int) -> bytes:
        try:
            with self._zip.open(name) as fh:
                return fh.read(size)
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise self._unsafe(name, f"cannot be read ({err})") from None

    def extract(self, name: str, folder: Path, as_name: str | None = None) -> Path:
        """Stream member ``name`` to ``folder / (as_name or name)`` and return that path.

        Bounded memory; keeps the member's permission bits; refuses a destination that is not
        inside ``folder`` (defence in depth: names were checked on opening) and does not follow
        a symlink at the destination. The bytes are checked against RECORD while they are
        written (hashed on a second thread, so the check costs no extra pass); on a mismatch the
        file is removed and :class:`UnsafeInput` raised.
        """
        root = folder.resolve()
        dest = (root / (as_name or name)).resolve()  # symlinks on the way count too
        if not dest.is_relative_to(root) or dest == root:
            raise self._unsafe(name, f"would be written outside {root}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        check = self.checker(name)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            with (
                self._zip.open(name) as src,
                os.fdopen(os.open(dest, flags, 0o600), "wb") as out,
                ThreadPoolExecutor(max_workers=1) as hasher,
            ):
                pending: deque[Future[None]] = deque()
                while block := src.read(CHUNK):
                    pending.append(hasher.submit(check.update, block))
                    out.write(block)
                    while len(pending) > 2:
                        pending.popleft().result()
                while pending:
                    pending.popleft().result()
            check.finish()
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            dest.unlink(missing_ok=True)
            raise self._unsafe(name, f"cannot be read ({err})") from None
        except UnsafeInput:
            dest.unlink(missing_ok=True)
            raise
        mode = self._by_name[name].mode
        if mode:
            dest.chmod(mode)
        return dest

    def verify_all(self) -> None:
        """Check every member not checked yet against RECORD (one streaming read each)."""
        for m in self._unverified():
            self._verify(m.name)

    def record_problems(self) -> list[str]:
        """:meth:`verify_all` that goes on past a bad member: one line per member whose bytes
        do not match RECORD or the zip directory."""
        problems = []
        for m in self._unverified():
            try:
                self._verify(m.name)
            except UnsafeInput as err:
                problems.append(str(err))
        return problems

    def _unverified(self) -> list[Member]:
        return [
            m
            for m in self.members
            if not (m.is_dir or m.name in self.verified or m.name not in self.record)
        ]

    def _verify(self, name: str) -> None:
        check = self.checker(name)
        try:
            with self._zip.open(name) as fh:
                while block := fh.read(CHUNK):
                    check.update(block)
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise self._unsafe(name, f"cannot be read ({err})") from None
        check.finish()

    def pread(self, size: int, offset: int) -> bytes:
        """``size`` bytes at ``offset`` of the wheel this reader opened (its own open file, by
        position: never the path again, which may name another file by now)."""
        return os.pread(self.fileno(), size, offset)

    def fileno(self) -> int:
        """The file this reader opened (not whatever its path names now)."""
        fp = self._zip.fp
        if fp is None:
            raise BundleError(f"{self.path.name}: the wheel is closed")
        return fp.fileno()

    def data_offset(self, member: Member, fh: BinaryIO | None = None) -> int:
        """Where the member's compressed bytes start (after its local header), read from ``fh``
        or, by default, from the wheel this reader opened (checked when it was opened)."""
        if fh is None:
            return self._offsets[member.name]
        fh.seek(member.header_offset)
        found = self._local_offset(member, fh.read(LOCAL.size + 4 * len(member.name) + 1))
        if found != self._offsets.get(member.name):
            raise self._unsafe(member.name, "has another local header than when it was opened")
        return found

    def _checked_locals(self) -> dict[str, int]:
        """Every member's data offset, its compression and local header checked: one verdict
        for every command (a member whose local header names another file, or whose bytes
        another tool would read differently, is refused when the wheel is opened). The headers
        are read in file order through a window, so the small members' cost few reads."""
        offsets: dict[str, int] = {}
        window, at = b"", 0
        for member in sorted(self.members, key=lambda m: m.header_offset):
            if member.flag_bits & 0x1:
                raise self._unsafe(member.name, "is encrypted")
            if member.compress_type not in READABLE_METHODS:
                raise self._unsafe(
                    member.name, f"is compressed with method {member.compress_type}, not deflate"
                )
            lo = member.header_offset - at
            need = LOCAL.size + 4 * len(member.name) + 1
            if lo < 0 or lo + need > len(window):
                at, lo = member.header_offset, 0
                window = self.pread(max(need, _WINDOW), at)
            offsets[member.name] = self._local_offset(member, window[lo : lo + need])
        return offsets

    def _local_offset(self, member: Member, head: bytes) -> int:
        if len(head) < LOCAL.size or head[:4] != b"PK\x03\x04":
            raise self._unsafe(member.name, "has no local header where the zip directory says")
        flags, method = struct.unpack_from("<HH", head, 6)
        name_len, extra_len = struct.unpack_from("<HH", head, 26)
        raw = head[LOCAL.size : LOCAL.size + name_len]
        # as zipfile decodes a name; the directory's name was cut at a NUL, this one is not
        name = raw.decode("utf-8" if flags & 0x800 else "cp437", "replace")
        if name != member.name:
            raise self._unsafe(member.name, f"is named '{shown(name)}' in its local header")
        if method != member.compress_type:
            raise self._unsafe(member.name, "has another compression in its local header")
        return int(member.header_offset + LOCAL.size + name_len + extra_len)

    def metadata(self) -> str:
        return self.read_text(f"{self.dist_info}/METADATA")

    def wheel_info(self) -> str:
        return self.read_text(f"{self.dist_info}/WHEEL")


class RecordCheck:
    """Hash, CRC-32 and size of a member's bytes as they stream past, then compared with the
    central directory and RECORD. Feed ``update`` in order (from one thread at a time)."""

    def __init__(self, name: str, size: int, crc: int, record: str, reader: WheelReader) -> None:
        self.name, self._size, self._crc, self._record = name, size, crc, record
        self._reader = reader
        algo = (_record_algo(record) if record else None) or "sha256"
        self._hash = hashlib.new(algo)
        self._algo = algo
        self._seen = 0
        self._crc_now = 0

    def update(self, block: bytes | bytearray | memoryview) -> None:
        self._hash.update(block)
        self._crc_now = zlib.crc32(block, self._crc_now)
        self._seen += len(block)

    def finish(self) -> str:
        """The member's RECORD hash (``algo=digest``); raises when anything does not match."""
        if self._seen != self._size or self._crc_now != self._crc:
            raise self._reader._unsafe(
                self.name, "does not match its size or CRC-32 in the zip directory"
            )
        got = f"{self._algo}=" + base64.urlsafe_b64encode(self._hash.digest()).rstrip(b"=").decode()
        if self._record and got != self._record:
            raise self._reader._unsafe(self.name, "does not match its hash in RECORD")
        self._reader.verified[self.name] = got
        return got


_RECORD_ALGOS = ("sha256", "sha384", "sha512", "sha3_256", "sha3_384", "sha3_512", "blake2b")


def _record_algo(value: str) -> str | None:
    """The hash algorithm of a RECORD hash ``algo=digest``; None unless sha256 or better."""
    algo, sep, digest = value.partition("=")
    return algo if sep and digest and algo in _RECORD_ALGOS else None


def copy_range(
    src: BinaryIO,
    start: int,
    dst: BinaryIO,
    length: int,
    seen: Callable[[bytes], None] | None = None,
) -> None:
    """Copy ``length`` bytes from ``start`` in ``src`` to where ``dst`` is. Unless ``seen`` must
    see every block, the kernel copies (``os.copy_file_range``); else, or where the kernel
    refuses (e.g. across file systems on old kernels), blocks are read and written here."""
    dst.flush()
    out_pos = dst.tell()
    src_pos, remaining = start, length
    if seen is None and hasattr(os, "copy_file_range"):
        with contextlib.suppress(OSError):
            while remaining:
                n = os.copy_file_range(
                    src.fileno(), dst.fileno(), min(remaining, 1 << 30), src_pos, out_pos
                )
                if n == 0:
                    break
                remaining, src_pos, out_pos = remaining - n, src_pos + n, out_pos + n
    dst.seek(out_pos)
    src.seek(src_pos)
    while remaining:
        block = src.read(min(CHUNK, remaining))
        if not block:
            raise BundleError("wheel member is truncated")
        dst.write(block)
        if seen is not None:
            seen(block)
        remaining -= len(block)


def _inflating(
    member: Member, check: RecordCheck
) -> tuple[Callable[[bytes], None], Callable[[], None]]:
    """What feeds ``check`` a member's bytes from its compressed blocks: (seen, flush)."""
    inflate = zlib.decompressobj(-15) if member.compress_type == zipfile.ZIP_DEFLATED else None

    def seen(block: bytes) -> None:
        if inflate is None:
            check.update(block)
            return
        # bounded output per call: a small compressed block can inflate to a lot
        data = inflate.decompress(block, CHUNK)
        check.update(data)
        while inflate.unconsumed_tail:
            check.update(data := inflate.decompress(inflate.unconsumed_tail, CHUNK))

    def flush() -> None:
        if inflate is not None:
            check.update(inflate.flush())

    return seen, flush


def copy_checked(
    src: BinaryIO, start: int, dst: BinaryIO, member: Member, check: RecordCheck
) -> str:
    """Copy a member's compressed bytes and check them (inflated) in the same read."""
    seen, flush = _inflating(member, check)
    try:
        copy_range(src, start, dst, member.compress_size, seen)
        flush()
    except zlib.error as err:
        raise check._reader._unsafe(member.name, f"cannot be inflated ({err})") from None
    return check.finish()


def verify_member(reader: WheelReader, member: Member, check: RecordCheck) -> str:
    """Check a stored or deflated member against RECORD and the zip directory, reading it from
    its own handle (any thread may): its RECORD hash, or :class:`UnsafeInput`."""
    seen, flush = _inflating(member, check)
    with reader.path.open("rb") as src:
        src.seek(reader.data_offset(member, src))
        remaining = member.compress_size
        try:
            while remaining:
                block = src.read(min(CHUNK, remaining))
                if not block:
                    raise BundleError(f"{reader.path.name}: member {member.name} is truncated")
                seen(block)
                remaining -= len(block)
            flush()
        except zlib.error as err:
            raise reader._unsafe(member.name, f"cannot be inflated ({err})") from None
    return check.finish()
