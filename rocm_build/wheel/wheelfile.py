"""Streaming wheel reader and writer.

Why a hand-written ZIP writer: the standard library's ``zipfile`` has no public way to copy a
member's compressed bytes into another archive, so every unchanged member of a 5 GB wheel would be
inflated and deflated again. The writer here is small and only does what wheels need:

* members are written one after another; unchanged members are copied raw (compressed bytes,
  CRC and sizes taken from the input's central directory; ``os.copy_file_range`` where the kernel
  offers it; a member not checked against RECORD yet is checked on the pool first); new members
  are cut into 4 MiB pieces, and each piece is read, checksummed (CRC-32) and deflated by one
  job on the thread pool, and hashed (sha256, in order: by the pieces, or with many workers by a
  job of the member's own; ``wheelpieces``; the deflater is ``bundle.deflater``, see
  ``rawdeflate``; all of them release the GIL); the pieces join into one raw deflate stream,
  written in order, and RECORD needs no second pass over the output;
* a local header is written before the data and patched in place (seek) once CRC and sizes are
  known: no data descriptors;
* ZIP64 extra fields are used per member when a size or offset needs them, and the ZIP64 end
  records when the archive or its entry count does;
* the archive is written to a temporary name in the target folder and renamed into place.

Memory is bounded by the piece size times the jobs in flight (``window``), whatever the size
of the wheel; the writer's own thread only writes and patches.

Size: the streaming writer and the one RECORD writer, whose order, CRC and ZIP64 rules hold only
together.
"""

from __future__ import annotations

import contextlib
import csv
import io
import logging
import os
import struct
import threading
import zipfile
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from rocm_build.common import faults, proc, tempfiles
from rocm_build.common.errors import BundleError
from rocm_build.wheel import deflatecache, rawdeflate, wheelpieces, zipformat
from rocm_build.wheel.deflate import DEFAULT_DEFLATE, Deflate
from rocm_build.wheel.membernames import check_member_names
from rocm_build.wheel.wheelpieces import (
    DEFLATE_CHUNK,
    HashChain,
    MemberHash,
    PieceDone,
    PieceWork,
    Source,
    StreamSource,
    piece_count,
)
from rocm_build.wheel.wheelread import (
    CHUNK,
    Member,
    RecordCheck,
    RecordEntry,
    WheelName,
    WheelReader,
    copy_range,
    record_hash,
    verify_member,
)
from rocm_build.wheel.wheelread import LOCAL as _LOCAL
from rocm_build.wheel.zipformat import Central, zip64_reasons

__all__ = [
    "CHUNK",
    "DEFLATE_CHUNK",
    "Member",
    "RecordCheck",
    "RecordEntry",
    "Source",
    "WheelName",
    "WheelReader",
    "WheelWriter",
    "check_member_names",
    "record_hash",
    "zip64_reasons",
]

_CACHE_MIN = 4096  # smaller files are not worth a deflate cache entry
_SYNC_EVERY = 256 << 20  # bytes written between background syncs (see _Syncer)
#: Workers from which a member's pieces no longer feed its sha256 (one core, 1.2-2 GB/s) but a
#: hash job of its own does (wheelpieces): level 6 deflates 75-150 MB/s a core, so fewer cores
#: never outrun the chain, and the job's second read of the bytes would only cost.
OWN_HASH_FROM = 8

log = logging.getLogger(__name__)


@dataclass(eq=False)
class _NewMember:
    """A member being added: what is known of it while its pieces are deflated."""

    arcname: str
    entry: Central
    zip64: bool
    key: str  # in the deflate cache; "" = not cached
    work: PieceWork
    crc: int = 0  # of the pieces written so far
    total: int = 0  # bytes of the member written (deflated) so far
    written: int = 0  # bytes of deflate stream written
    stream_crc: int = 0  # CRC-32 of those (the cache's check)
    data_start: int = 0
    hashed: Future[MemberHash] | None = None  # the member's hash job (None: work.chain)


@dataclass(eq=False)
class _Copy:  # an unchanged member to copy raw when its turn comes
    arcname: str
    entry: Central
    reader: WheelReader
    member: Member


