"""Streaming wheel reader and writer.

Why a hand-written ZIP writer: the standard library's ``zipfile`` has no public way to copy a
member's compressed bytes into another archive, so every unchanged member of a 5 GB wheel would be
inflated and deflated again. The writer here is small and only does what wheels need:

* members are written one after another; unchanged members are copied raw (compressed bytes,
  CRC and sizes taken from the input's central directory; ``os.copy_file_range`` where the kernel
  offers it), new members are deflated in fixed-size chunks on a thread pool (``rawdeflate``:
  libdeflate, or zlib where it is missing; both release the GIL) and joined into one raw deflate
  stream; sha256 and CRC-32 are computed while reading, so RECORD needs no second pass;
* a local header is written before the data and patched in place (seek) once CRC and sizes are
  known: no data descriptors;
* ZIP64 extra fields are used per member when a size or offset needs them, and the ZIP64 end
  records when the archive or its entry count does;
* the archive is written to a temporary name in the target folder and renamed into place.

Memory use is bounded by the chunk size times the number of chunks in flight, whatever the
size of the wheel.
"""

from __future__ import annotations

import base64
import contextlib
import csv
import hashlib
import io
import logging
import os
import posixpath
import re
import stat
import struct
import zipfile
import zlib
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path
from typing import IO, BinaryIO, Protocol

from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import Version

from . import faults, rawdeflate, tempfiles
from .errors import BundleError, FileAccessError, UnsafeInput

__all__ = [
    "Member",
    "RecordEntry",
    "WheelName",
    "WheelReader",
    "WheelWriter",
    "check_member_names",
    "record_hash",
]

log = logging.getLogger(__name__)

CHUNK = 1 << 20  # read/copy unit
DEFLATE_CHUNK = 4 << 20  # deflate work unit: a chunk boundary costs the ratio < 1 %
_ZIP32_LIMIT = 0xFFFFFFFF  # sizes/offsets from here on need ZIP64 (tests lower it)
_MARKER = 0xFFFFFFFF  # the value a 32-bit field holds when the ZIP64 extra has the real one
_DOS_EPOCH = (1980, 1, 1, 0, 0, 0)

