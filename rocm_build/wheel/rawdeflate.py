"""Raw deflate in pieces that join into one stream, for the wheel writer's thread pool.

The writer cuts a large member into chunks, compresses them in parallel and writes the pieces one
after another as one ZIP member. Every piece but the last must therefore end on a byte boundary,
without the BFINAL ("last block") bit; zlib's ``Z_SYNC_FLUSH`` produces exactly that.

libdeflate (the ``deflate`` package) compresses about twice as fast as zlib at the same level,
with a slightly smaller output, but it compresses whole buffers only: its output always ends with
a final block, at a bit position it does not report. :func:`compress` finds that position by
running zlib's inflate over the piece with ``Z_BLOCK``, which stops at every block boundary and
reports the bit offset there (Python's ``zlib`` module does not offer that flush mode, so libz is
called through ctypes). It then clears the final block's BFINAL bit and appends an empty stored
block, which realigns the stream to a byte exactly as a sync flush does. The inflate pass also
checks that the piece decodes to the chunk's length.

Where libdeflate or libz cannot be loaded, pieces come from zlib, each chunk primed with the
previous chunk's last 32 KiB as dictionary (as pigz does).

No library offers this splice, which is why it is written here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import zlib
from types import ModuleType

from rocm_build.errors import BundleError

__all__ = ["DICT_SIZE", "compress", "crc32", "implementation"]

DICT_SIZE = 32 * 1024  # the deflate window: what a zlib chunk is primed with

try:  # a declared dependency; the fallback covers platforms without a wheel for it
    import deflate as _libdeflate_module

    _libdeflate: ModuleType | None = _libdeflate_module
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _libdeflate = None

_Z_OK, _Z_STREAM_END, _Z_BLOCK = 0, 1, 5
_AT_BOUNDARY, _IN_FINAL = 128, 64  # z_stream.data_type flags after an inflate(Z_BLOCK) return
_EMPTY_STORED = b"\x00\x00\xff\xff"  # LEN 0 and its complement, after the 3 header bits
_SCAN_OUT = 1 << 18  # inflate output scratch (discarded)


class _ZStream(ctypes.Structure):
    """zlib's ``z_stream`` (zlib.h); uInt is unsigned int, uLong is unsigned long."""

    _fields_ = [
        ("next_in", ctypes.c_void_p),
        ("avail_in", ctypes.c_uint),
        ("total_in", ctypes.c_ulong),
        ("next_out", ctypes.c_void_p),
        ("avail_out", ctypes.c_uint),
        ("total_out", ctypes.c_ulong),
        ("msg", ctypes.c_char_p),
        ("state", ctypes.c_void_p),
        ("zalloc", ctypes.c_void_p),
        ("zfree", ctypes.c_void_p),
        ("opaque", ctypes.c_void_p),
        ("data_type", ctypes.c_int),
        ("adler", ctypes.c_ulong),
        ("reserved", ctypes.c_ulong),
    ]


@functools.cache
def _libz() -> ctypes.CDLL | None:
    # find_library runs ldconfig: only when the usual name is missing
    for name in ("libz.so.1", None):
        name = name or ctypes.util.find_library("z")
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.zlibVersion.restype = ctypes.c_char_p
        stream = ctypes.POINTER(_ZStream)
        lib.inflateInit2_.argtypes = [stream, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.inflate.argtypes = [stream, ctypes.c_int]
        lib.inflateEnd.argtypes = [stream]
        return lib
    return None


def implementation() -> str:
    """Which deflate :func:`compress` uses here: ``libdeflate`` or ``zlib``."""
    return "libdeflate" if _libdeflate is not None and _libz() is not None else "zlib"


def crc32(data: bytes | bytearray, value: int = 0) -> int:
    return _libdeflate.crc32(data, value) if _libdeflate is not None else zlib.crc32(data, value)


def compress(
    chunk: bytes, level: int, last: bool, previous: bytes = b"", *, use: str = ""
) -> bytes | bytearray:
    """Raw deflate of ``chunk`` at zlib-compatible ``level`` (1-9).

    Unless ``last``, the piece ends byte-aligned without BFINAL, so the next piece can follow it
    in the same stream. ``previous`` (the preceding chunk) primes zlib's window; libdeflate has
    no dictionary and ignores it. ``use`` forces ``zlib`` or ``libdeflate`` (tests, benchmarks).
    """
    if (use or implementation()) == "zlib":
        return _zlib_piece(chunk, level, last, previous[-DICT_SIZE:])
    assert _libdeflate is not None
    piece: bytearray = _libdeflate.deflate_compress(chunk, level)
    if last:
        return piece
    start, end = _final_block(piece, len(chunk))
    return _seal(piece, start, end)


def _zlib_piece(chunk: bytes, level: int, last: bool, zdict: bytes) -> bytes:
    comp = (
        zlib.compressobj(level, zlib.DEFLATED, -15, zdict=zdict)
        if zdict
        else zlib.compressobj(level, zlib.DEFLATED, -15)
    )
    return comp.compress(chunk) + comp.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _final_block(piece: bytearray, size: int) -> tuple[int, int]:
    """Bit offsets of the final block's header and of the end of its end-of-block code.

    Raises BundleError when the piece does not inflate to exactly ``size`` bytes.
    """
    lib = _libz()
    assert lib is not None
    strm = _ZStream()
    if lib.inflateInit2_(ctypes.byref(strm), -15, lib.zlibVersion(), ctypes.sizeof(strm)):
        raise BundleError("zlib: inflateInit2 failed")
    src = (ctypes.c_char * len(piece)).from_buffer(piece)
    out = ctypes.create_string_buffer(_SCAN_OUT)
    strm.next_in, strm.avail_in = ctypes.addressof(src), len(piece)
    block_start, final = 0, (-1, -1)
    try:
        while True:
            strm.next_out, strm.avail_out = ctypes.addressof(out), _SCAN_OUT
            rc = lib.inflate(ctypes.byref(strm), _Z_BLOCK)
            if rc == _Z_STREAM_END:
                break
            if rc != _Z_OK:
                raise BundleError(f"libdeflate output does not inflate (zlib error {rc})")
            flags = strm.data_type
            if flags & _AT_BOUNDARY:
                # the next unread bit: whole bytes taken, less the bits still unused in the last
                here = strm.total_in * 8 - (flags & 7)
                if flags & _IN_FINAL:
                    final = (block_start, here)
                else:
                    block_start = here
        total_out = strm.total_out
    finally:
        lib.inflateEnd(ctypes.byref(strm))
        del src
    if total_out != size or final[0] < 0:
        raise BundleError(f"libdeflate output inflates to {total_out} bytes, not {size}")
    return final


def _seal(piece: bytearray, final_start: int, end: int) -> bytearray:
    """Clear the final block's BFINAL bit and end the piece with an empty stored block."""
    piece[final_start >> 3] &= ~(1 << (final_start & 7)) & 0xFF
    used = end & 7  # bits of the last byte that belong to the stream
    del piece[(end + 7) >> 3 :]
    if used:
        piece[-1] &= (1 << used) - 1  # the stored block's header bits (all zero) go here
    if used == 0 or used > 5:  # fewer than 3 free bits: the header spills into a new byte
        piece.append(0)
    piece += _EMPTY_STORED
    return piece
