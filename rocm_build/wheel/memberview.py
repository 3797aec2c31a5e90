"""Random access to a wheel member's bytes without unpacking it anywhere: what lets a plan read
the ELF facts and the device code of a wheel's libraries while writing nothing.

A deflated member can only be inflated from its start. :class:`MemberView` inflates it forward,
keeps the blocks a reader touched (1 MiB each, at most :data:`KEEP` of them, the least recently
used dropped, never the first or the last two) and starts the inflate over when a read falls
before where it stands. ELF readers jump from the header to the section table at the file's
end and back to the dynamic section, so a library costs about two inflates of itself (one to
the end, one to the end of its device code); the memory stays bounded whatever its size.

The first pass from the start checks the bytes against RECORD as they go by, as an extraction
would: a member that does not match is refused (:class:`~.wheelread.UnsafeInput`) when that pass
reaches its end, or when the view is closed (which reads on to the end if no pass got there).
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections import OrderedDict
from types import TracebackType
from typing import IO, overload

from rocm_build.wheel.wheelread import WheelReader

__all__ = ["BLOCK", "KEEP", "MemberView"]

BLOCK = 1 << 20  # bytes per kept block
KEEP = 48  # blocks kept: 48 MiB at most per view
_STEP = 8 << 20  # bytes read at a time when inflating past blocks nobody asked for


class MemberView(io.RawIOBase):
    """A member of ``reader`` as a read-only, seekable stream and a sliceable buffer
    (``len``, ``view[a:b]``, ``view[i]``, ``find``): what pyelftools and the offload-bundle walk
    read. Close it (or use ``with``) to finish the RECORD check."""

    def __init__(self, reader: WheelReader, name: str) -> None:
        super().__init__()
        self._reader, self.name = reader, name
        self._size = reader.member(name).file_size
        self._blocks: OrderedDict[int, bytes] = OrderedDict()
        self._fh: IO[bytes] | None = None
        self._at = 0  # where the inflate stands
        self._pos = 0  # the stream position
        # None: done (or checked before, by another reading of the member)
        self._check = None if name in reader.verified else reader.checker(name)
        self._checking = True  # this inflate started at 0 and fed every byte to the check

    # --- the inflate ------------------------------------------------------------------------

    def _restart(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh, self._at = self._reader.open(self.name), 0
        if self._check is not None:
            self._check = self._reader.checker(self.name)
        self._checking = self._check is not None

    def _read_on(self, size: int) -> bytes:
        """The next ``size`` bytes of the inflate (fewer at the end)."""
        if self._fh is None:
            self._restart()
        assert self._fh is not None
        try:
            data = self._fh.read(size)
        except (zipfile.BadZipFile, zlib.error, EOFError) as err:
            raise self._reader._unsafe(self.name, f"cannot be read ({err})") from None
        self._at += len(data)
        if self._checking and self._check is not None:
            self._check.update(data)
            if self._at >= self._size:
                self._check.finish()
                self._check = None
        return data

    def _block(self, index: int) -> bytes:
        if (found := self._blocks.get(index)) is not None:
            self._blocks.move_to_end(index)
            return found
        start = index * BLOCK
        if start < self._at:
            self._restart()
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
                    self._restart()
                while self._check is not None and self._read_on(_STEP):
                    pass
                if self._check is not None:  # a member shorter than its directory entry
                    self._check.finish()
        finally:
            if self._fh is not None:
                self._fh.close()
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