_LOCAL = struct.Struct("<4s5H3L2H")  # signature .. extra length (30 bytes)
_CENTRAL = struct.Struct("<4s6H3L5H2L")  # 46 bytes
_EOCD = struct.Struct("<4s4H2LH")
_EOCD64 = struct.Struct("<4sQ2H2L4Q")
_EOCD64_LOC = struct.Struct("<4sLQL")


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


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
        try:
            self._zip = zipfile.ZipFile(self.path)
        except PermissionError as err:
            msg = f"{self.path}: permission denied reading the wheel; make it readable by this user"
            raise FileAccessError(msg) from err
        except (zipfile.BadZipFile, OSError) as err:
            raise BundleError(f"{self.path}: not a readable wheel ({err})") from err
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
            self.dist_info = self._find_dist_info()
            for required in ("METADATA", "WHEEL", "RECORD"):
                if f"{self.dist_info}/{required}" not in self._by_name:
                    raise self._unsafe(f"{self.dist_info}/{required}", "is missing")
            #: member -> its verified RECORD hash, once its bytes have been read and checked
            self.verified: dict[str, str] = {}
            self.record = self._read_record()
            self._check_record()
        except BaseException:
            self._zip.close()
            raise

    def close(self) -> None:
        self._zip.close()

    def __enter__(self) -> WheelReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unsafe(self, member: str, why: str) -> UnsafeInput:
        return UnsafeInput(
            f"{self.path.name}: member '{_shown(member)}' {why}: the wheel is unsafe or "
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
        name = f"{self.dist_info}/RECORD"
        text = self._read_checked(name).decode("utf-8", errors="replace")
        out: dict[str, RecordEntry] = {}
        try:
            for row in csv.reader(io.StringIO(text)):
                if not row:
                    continue
                path = row[0]
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
                raise self._unsafe(m.name, f"has the hash '{_shown(entry.hash)}' in RECORD")
        for path in self.record:
            if path not in self._by_name and path not in unsigned:
                raise self._unsafe(path, "is listed in RECORD but not in the wheel")

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

    def _read_checked(self, name: str) -> bytes:
        try:
            return self._zip.read(name)
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise self._unsafe(name, f"cannot be read ({err})") from None

    def read_bytes(self, name: str) -> bytes:
        """Whole member, checked against RECORD: for small text files (METADATA, WHEEL)."""
        data = self._read_checked(name)
        check = self.checker(name)
        check.update(data)
        check.finish()
        return data

    def read_text(self, name: str) -> str:
        return self.read_bytes(name).decode("utf-8")

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
        for m in self.members:
            if m.is_dir or m.name in self.verified or m.name not in self.record:
                continue
            check = self.checker(m.name)
            try:
                with self._zip.open(m.name) as fh:
                    while block := fh.read(CHUNK):
                        check.update(block)
            except (zipfile.BadZipFile, zlib.error, EOFError) as err:
                raise self._unsafe(m.name, f"cannot be read ({err})") from None
            check.finish()

    def data_offset(self, member: Member, fh: BinaryIO) -> int:
        """Where the member's compressed bytes start (after its local header)."""
        fh.seek(member.header_offset)
        head = fh.read(_LOCAL.size)
        if len(head) != _LOCAL.size or head[:4] != b"PK\x03\x04":
            raise BundleError(f"{self.path.name}: bad local header for {member.name}")
        name_len, extra_len = struct.unpack_from("<HH", head, 26)
        return int(member.header_offset + _LOCAL.size + name_len + extra_len)

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


_DRIVE = re.compile(r"[A-Za-z]:")
_REGULAR_TYPES = (0, stat.S_IFREG, stat.S_IFDIR)


def _shown(text: str) -> str:
    """``text`` on one line: control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _name_problem(name: str) -> str | None:
    if not name:
        return "has an empty name"
    if not name.isprintable():
        return "has a control character in its name"
    if "\\" in name:
        return "has a backslash in its name"
    if name.startswith("/"):
        return "is an absolute path"
    if _DRIVE.match(name):
        return "starts with a drive letter"
    for part in (name[:-1] if name.endswith("/") else name).split("/"):
        if part in ("", "."):
            return "has an empty or '.' part in its path"
        if part == "..":
            return "has a '..' part in its path"
    return None


def check_member_names(wheel: str, members: Iterable[tuple[str, int]]) -> None:
    """Refuse a wheel whose members could not be extracted safely into one folder.

    ``members``: (name, external_attr) from the central directory. One pass, no member read:
    absolute paths, ``..``, ``.`` or empty parts, backslashes, drive letters, control
    characters, duplicate names, a name that is both a file and a folder, and symlinks or other
    special files (their type in the high 16 bits of ``external_attr``) raise
    :class:`UnsafeInput` naming the member.
    """
    seen: set[str] = set()
    files: set[str] = set()
    folders: set[str] = set()

    def unsafe(name: str, why: str) -> UnsafeInput:
        return UnsafeInput(
            f"{wheel}: member '{_shown(name)}' {why}: the wheel is unsafe; do not install it, "
            "rebuild it (or download it again from a source you trust)"
        )

    for name, attr in members:
        if why := _name_problem(name):
            raise unsafe(name, why)
        if name in seen:
            raise unsafe(name, "appears twice")
        seen.add(name)
        kind = stat.S_IFMT(attr >> 16)
        if kind == stat.S_IFLNK:
            raise unsafe(name, "is a symbolic link")
        if kind not in _REGULAR_TYPES:
            raise unsafe(name, "is a special file (device, pipe or socket)")
        path = name.rstrip("/")
        if name.endswith("/"):
            if path in files:
                raise unsafe(path, "is both a file and a folder")
            folders.add(path)
        else:
            if path in folders:
                raise unsafe(path, "is both a file and a folder")
            files.add(path)
        parent = posixpath.dirname(path)
        while parent and parent not in folders:
            if parent in files:
                raise unsafe(parent, "is both a file and a folder")
            folders.add(parent)
            parent = posixpath.dirname(parent)


@dataclass
class _Central:
    name: bytes
    flag_bits: int
    compress_type: int
    date_time: tuple[int, int, int, int, int, int]
    crc: int
    compress_size: int
    file_size: int
    header_offset: int
    external_attr: int


def _dos_time(dt: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    year = max(dt[0], 1980)
    date = ((year - 1980) << 9) | (dt[1] << 5) | dt[2]
    time = (dt[3] << 11) | (dt[4] << 5) | (dt[5] // 2)
    return date, time


@dataclass
class WheelWriter:
    """Write a wheel member by member to a temporary file; ``commit()`` renames it into place.

    ``add_*`` for new bytes (deflated at ``level``), ``copy_member`` for unchanged ones (raw).
    RECORD is written by ``commit()`` from what was added, as the last member.
    """

    final_path: Path
    dist_info: str
    level: int = 6
    workers: int = 0  # 0 = os.cpu_count()
    date_time: tuple[int, int, int, int, int, int] = _DOS_EPOCH
    _entries: list[_Central] = field(default_factory=list)
    _records: list[RecordEntry] = field(default_factory=list)
    _names: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.final_path = Path(self.final_path)
        self.final_path.parent.mkdir(parents=True, exist_ok=True)
        # Named and locked so that the next run removes it if this one is killed (tempfiles).
        fd, self._tmp = tempfiles.create_file(self.final_path)
        self._fh: BinaryIO = os.fdopen(fd, "w+b")
        self._pool = ThreadPoolExecutor(max_workers=self.workers or os.cpu_count() or 1)
        self._done = False
        # Member bytes consumed, and written for them so far: their ratio estimates how large
        # the finished wheel will be (a full disk's message says how much space it needs).
        self.bytes_in = 0
        self.bytes_out = 0

    # --- context management: an exception discards the temporary file ---------------------------

    def __enter__(self) -> WheelWriter:
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is not None or not self._done:
            self.abort()

    def abort(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        # Unlink first: closing flushes the buffer, which fails again on a full disk.
        self._tmp.unlink(missing_ok=True)
        if not self._fh.closed:
            with contextlib.suppress(OSError):
                self._fh.close()

    # --- members ---------------------------------------------------------------------------------

    def _check_name(self, name: str) -> None:
        if name in self._names:
            raise BundleError(f"duplicate wheel member {name}")
        if name.startswith("/") or ".." in name.split("/"):
            raise BundleError(f"unsafe wheel member name {name}")
        self._names.add(name)

    def _write_local(self, entry: _Central, zip64: bool) -> int:
        extra = b""
        if zip64:
            extra = struct.pack("<HHQQ", 1, 16, entry.file_size, entry.compress_size)
        date, time = _dos_time(entry.date_time)
        offset = self._fh.tell()
        self._fh.write(
            _LOCAL.pack(
                b"PK\x03\x04",
                45 if zip64 else 20,
                entry.flag_bits,
                entry.compress_type,
                time,
                date,
                entry.crc,
                _MARKER if zip64 else entry.compress_size,
                _MARKER if zip64 else entry.file_size,
                len(entry.name),
                len(extra),
            )
        )
        self._fh.write(entry.name)
        self._fh.write(extra)
        return offset

    def copy_member(self, reader: WheelReader, name: str, arcname: str | None = None) -> None:
        """Copy ``name`` from ``reader`` without recompressing; its RECORD row is reused.

        A member whose bytes were not checked yet (by ``extract`` or ``read_bytes``) is checked
        against RECORD while it is copied: its compressed bytes are read once, written and
        inflated for the hash. A mismatch raises :class:`UnsafeInput` (the caller's ``with``
        then discards the partial output).
        """
        member = reader.member(name)
        arcname = arcname or name
        self._check_name(arcname)
        encoded = arcname.encode("utf-8")
        entry = _Central(
            name=encoded,
            flag_bits=(member.flag_bits & 0x800) | (0 if encoded.isascii() else 0x800),
            compress_type=member.compress_type,
            date_time=member.date_time,
            crc=member.crc,
            compress_size=member.compress_size,
            file_size=member.file_size,
            header_offset=0,
            external_attr=member.external_attr,
        )
        zip64 = max(member.file_size, member.compress_size) >= _ZIP32_LIMIT
        entry.header_offset = self._write_local(entry, zip64)
        digest = reader.verified.get(name)
        with reader.path.open("rb") as src:
            start = reader.data_offset(member, src)
            if digest is not None:
                _copy_range(src, start, self._fh, member.compress_size)
            elif member.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
                digest = _copy_checked(src, start, self._fh, member, reader.checker(name))
        if digest is None:  # bzip2/lzma members (not seen in wheels): check, then copy
            reader.verify_all()
            digest = reader.verified[name]
            with reader.path.open("rb") as src:
                _copy_range(src, reader.data_offset(member, src), self._fh, member.compress_size)
        self.bytes_in += member.compress_size
        self.bytes_out += member.compress_size
        self._entries.append(entry)
        self._records.append(RecordEntry(arcname, digest, member.file_size))

    def add_file(self, arcname: str, path: Path, mode: int | None = None) -> None:
        st = path.stat()
        with path.open("rb") as fh:
            self.add_stream(arcname, fh, st.st_size, mode if mode is not None else st.st_mode)

    def add_bytes(self, arcname: str, data: bytes, mode: int = 0o644) -> None:
        self.add_stream(arcname, io.BytesIO(data), len(data), mode)

    def add_stream(self, arcname: str, src: Readable, size: int, mode: int) -> None:
        """Add ``size`` bytes read from ``src`` (deflated on the pool, hashed on the way)."""
        self._check_name(arcname)
        encoded = arcname.encode("utf-8")
        stored = self.level == 0
        entry = _Central(
            name=encoded,
            flag_bits=0 if encoded.isascii() else 0x800,
            compress_type=zipfile.ZIP_STORED if stored else zipfile.ZIP_DEFLATED,
            date_time=self.date_time,
            crc=0,
            compress_size=0,
            file_size=size,
            header_offset=0,
            external_attr=((0o100000 | (mode & 0o7777)) << 16),
        )
        # Deflate can grow incompressible data slightly: leave room before deciding on ZIP64.
        zip64 = size >= _ZIP32_LIMIT - (size >> 10) - 1024
        entry.header_offset = self._write_local(entry, zip64)
        digest = hashlib.sha256()
        crc = 0
        written = 0
        total = 0
        if stored:
            while block := src.read(CHUNK):
                digest.update(block)
                crc = rawdeflate.crc32(block, crc)
                self._fh.write(block)
                total += len(block)
                self.bytes_in += len(block)
                self.bytes_out += len(block)
            written = total
        else:
            pending: deque[tuple[Future[bytes | bytearray], int]] = deque()
            in_flight = 2 * (self.workers or os.cpu_count() or 1)
            prev = b""
            block = src.read(DEFLATE_CHUNK)
            while block:
                nxt = src.read(DEFLATE_CHUNK)
                digest.update(block)
                crc = rawdeflate.crc32(block, crc)
                total += len(block)
                pending.append(
                    (
                        self._pool.submit(rawdeflate.compress, block, self.level, not nxt, prev),
                        len(block),
                    )
                )
                prev = block
                while len(pending) >= in_flight:
                    written += self._write_deflated(*pending.popleft())
                block = nxt
            if total == 0:
                out = rawdeflate.compress(b"", self.level, True)
                self._fh.write(out)
                written += len(out)
            while pending:
                written += self._write_deflated(*pending.popleft())
        if total != size:
            raise BundleError(f"{arcname}: changed while being added ({size} -> {total} bytes)")
        if not zip64 and written >= _ZIP32_LIMIT:
            raise BundleError(f"{arcname}: deflated size overflowed; use compression level 0")
        entry.crc, entry.compress_size = crc, written
        end = self._fh.tell()
        self._fh.seek(entry.header_offset + 14)
        if zip64:
            self._fh.write(struct.pack("<L", crc))
            self._fh.seek(entry.header_offset + _LOCAL.size + len(encoded) + 4)
            self._fh.write(struct.pack("<QQ", size, written))
        else:
            self._fh.write(struct.pack("<LLL", crc, written, size))
        self._fh.seek(end)
        self._entries.append(entry)
        self._records.append(RecordEntry(arcname, record_hash(digest.digest()), size))

    def _write_deflated(self, job: Future[bytes | bytearray], consumed: int) -> int:
        out = job.result()
        self._fh.write(out)
        self.bytes_in += consumed
        self.bytes_out += len(out)
        return len(out)

    # --- finish ----------------------------------------------------------------------------------

    def commit(self) -> Path:
        """Write RECORD and the central directory, then rename the archive into place."""
        record_name = f"{self.dist_info}/RECORD"
        self.add_bytes(record_name, self._record_text(record_name).encode())
        cd_start = self._fh.tell()
        for entry in self._entries:
            self._write_central(entry)
        cd_end = self._fh.tell()
        self._write_end(cd_start, cd_end - cd_start)
        self._fh.flush()
        faults.point("wheel.commit.written")
        os.fsync(self._fh.fileno())
        self._pool.shutdown(wait=True)
        self._tmp.chmod(0o644)
        faults.point("wheel.commit.synced")
        self._tmp.replace(self.final_path)
        self._done = True
        # The folder's entry too, so that a power cut after this keeps the new wheel.
        with contextlib.suppress(OSError):
            dir_fd = os.open(self.final_path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        self._fh.close()  # releases the lock on the (renamed) file
        faults.point("wheel.commit.renamed")
        return self.final_path

    def _record_text(self, record_name: str) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for rec in self._records:
            writer.writerow([rec.path, rec.hash, "" if rec.size is None else rec.size])
        writer.writerow([record_name, "", ""])
        return out.getvalue()

    def _write_central(self, e: _Central) -> None:
        extra_fields: list[int] = []
        file_size, compress_size, offset = e.file_size, e.compress_size, e.header_offset
        if file_size >= _ZIP32_LIMIT:
            extra_fields.append(file_size)
            file_size = _MARKER
        if compress_size >= _ZIP32_LIMIT:
            extra_fields.append(compress_size)
            compress_size = _MARKER
        if offset >= _ZIP32_LIMIT:
            extra_fields.append(offset)
            offset = _MARKER
        extra = b""
        if extra_fields:
            extra = struct.pack(f"<HH{len(extra_fields)}Q", 1, 8 * len(extra_fields), *extra_fields)
        version = 45 if extra_fields else 20
        date, time = _dos_time(e.date_time)
        self._fh.write(
            _CENTRAL.pack(
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
        self._fh.write(e.name)
        self._fh.write(extra)

    def _write_end(self, cd_offset: int, cd_size: int) -> None:
        count = len(self._entries)
        if count > 0xFFFF or cd_offset >= _ZIP32_LIMIT or cd_size >= _ZIP32_LIMIT:
            eocd64_offset = self._fh.tell()
            self._fh.write(
                _EOCD64.pack(
                    b"PK\x06\x06", _EOCD64.size - 12, 45, 45, 0, 0, count, count, cd_size, cd_offset
                )
            )
            self._fh.write(_EOCD64_LOC.pack(b"PK\x06\x07", 0, eocd64_offset, 1))
            count16 = 0xFFFF if count >= 0xFFFF else count
            self._fh.write(
                _EOCD.pack(
                    b"PK\x05\x06",
                    0,
                    0,
                    count16,
                    count16,
                    _MARKER if cd_size >= _ZIP32_LIMIT else cd_size,
                    _MARKER if cd_offset >= _ZIP32_LIMIT else cd_offset,
                    0,
                )
            )
        else:
            self._fh.write(_EOCD.pack(b"PK\x05\x06", 0, 0, count, count, cd_size, cd_offset, 0))


def _copy_checked(
    src: BinaryIO, start: int, dst: BinaryIO, member: Member, check: RecordCheck
) -> str:
    """Copy a member's compressed bytes and check them (inflated) in the same read."""
    inflate = zlib.decompressobj(-15) if member.compress_type == zipfile.ZIP_DEFLATED else None
    src.seek(start)
    remaining = member.compress_size
    try:
        while remaining:
            block = src.read(min(CHUNK, remaining))
            if not block:
                raise BundleError("wheel member is truncated")
            dst.write(block)
            remaining -= len(block)
            if inflate is None:
                check.update(block)
                continue
            # bounded output per call: a small compressed block can inflate to a lot
            data = inflate.decompress(block, CHUNK)
            while True:
                check.update(data)
                if not inflate.unconsumed_tail:
                    break
                data = inflate.decompress(inflate.unconsumed_tail, CHUNK)
        if inflate is not None:
            check.update(inflate.flush())
    except zlib.error as err:
        raise check._reader._unsafe(member.name, f"cannot be inflated ({err})") from None
    return check.finish()


def _copy_range(src: BinaryIO, start: int, dst: BinaryIO, length: int) -> None:
    dst.flush()
    out_pos = dst.tell()
    remaining = length
    src_pos = start
    if hasattr(os, "copy_file_range"):
        try:
            while remaining:
                n = os.copy_file_range(
                    src.fileno(), dst.fileno(), min(remaining, 1 << 30), src_pos, out_pos
                )
                if n == 0:
                    break
                remaining -= n
                src_pos += n
                out_pos += n
        except OSError:
            pass  # e.g. across file systems on old kernels: fall back to read/write
    dst.seek(out_pos)
    if remaining:
        src.seek(src_pos)
        while remaining:
            block = src.read(min(CHUNK, remaining))
            if not block:
                raise BundleError("wheel member is truncated")
            dst.write(block)
            remaining -= len(block)


# --- METADATA and WHEEL edits ---------------------------------------------------------------------


def metadata_version(metadata: str) -> str:
    return HeaderParser().parsestr(metadata).get("Version", "")


def set_metadata_version(metadata: str, version: str) -> str:
    return re.sub(r"(?m)^Version: .*$", f"Version: {version}", metadata, count=1)


def add_requirement(metadata: str, requirement: str) -> str:
    """Add ``Requires-Dist: requirement``, replacing any other requirement on the same name."""
    req_name = canonicalize_name(re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0])
    lines = metadata.split("\n")
    kept: list[str] = []
    insert_at = None
    in_headers = True
    for line in lines:
        if in_headers and line == "":
            in_headers = False
            if insert_at is None:
                insert_at = len(kept)
        if in_headers and line.startswith("Requires-Dist:"):
            value = line.split(":", 1)[1].strip()
            name = canonicalize_name(re.split(r"[\s\[<>=!~;(]", value, maxsplit=1)[0])
            if name == req_name and ";" not in value:
                insert_at = len(kept) if insert_at is None else insert_at
                continue
            insert_at = len(kept) + 1
        kept.append(line)
    if insert_at is None:
        insert_at = len(kept)
    kept.insert(insert_at, f"Requires-Dist: {requirement}")
    return "\n".join(kept)


