"""Random access to a wheel member's bytes without unpacking it anywhere: what lets a plan read
the ELF facts and the device code of a wheel's libraries while writing nothing.

A deflated member can only be inflated from its start, or from a saved state of the inflater
(zlib's ``Decompress.copy``, with where its input stood: the technique of zlib's ``zran``
example). :class:`MemberView` inflates forward, saves such a state every :data:`CHECKPOINT`
bytes of output (about 40 KiB each), keeps the blocks a reader touched (1 MiB each, at most
:data:`KEEP` of them, the least recently used dropped, never the first or the last two), and
when a read falls before where the inflate stands, starts again from the last state before it.
ELF readers jump from the header to the section table at the file's end and back; so a library
is inflated about once whatever the order of the reads, in bounded memory. Stored members are
read where they are; another compression (not seen in wheels) is inflated from the start again.

The first pass from the start checks the bytes against RECORD as they go by, as an extraction
would: a member that does not match is refused (:class:`~.wheelread.UnsafeInput`) when that pass
reaches its end, or when the view is closed (which reads on to the end if no pass got there).
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections import OrderedDict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from types import TracebackType
from typing import IO, Any, overload

from rocm_build.wheel.wheelread import RecordCheck, WheelReader

__all__ = ["BLOCK", "CHECKPOINT", "KEEP", "MemberView"]

BLOCK = 1 << 20  # bytes per kept block
KEEP = 48  # blocks kept: 48 MiB at most per view
CHECKPOINT = 16 << 20  # bytes of output between saved inflater states
_STEP = 8 << 20  # bytes read at a time when inflating past blocks nobody asked for
_IN = 1 << 16  # compressed bytes fed to the inflater at a time


class _Member:
    """A member's bytes in order from any saved point: ``rewind(offset)`` goes back (or ahead)
    to the nearest point at or before ``offset`` it can start from and returns it; ``read``
    goes on from there."""

    def __init__(self, reader: WheelReader, name: str) -> None:
        member = reader.member(name)
        self._reader, self._name, self._member = reader, name, member
        self._data = -1  # where the member's compressed bytes start in the wheel
        self._in = 0  # compressed bytes taken so far
        self._out = 0  # bytes given out so far
        self._tail = b""  # compressed bytes fed but not yet used
        self._z: Any = None
        self._points: list[tuple[int, int, Any, bytes]] = []  # (out, in, state, tail)
        self._seq: IO[bytes] | None = None  # other methods: zipfile's stream
        self.method = member.compress_type

    def _open(self) -> None:
        # the wheel the reader opened and checked, read by position (not its path again)
        if self._data < 0 and self.method in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            self._data = self._reader.data_offset(self._member)

    def rewind(self, offset: int) -> int:
        """Start again from the nearest point at or before ``offset``; returns that point."""
        self._open()
        if self.method == zipfile.ZIP_STORED:
            self._out = offset
            return offset
        if self.method != zipfile.ZIP_DEFLATED:
            if self._seq is not None:
                self._seq.close()
            self._seq, self._out = self._reader.open(self._name), 0
            return 0
        usable = [p for p in self._points if p[0] <= offset]
        if usable:
            out, taken, state, tail = usable[-1]
            self._out, self._in, self._z, self._tail = out, taken, state.copy(), tail
        else:
            self._out, self._in, self._z, self._tail = 0, 0, zlib.decompressobj(-15), b""
        return self._out

    def ahead(self, offset: int) -> int:
        """The nearest saved point at or before ``offset`` (0 if none)."""
        if self.method == zipfile.ZIP_STORED:
            return offset
        return max((p[0] for p in self._points if p[0] <= offset), default=0)

    def read(self, size: int) -> bytes:
        self._open()
        if self._z is None and self._seq is None and self.method != zipfile.ZIP_STORED:
            self.rewind(0)
        if self.method == zipfile.ZIP_STORED:
            size = max(0, min(size, self._member.file_size - self._out))
            data = self._reader.pread(size, self._data + self._out)
        elif self._seq is not None:
            data = self._seq.read(size)
        else:
            data = self._inflate(size)
        self._out += len(data)
        return data

    def _inflate(self, size: int) -> bytes:
        parts: list[bytes] = []
        got = 0
        while got < size and not self._z.eof:
            if not self._tail:
                left = self._member.compress_size - self._in
                self._tail = self._reader.pread(min(_IN, left), self._data + self._in)
                self._in += len(self._tail)
                if not self._tail:
                    break  # truncated: the size check says so
            before = self._out + got
            data = self._z.decompress(self._tail, size - got)
            self._tail = self._z.unconsumed_tail
            parts.append(data)
            got += len(data)
            after = self._out + got
            if after // CHECKPOINT > before // CHECKPOINT and not self._z.eof:
                known = self._points[-1][0] if self._points else 0
                if after > known:
                    self._points.append((after, self._in, self._z.copy(), self._tail))
        return b"".join(parts)

    def close(self) -> None:
        if self._seq is not None:
            self._seq.close()
        self._points.clear()


class MemberView(io.RawIOBase):
    """A member of ``reader`` as a read-only, seekable stream and a sliceable buffer
    (``len``, ``view[a:b]``, ``view[i]``, ``find``): what pyelftools and the offload-bundle walk
    read. Close it (or use ``with``) to finish the RECORD check."""

    def __init__(self, reader: WheelReader, name: str) -> None:
        super().__init__()
        self._reader, self.name = reader, name
        self._size = reader.member(name).file_size
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._src = _Member(reader, name)
        self._at = 0  # where the inflate stands
        self._pos = 0  # the stream position
        # None: done (or checked before, by another reading of the member)
        self._check = None if name in reader.verified else reader.checker(name)
        self._checking = self._check is not None  # the inflate went from 0 through every byte
        self._hasher: ThreadPoolExecutor | None = None
        self._pending: deque[Future[None]] = deque()

    # --- the inflate ------------------------------------------------------------------------

    def _go(self, offset: int) -> None:
        """Move the inflate to the saved point nearest before ``offset``."""
        self._drain()
        self._at = self._src.rewind(offset)
        if self._check is not None and self._at == 0:
            self._check = self._reader.checker(self.name)  # a pass from the start: check it
        self._checking = self._check is not None and self._at == 0

    def _read_on(self, size: int) -> bytes:
        """The next ``size`` bytes of the inflate (fewer at the end)."""
        try:
            data = self._src.read(size)
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise self._reader._unsafe(self.name, f"cannot be read ({err})") from None
        self._at += len(data)
        if self._checking and self._check is not None:
            self._hash(self._check, data)
            if self._at >= self._size:
                self._drain()
                self._check.finish()
                self._check = None
        return data

    def _hash(self, check: RecordCheck, data: bytes) -> None:
        """``check.update(data)`` on a thread of its own, as an extraction hashes (sha256 and
        CRC-32 let go of the GIL): the inflate goes on meanwhile; two blocks wait at most."""
        if self._hasher is None:
            self._hasher = ThreadPoolExecutor(max_workers=1)
        self._pending.append(self._hasher.submit(check.update, data))
        while len(self._pending) > 2:
            self._pending.popleft().result()

    def _drain(self) -> None:
        while self._pending:
            self._pending.popleft().result()

    def _block(self, index: int) -> bytes:
        if (found := self._blocks.get(index)) is not None:
            self._blocks.move_to_end(index)
            return found
        start = index * BLOCK
        if start < self._at or self._src.ahead(start) > self._at:
            self._go(start)
        while self._at < start:
            self._read_on(min(_STEP, start - self._at))
        data = self._read_on(BLOCK)
        self._blocks[index] = data
        if len(self._blocks) > KEEP:
            # the first block (the ELF header) and the last two (its section table, read by
            # every lookup of a section) stay: dropping them would mean inflating it all again
            last = (self._size - 1) // BLOCK
            oldest = next(i for i in self._blocks if i not in (0, last, last - 1))
            del self._blocks[oldest]
        return data

    def pread(self, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` (fewer past the end)."""
        index, lo = divmod(offset, BLOCK)
        if size > 0 and lo + size <= BLOCK and (block := self._blocks.get(index)) is not None:
            return block[lo : lo + size]  # most reads: inside one kept block
        end = min(self._size, offset + max(size, 0))
        parts = []
        while offset < end:
            block = self._block(offset // BLOCK)
            lo = offset % BLOCK
            part = block[lo : lo + (end - offset)]
            if not part:
                break
            parts.append(part)
            offset += len(part)
        return b"".join(parts)

    # --- a buffer ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._size

    @overload
    def __getitem__(self, key: int) -> int: ...
    @overload
    def __getitem__(self, key: slice) -> bytes: ...
    def __getitem__(self, key: int | slice) -> int | bytes:
        if isinstance(key, int):
            index = key + self._size if key < 0 else key
            if not 0 <= index < self._size:
                raise IndexError("member view index out of range")
            return self.pread(index, 1)[0]
        start, stop, step = key.indices(self._size)
        if step != 1:
            raise ValueError("a member view slices with step 1 only")
        return self.pread(start, stop - start)

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        """Where ``sub`` first occurs in ``[start, end)``, or -1; reads a block and the start of
        the next at a time."""
        end = self._size if end is None else min(end, self._size)
        pos = max(start, 0)
        while pos < end:
            hi = min(end, pos - pos % BLOCK + BLOCK + len(sub) - 1)
            window = self.pread(pos, hi - pos)
            if (found := window.find(sub)) >= 0:
                return pos + found
            if hi >= end:
                return -1
            pos = hi - len(sub) + 1
        return -1

    # --- a stream ---------------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            size = self._size - self._pos
        index, lo = divmod(self._pos, BLOCK)
        block = self._blocks.get(index)
        if block is not None and lo + size <= len(block):  # most reads: pyelftools' small ones
            self._pos += size
            return block[lo : lo + size]
        data = self.pread(self._pos, size)
        self._pos += len(data)
        return data

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        return len(data)

    def close(self) -> None:
        """Finish the RECORD check (reading on to the end if no pass got there), then let go."""
        if self.closed:
            return
        try:
            if self._check is not None:
                if not self._checking:
                    self._go(0)
                while self._check is not None and self._read_on(_STEP):
                    pass
                if self._check is not None:  # a member shorter than its directory entry
                    self._check.finish()
        finally:
            if self._hasher is not None:
                self._hasher.shutdown(wait=True, cancel_futures=True)
            self._src.close()
            self._blocks.clear()
            super().close()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if kind is not None:  # an error already: do not read on to check the rest
            self._check = None
        self.close()
