"""The wheel writer's per-piece work, done on its worker threads.

A new member is cut into 4 MiB pieces. Each piece is one job on the writer's pool, and the job
does all the work on that piece's bytes: it reads them by position (:class:`Source`), applies the
edits the source carries (search paths, pruned device code: :class:`rocm_build.binary.elfpatch.
PatchedFile`), takes their CRC-32 and deflates them (:mod:`rocm_build.wheel.rawdeflate`). The
writer's own thread only writes the finished pieces in order, combines their CRC-32s
(``crc32_combine``) and patches the local headers: no single thread touches every byte.

sha256 cannot be split: a member's hash takes its bytes one after another, at one core's speed
(1.2-2 GB/s), fed by its pieces through a :class:`HashChain` by whichever worker has the next
one. Many cores deflating outrun that (and the worker holding the chain holds back its own
piece, which the writer waits for in order), so with many workers
(:data:`.wheelfile.OWN_HASH_FROM`) a deflated member of more than one piece that can be read
again is hashed by a job of its own (:func:`hash_member`), which reads it in order beside the
piece jobs and never holds more than one piece: the hashes of several members run at once, and
the writer waits for them only when it writes RECORD. That job also takes the bytes' CRC-32,
which must equal the one the pieces made (else the file changed while it was read). Streams
(read once) and sources whose edits are made on demand always use the chain.

Memory: a job holds its piece (4 MiB) and the 32 KiB before it (the deflater's dictionary) while
it runs, and its deflated piece until the writer has written it; a piece parked in the chain
waits for an earlier piece of its member, whose job has not finished, so both are in the queue.
The writer keeps at most ``window`` jobs queued (:attr:`.wheelfile.WheelWriter.window`:
the workers and half as many again, at least 2, done and waiting to be written): at most
``window`` pieces and their deflated pieces, 5-8 MiB each, whatever the size of a member or a
wheel (16 workers: 24 jobs, about 120 MB for device code). A member's hash job holds one piece
while it runs, and runs on one of the workers.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from rocm_build.common.errors import BundleError
from rocm_build.wheel import rawdeflate

__all__ = [
    "DEFLATE_CHUNK",
    "BytesSource",
    "FileSource",
    "HashChain",
    "PieceDone",
    "Source",
    "StreamSource",
    "hash_member",
    "piece_count",
    "run_piece",
]

DEFLATE_CHUNK = 4 << 20  # deflate work unit: a chunk boundary costs the ratio < 1 %


class Source(Protocol):
    """A member's bytes by position; ``pread`` may be called from several threads at once."""

    @property
    def size(self) -> int: ...

    @property
    def rereads(self) -> bool:
        """Whether reading the bytes a second time costs only the reads (no edit made again):
        then a member of several pieces gets a hash job of its own (:func:`hash_member`)."""
        ...

    def pread(self, offset: int, n: int) -> bytes: ...

    def close(self) -> None: ...