class _Syncer:
    """Sends the archive's written pages to the disk in the background as it grows (one
    ``fdatasync`` at a time, every :data:`_SYNC_EVERY` bytes), so that the ``fsync`` that makes
    the finished wheel survive a power cut has little left to write: on a 1 GB wheel it took
    0.5 s at the end, with every core idle. A failed background sync is left to that ``fsync``
    to report."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._at = 0
        self._thread: threading.Thread | None = None

    def wrote(self, total: int) -> None:
        if total - self._at < _SYNC_EVERY or (self._thread and self._thread.is_alive()):
            return
        self._at = total
        self._thread = threading.Thread(target=self._sync, name="wheel-sync", daemon=True)
        self._thread.start()

    def _sync(self) -> None:
        sync = getattr(os, "fdatasync", os.fsync)  # macOS has only fsync
        with contextlib.suppress(OSError):
            sync(self._fd)

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()


# (what, member, its job or a copy's digest), in the order they are written
_Item = tuple[str, "_NewMember | _Copy", "Future[Any] | str | None"]


@dataclass
class WheelWriter:
    """Write a wheel member by member to a temporary file; ``commit()`` renames it into place.

    ``add_*`` for new bytes (deflated as ``deflate`` says), ``copy_member`` for unchanged ones
    (raw). RECORD is written by ``commit()`` from what was added, as the last member. New
    members' pieces are read, hashed and deflated on a thread pool, written in the order added.
    ``deflate``: the deflater, its level and the deflate cache
    (:mod:`rocm_build.wheel.deflatecache`, None for none) that ``add_file`` and keyed
    ``add_source`` use; the default deflates at level 6 without a cache."""

    final_path: Path
    dist_info: str
    deflate: Deflate = DEFAULT_DEFLATE
    workers: int = 0  # deflate threads; 0 = the CPUs this process may use (proc.cpus_available)
    date_time: tuple[int, int, int, int, int, int] = zipformat.DOS_EPOCH
    _entries: list[Central] = field(default_factory=list)
    _records: list[RecordEntry | _NewMember] = field(default_factory=list)  # members: hashing
    _names: set[str] = field(default_factory=set)
    #: ``deflate``'s parts: its level, its deflater as it runs here, its cache
    level: int = field(init=False)
    deflater: str = field(init=False)
    cache: deflatecache.DeflateCache | None = field(init=False)

    def __post_init__(self) -> None:
        self.final_path = Path(self.final_path)
        self.final_path.parent.mkdir(parents=True, exist_ok=True)
        # Named and locked so that the next run removes it if this one is killed (tempfiles).
        fd, self._tmp = tempfiles.create_file(self.final_path)
        self._fh: BinaryIO = os.fdopen(fd, "w+b")
        self._syncer = _Syncer(fd)
        self.workers = self.workers or proc.cpus_available()
        self.level, self.cache = self.deflate.level, self.deflate.cache
        self.deflater = self.deflate.implementation
        self._pool = ThreadPoolExecutor(max_workers=self.workers)
        self._done = False
        self._queue: deque[_Item] = deque()  # members and pieces not written yet, in order
        self._open: set[Source] = set()  # sources of members not finished yet
        self._jobs = 0  # jobs in the queue (pieces, copies being checked)
        #: the most jobs queued: all workers busy, some done waiting (the memory bound: wheelpieces)
        self.window = self.workers + max(2, self.workers // 2)
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
        self._syncer.join()
        for source in self._open:
            source.close()
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

    def copy_member(self, reader: WheelReader, name: str, arcname: str | None = None) -> None:
        """Copy ``name`` from ``reader`` without recompressing; its RECORD row is reused.

        A member whose bytes were not checked yet (by ``extract`` or ``read_bytes``) is checked
        against RECORD on a worker (its compressed bytes read and inflated for the hash) while
        the writer goes on; the raw copy waits for that check. A mismatch raises
        :class:`UnsafeInput` (the caller's ``with`` then discards the partial output).
        """
        member = reader.member(name)
        arcname = arcname or name
        self._check_name(arcname)
        encoded = arcname.encode("utf-8")
        entry = Central(
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
        digest: str | Future[str] | None = reader.verified.get(name)
        if digest is None and member.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            digest = self._pool.submit(verify_member, reader, member, reader.checker(name))
        elif digest is None:  # bzip2/lzma members (not seen in wheels): check, then copy
            reader.verify_all()
            digest = reader.verified[name]
        self._push(("copy", _Copy(arcname, entry, reader, member), digest))

    def _copy(self, copy: _Copy, digest: str) -> None:
        entry, member = copy.entry, copy.member
        zip64 = max(member.file_size, member.compress_size) >= zipformat.ZIP32_LIMIT
        entry.header_offset = zipformat.write_local(self._fh, entry, zip64)
        with copy.reader.path.open("rb") as src:
            copy_range(src, copy.reader.data_offset(member, src), self._fh, member.compress_size)
        self.bytes_in += member.compress_size
        self.bytes_out += member.compress_size
        self._syncer.wrote(self.bytes_out)
        self._entries.append(entry)
        self._records.append(RecordEntry(copy.arcname, digest, member.file_size))

    def cache_key(self, path: Path, transform: str = "", *, content: str | None = None) -> str:
        """The deflate cache's key for ``path``'s bytes after ``transform`` ('' = no cache).
        ``content``: a hash of the bytes (a wheel member's RECORD hash) to key them by instead
        of the file's identity; "" for a file made for this run only (never seen again)."""
        if self.cache is None or self.level == 0 or content == "":
            return ""
        if path.stat().st_size < _CACHE_MIN:
            return ""
        return deflatecache.file_key(path, self.level, transform, content, self.deflater)

    def add_file(
        self, arcname: str, path: Path, mode: int | None = None, *, stored: bool = False
    ) -> None:
        """Add the file ``path``; ``stored``: never deflated (bytes already compressed, such as
        kpack archives' zstd frames)."""
        st = path.stat()
        key = "" if stored else self.cache_key(path)
        mode = mode if mode is not None else st.st_mode
        source = wheelpieces.FileSource(path, st.st_size)
        self.add_source(arcname, source, mode, key=key, stored=stored)

    def add_bytes(self, arcname: str, data: bytes, mode: int = 0o644) -> None:
        self.add_source(arcname, wheelpieces.BytesSource(data), mode)

    def add_stream(
        self, arcname: str, src: wheelpieces.Readable, size: int, mode: int, *, key: str = ""
    ) -> None:
        """Add ``size`` bytes read in order from ``src`` (read here; hashed and deflated on the
        pool). A source that can be read by position is better given to :meth:`add_source`."""
        self.add_source(arcname, StreamSource(src, size), mode, key=key)

    def add_source(
        self, arcname: str, source: Source, mode: int, *, key: str = "", stored: bool = False
    ) -> None:
        """Add ``source``'s bytes: its pieces are read, hashed, checksummed and deflated on the
        pool and written in order while the next members are added; the writer closes
        ``source`` once they are done. ``key``: the deflate cache's key of these bytes
        (:meth:`cache_key`); a hit copies the stored stream, a miss stores it."""
        level = 0 if stored else self.level
        try:
            self._check_name(arcname)
            if key and self._add_cached(arcname, self._entry(arcname, source.size, mode), key):
                source.close()
                return
        except BaseException:
            source.close()
            raise
        self._open.add(source)
        size = source.size
        # Deflate can grow incompressible data slightly: leave room before deciding on ZIP64.
        zip64 = size >= zipformat.ZIP32_LIMIT - (size >> 10) - 1024
        # With many workers a deflated member of several pieces that can be read again is hashed
        # by a job of its own, so that the hashes of several members run at once (wheelpieces).
        own_hash = (
            level > 0 and self.workers >= OWN_HASH_FROM and piece_count(size) > 1 and source.rereads
        )
        work = PieceWork(arcname, source, level, self.deflater, None if own_hash else HashChain())
        new = _NewMember(arcname, self._entry(arcname, size, mode, level), zip64, key, work)
        if own_hash:
            new.hashed = self._pool.submit(wheelpieces.hash_member, work)
        self._push(("start", new, None))
        for index in range(work.pieces):
            data, previous = None, b""
            if isinstance(source, StreamSource):  # only this thread may read it, in order
                data, previous = source.take(DEFLATE_CHUNK)
            self._push(
                (
                    "piece",
                    new,
                    self._pool.submit(wheelpieces.run_piece, work, index, data, previous),
                )
            )
        self._push(("finish", new, None))

    def _entry(self, arcname: str, size: int, mode: int, level: int | None = None) -> Central:
        level = self.level if level is None else level
        encoded = arcname.encode("utf-8")
        return Central(
            name=encoded,
            flag_bits=0 if encoded.isascii() else 0x800,
            compress_type=zipfile.ZIP_DEFLATED if level else zipfile.ZIP_STORED,
            date_time=self.date_time,
            crc=0,
            compress_size=0,
            file_size=size,
            header_offset=0,
            external_attr=((0o100000 | (mode & 0o7777)) << 16),
        )

    def _push(self, item: _Item) -> None:
        """Queue ``item``; write what is done, in order, while more jobs than the window allows
        are in flight (the bound on memory: see :mod:`rocm_build.wheel.wheelpieces`)."""
        self._queue.append(item)
        if item[2] is not None and not isinstance(item[2], str):
            self._jobs += 1
        self._drain(self.window)

    def _drain(self, limit: int) -> None:
        """Write what the queue holds, in order, until at most ``limit`` jobs are left in flight
        (0: everything, so that the file ends with the last member added)."""
        while self._queue and (limit == 0 or self._jobs > limit):
            what, item, job = self._queue.popleft()
            if job is not None and not isinstance(job, str):
                self._jobs -= 1
            if isinstance(item, _Copy):
                self._copy(item, job.result() if isinstance(job, Future) else str(job))
                continue
            if what == "start":
                item.entry.header_offset = zipformat.write_local(self._fh, item.entry, item.zip64)
                item.data_start = self._fh.tell()
            elif what == "finish":
                self._finish(item)
            else:
                assert isinstance(job, Future)
                self._write_piece(item, job.result())

    def _write_piece(self, new: _NewMember, done: PieceDone) -> None:
        self._fh.write(done.out)
        if new.key:
            new.stream_crc = rawdeflate.crc32(done.out, new.stream_crc)
        new.crc = rawdeflate.crc32_combine(new.crc, done.crc, done.size)
        new.total += done.size
        new.written += len(done.out)
        self.bytes_in += done.size
        self.bytes_out += len(done.out)
        self._syncer.wrote(self.bytes_out)

    def _finish(self, new: _NewMember) -> None:
        """Patch the member's local header with its CRC and sizes; record its hash and store it
        in the cache now, or (its hash job still running) when RECORD is written."""
        if new.hashed is None or new.hashed.done():
            self._close(new)
        entry, size, written = new.entry, new.total, new.written
        if not new.zip64 and written >= zipformat.ZIP32_LIMIT:
            raise BundleError(f"{new.arcname}: deflated size overflowed; use compression level 0")
        entry.crc, entry.compress_size = new.crc, written
        end = self._fh.tell()
        self._fh.seek(entry.header_offset + 14)
        if new.zip64:
            self._fh.write(struct.pack("<L", new.crc))
            self._fh.seek(entry.header_offset + _LOCAL.size + len(entry.name) + 4)
            self._fh.write(struct.pack("<QQ", size, written))
        else:
            self._fh.write(struct.pack("<LLL", new.crc, written, size))
        self._fh.seek(end)
        self._entries.append(entry)
        self._records.append(self._recorded(new) if new.hashed is None else new)

    def _close(self, new: _NewMember) -> None:
        new.work.source.close()
        self._open.discard(new.work.source)

    def _recorded(self, new: _NewMember) -> RecordEntry:
        """The member's RECORD row once its hash is in (waits for its hash job); the deflate
        cache stores its stream then."""
        if new.hashed is None:
            assert new.work.chain is not None
            digest = new.work.chain.digest(new.work.pieces)
        else:
            hashed = new.hashed.result()
            self._close(new)
            if hashed.crc != new.crc:
                raise BundleError(
                    f"{new.arcname}: changed while being added (its bytes read twice differ): "
                    "leave its files alone while a wheel is written, and run again"
                )
            digest = hashed.digest
        entry = new.entry
        if new.key and self.cache is not None and entry.compress_type == zipfile.ZIP_DEFLATED:
            cached = deflatecache.Entry(
                Path(), new.crc, new.total, new.written, new.stream_crc, digest
            )
            self._store(new.key, new.data_start, cached)
        return RecordEntry(new.arcname, record_hash(digest), new.total)

    def _store(self, key: str, start: int, entry: deflatecache.Entry) -> None:
        """Copy a member's stream just written into the cache (a failure only costs the entry)."""
        assert self.cache is not None
        self._fh.flush()
        here = self._fh.tell()
        try:
            with self.cache.new_entry(key) as out:
                copy_range(self._fh, start, out, entry.compress_size)
                self.cache.seal(out, key, entry)
        except OSError as err:
            log.debug("deflate cache: entry not stored (%s)", err)
        finally:
            self._fh.seek(here)

    def _add_cached(self, arcname: str, entry: Central, key: str) -> bool:
        """Write the member from the cache: False (and nothing written) on a miss or when the
        stored stream fails its length or CRC-32 check (that entry is removed)."""
        assert self.cache is not None
        hit = self.cache.get(key)
        if hit is None or hit.file_size != entry.file_size:
            return False
        self._drain(0)
        entry.crc, entry.compress_size = hit.crc, hit.compress_size
        zip64 = max(hit.file_size, hit.compress_size) >= zipformat.ZIP32_LIMIT
        entry.header_offset = zipformat.write_local(self._fh, entry, zip64)
        crc = 0

        def seen(block: bytes) -> None:
            nonlocal crc
            crc = rawdeflate.crc32(block, crc)

        try:
            with hit.open() as src:
                copy_range(src, deflatecache.HEAD.size, self._fh, hit.compress_size, seen)
        except (OSError, BundleError):
            crc = ~hit.stream_crc
        if crc != hit.stream_crc:
            log.info("deflate cache: damaged entry for %s removed", arcname)
            self._fh.seek(entry.header_offset)
            self._fh.truncate()
            self.cache.discard(key)
            entry.crc = entry.compress_size = 0
            return False
        self.cache.hits += 1
        self.bytes_in += hit.file_size
        self.bytes_out += hit.compress_size
        self._syncer.wrote(self.bytes_out)
        self._entries.append(entry)
        self._records.append(RecordEntry(arcname, record_hash(hit.sha256), hit.file_size))
        return True

    # --- finish ----------------------------------------------------------------------------------

    def commit(self) -> Path:
        """Write RECORD and the central directory, then rename the archive into place."""
        record_name = f"{self.dist_info}/RECORD"
        self._drain(0)
        records = [r if isinstance(r, RecordEntry) else self._recorded(r) for r in self._records]
        self.add_bytes(record_name, self._record_text(record_name, records).encode())
        self._drain(0)
        cd_start = self._fh.tell()
        for entry in self._entries:
            zipformat.write_central(self._fh, entry)
        cd_end = self._fh.tell()
        zipformat.write_end(self._fh, len(self._entries), cd_start, cd_end - cd_start)
        self._fh.flush()
        faults.point("wheel.commit.written")
        self._syncer.join()
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
        if self.cache is not None and self.cache.stored:
            with contextlib.suppress(OSError):
                self.cache.trim()
        faults.point("wheel.commit.renamed")
        return self.final_path

    @staticmethod
    def _record_text(record_name: str, records: list[RecordEntry]) -> str:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        for rec in records:
            writer.writerow([rec.path, rec.hash, "" if rec.size is None else rec.size])
        writer.writerow([record_name, "", ""])
        return out.getvalue()