def set_wheel_tags(wheel_info: str, tags: Iterable[str]) -> str:
    """Replace the ``Tag:`` lines of a WHEEL file (and say the wheel is not pure)."""
    lines = [
        line
        for line in wheel_info.splitlines()
        if not line.startswith("Tag:") and not line.startswith("Root-Is-Purelib:")
    ]
    while lines and not lines[-1]:
        lines.pop()
    lines.append("Root-Is-Purelib: false")
    lines += [f"Tag: {t}" for t in tags]
    return "\n".join(lines) + "\n"


def consistent_version(file_version: str, metadata: str) -> str:
    """The version both file name and METADATA should carry (METADATA wins on local labels)."""
    meta = metadata_version(metadata)
    if not meta:
        return file_version
    if Version(meta) != Version(file_version.replace("_", "-")):
        log.info("version in METADATA (%s) and file name (%s) differ", meta, file_version)
    return meta


def zip64_reasons(path: Path) -> list[str]:
    """Why the zip file at ``path`` needs ZIP64 records, read from its central directory: members
    of 4 GiB or more, members whose local header starts at or past 4 GiB, more than 65,535
    members, a central directory that starts past 4 GiB. Empty: plain ZIP would do."""
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        start_dir = zf.start_dir
    big = [i for i in infos if max(i.file_size, i.compress_size) >= _ZIP32_LIMIT]
    far = [i for i in infos if i.header_offset >= _ZIP32_LIMIT]
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
    if start_dir >= _ZIP32_LIMIT:
        reasons.append(f"the central directory starts at offset {start_dir}")
    return reasons