class Readable(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class FileSource:
    """A file read with ``os.pread``: no shared file position, so any thread may read any part.
    Opened at once (the caller may remove or replace the path afterwards)."""

    def __init__(self, path: Path, size: int | None = None) -> None:
        self._fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        self._size = os.fstat(self._fd).st_size if size is None else size

    @property
    def size(self) -> int:
        return self._size

    rereads = True

    def pread(self, offset: int, n: int) -> bytes:
        parts = []
        while n > 0:
            block = os.pread(self._fd, n, offset)
            if not block:
                break
            parts.append(block)
            offset += len(block)
            n -= len(block)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass(eq=False)
class BytesSource:
    data: bytes
    rereads = True

    @property
    def size(self) -> int:
        return len(self.data)

    def pread(self, offset: int, n: int) -> bytes:
        return self.data[offset : offset + n]

    def close(self) -> None:
        pass


class StreamSource:
    """A stream that can only be read in order (``read``): the writer's thread reads each piece
    before it hands it to a job (:meth:`take`), and keeps the tail the next piece's dictionary
    needs. Every other step still runs on the workers."""

    def __init__(self, stream: Readable, size: int) -> None:
        self._stream = stream
        self._size = size
        self._tail = b""

    rereads = False  # it can be read only once

    @property
    def size(self) -> int:
        return self._size

    def take(self, n: int) -> tuple[bytes, bytes]:
        """The next ``n`` bytes (fewer at the end of the stream) and the 32 KiB before them."""
        data = self._stream.read(n)
        previous, self._tail = self._tail, data[-rawdeflate.DICT_SIZE :]
        return data, previous

    def pread(self, offset: int, n: int) -> bytes:  # pragma: no cover - read through take()
        raise NotImplementedError("a stream is read in order, through take()")

    def close(self) -> None:
        pass


class HashChain:
    """A member's sha256, fed its pieces in order by whichever thread has the next one.

    ``feed(i, piece)`` never waits: a piece that arrives early is parked until the one before it
    is in; the thread that brings the missing piece hashes it and every parked piece after it."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self._lock = threading.Lock()
        self._parked: dict[int, bytes] = {}
        self._next = 0
        self._busy = False

    def feed(self, index: int, piece: bytes) -> None:
        with self._lock:
            self._parked[index] = piece
            if self._busy:
                return  # the thread hashing now takes it (it looks again before it stops)
            self._busy = True
        while True:
            with self._lock:
                if self._next not in self._parked:
                    self._busy = False
                    return
                ready = self._parked.pop(self._next)
                self._next += 1
            self._sha.update(ready)  # outside the lock: hashlib lets go of the GIL

    def digest(self, pieces: int) -> bytes:
        """The sha256 once all ``pieces`` are in (the writer asks after their jobs finished)."""
        with self._lock:
            if self._next != pieces or self._busy:
                raise BundleError(f"internal: {self._next} of {pieces} pieces hashed")
            return self._sha.digest()


@dataclass
class PieceDone:
    """A finished job: the deflated piece and the CRC-32 and length of what it holds."""

    out: bytes | bytearray
    crc: int
    size: int


@dataclass(eq=False)
class PieceWork:
    """What every job of one member shares: where its bytes come from and how to deflate them."""

    arcname: str
    source: Source
    level: int  # 0: stored
    deflater: str
    #: fed by the pieces in order; None when a job of its own hashes the member (hash_member)
    chain: HashChain | None = field(default_factory=HashChain)

    @property
    def pieces(self) -> int:
        return piece_count(self.source.size)


def piece_count(size: int) -> int:
    """How many pieces a member of ``size`` bytes is cut into (an empty one is one empty piece)."""
    return max(1, -(-size // DEFLATE_CHUNK))


def run_piece(
    work: PieceWork, index: int, data: bytes | None = None, previous: bytes = b""
) -> PieceDone:
    """Piece ``index`` of ``work``: read (unless the writer read it: ``data``, ``previous``),
    hashed, checksummed and deflated. Runs on a worker."""
    size = work.source.size
    offset = index * DEFLATE_CHUNK
    n = min(DEFLATE_CHUNK, size - offset)
    last = index == work.pieces - 1
    if data is None:
        # The last piece asks for one byte more: a file that grew since it was measured shows.
        data = work.source.pread(offset, n + 1 if last else n)
        if index and work.level and rawdeflate.uses_dictionary(work.deflater):
            previous = work.source.pread(offset - rawdeflate.DICT_SIZE, rawdeflate.DICT_SIZE)
    if len(data) != n:
        have = "more" if len(data) > n else "fewer"
        raise BundleError(
            f"{work.arcname}: changed while being added ({size} bytes, then {have} at offset "
            f"{offset}): leave its files alone while a wheel is written, and run again"
        )
    if work.chain is not None:
        work.chain.feed(index, data)
    crc = rawdeflate.crc32(data)
    if not work.level:
        return PieceDone(data, crc, n)
    out = rawdeflate.compress(data, work.level, last, previous, use=work.deflater)
    return PieceDone(out, crc, n)


@dataclass(frozen=True)
class MemberHash:
    """What :func:`hash_member` read: the sha256 and CRC-32 of the member's bytes."""

    digest: bytes
    crc: int


def hash_member(work: PieceWork) -> MemberHash:
    """The member's sha256 and CRC-32, its bytes read in order a piece at a time (runs on a
    worker beside the piece jobs; see the module docstring)."""
    sha = hashlib.sha256()
    crc = 0
    size = work.source.size
    for offset in range(0, size, DEFLATE_CHUNK):
        data = work.source.pread(offset, min(DEFLATE_CHUNK, size - offset))
        sha.update(data)
        crc = rawdeflate.crc32(data, crc)
    return MemberHash(sha.digest(), crc)
