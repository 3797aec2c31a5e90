"""The payload of a compressed offload bundle (``CCOB``: zlib or zstd), decompressed as a stream
in bounded memory and time, whatever its bytes claim.

A payload is untrusted: a few kB of zlib or zstd can stand for gigabytes. So output is made at
most :data:`STEP` bytes per call into the decompressor (each call short, so Ctrl-C and SIGTERM
are seen between them), never past the size the bundle's header declares (nor past
:data:`RAW_LIMIT`): more is a :class:`~rocm_build.binary.elf.BundleFormatError`, at the first
byte too many.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import IO, Any, cast

from rocm_build.common import proc

__all__ = [
    "RAW_LIMIT",
    "STEP",
    "Decompressed",
    "FormatError",
    "Interrupted",
    "zstd_frame_end",
]

#: the most bytes one compressed bundle may decompress to: a bundle is the device code of one
#: translation unit for every target (hundreds of MB at most); v2's size field stops at 4 GiB
RAW_LIMIT = 4 << 30
#: the most bytes one call into a decompressor makes or takes
STEP = 1 << 20


class Interrupted(Exception):
    """A decompression stopped by Ctrl-C or SIGTERM (:data:`rocm_build.common.proc.STOPPING`)."""


class FormatError(ValueError):
    """A payload that does not decompress, or decompresses to more than it may."""


class Decompressed:
    """The bytes ``read_in`` (compressed, in order; b"" at its end) decompresses to with
    ``method`` (0 zlib, 1 zstd), read in order, at most ``limit`` bytes in all."""

    def __init__(self, read_in: Callable[[int], bytes], method: int, limit: int) -> None:
        self.done = 0  # bytes given out so far
        self._limit = min(limit, RAW_LIMIT)
        self._read_in = read_in
        self._tail = b""  # zlib: compressed bytes taken but not used yet
        self._fed = 0  # zlib: compressed bytes taken
        self._zlib: Any = None
        self._zstd: Any = None
        self._zstd_end = False
        if method == 1:
            import zstandard

            source = _Source(read_in)
            self._zstd = zstandard.ZstdDecompressor().stream_reader(
                cast(IO[bytes], source), read_size=STEP // 16, read_across_frames=False
            )
        else:
            self._zlib = zlib.decompressobj()

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end); raises past the limit."""
        parts: list[bytes] = []
        got = 0
        while got < n:
            block = self._step(min(n - got, STEP))
            if not block:
                break
            parts.append(block)
            got += len(block)
        self.done += got
        if self.done > self._limit:
            raise FormatError(f"decompresses to more than the {self._limit} bytes it may")
        return b"".join(parts)

    def skip(self, n: int) -> int:
        """Read and drop up to ``n`` bytes; how many there were."""
        left = n
        while left and (block := self.read(min(left, STEP))):
            left -= len(block)
        return n - left

    def drain(self) -> int:
        """Read to the end (dropping the bytes); the total decompressed size."""
        while self.read(STEP):
            pass
        return self.done

    @property
    def consumed(self) -> int | None:
        """zlib, once at its end: how many compressed bytes the stream took (None before)."""
        if self._zlib is None or not self._zlib.eof:
            return None
        return self._fed - len(self._tail) - len(self._zlib.unused_data)

    def _step(self, n: int) -> bytes:
        # one more than the limit is asked for, so that a stream past it is seen, not cut
        n = min(n, self._limit + 1 - self.done)
        if n <= 0:
            return b""
        if proc.STOPPING.is_set():  # a worker thread: the signal's KeyboardInterrupt is not here
            raise Interrupted("interrupted")
        try:
            if self._zstd is not None:
                if self._zstd_end:
                    return b""
                out = bytes(self._zstd.read(n))
                # a short read is the frame's end: reading on would take what follows it
                # (padding, the next bundle) for another frame
                self._zstd_end = len(out) < n
                return out
            while not self._zlib.eof:
                if not self._tail:
                    self._tail = self._read_in(STEP // 16)
                    self._fed += len(self._tail)
                    if not self._tail:
                        break
                out = self._zlib.decompress(self._tail, n)
                self._tail = self._zlib.unconsumed_tail
                if out:
                    return bytes(out)
            return b""
        except FormatError:
            raise
        except Exception as err:  # zlib.error, zstandard.ZstdError: the payload is damaged
            raise FormatError(f"does not decompress ({err})") from err


class _Source:
    """``read_in`` as the file-like object zstandard's reader takes."""

    def __init__(self, read_in: Callable[[int], bytes]) -> None:
        self._read_in = read_in

    def read(self, n: int = -1) -> bytes:
        return self._read_in(STEP if n < 0 else min(n, STEP))


def zstd_frame_end(data: Any, pos: int, limit: int) -> int:
    """Where the zstd frame at ``pos`` ends (walking its block headers: nothing decompressed);
    raises :class:`FormatError` for a frame that runs past ``limit``."""
    if pos + 6 > limit:
        raise FormatError("truncated zstd frame")
    descriptor = data[pos + 4]
    fcs_flag, single, dict_flag = descriptor >> 6, descriptor >> 5 & 1, descriptor & 3
    checksum = descriptor >> 2 & 1
    fcs = (1 if single else 0, 2, 4, 8)[fcs_flag]
    at = pos + 5 + (0 if single else 1) + (0, 1, 2, 4)[dict_flag] + fcs
    while True:
        if at + 3 > limit:
            raise FormatError("truncated zstd frame")
        (word,) = struct.unpack("<I", bytes(data[at : at + 3]) + b"\0")
        last, kind, size = word & 1, word >> 1 & 3, word >> 3
        if kind == 3:
            raise FormatError("zstd frame with a reserved block type")
        at += 3 + (1 if kind == 1 else size)
        if last:
            break
    at += 4 * checksum
    if at > limit:
        raise FormatError("truncated zstd frame")
    return int(at)
