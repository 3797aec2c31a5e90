"""Raw deflate in pieces that join into one stream, for the wheel writer's thread pool.

The writer cuts a large member into 4 MiB chunks, compresses them in parallel and writes the
pieces one after another as one ZIP member. Every piece but the last must therefore end on a byte
boundary, without the BFINAL ("last block") bit. A deflater with a sync flush makes exactly that
(pigz's technique): the piece's blocks, then an empty stored block (``00 00 ff ff``); only the last
piece finishes the stream. Each piece is primed with the previous chunk's last 32 KiB as its
dictionary, so matches reach across the cut and the ratio stays that of one stream. Which
deflater does this is the setting ``bundle.deflater`` (:data:`DEFLATERS`, chosen by measurement:
see benchmarks/README.md, "Deflaters"):

* ``zlib`` (Python's own): the size auditwheel's zipfile writes at the same level;
* ``zlib-ng`` (the ``zlib-ng`` package): about twice zlib's speed, a few percent larger;
* ``isal`` (the ``isal`` package, Intel's ISA-L): several times faster again, about 10-17%
  larger; it has four levels of its own, onto which 1-9 map (:func:`isal_level`);
* ``libdeflate`` (the ``deflate`` package): fast and a little smaller than zlib, but it
  compresses whole buffers only and has no flush: its output always ends with a final block at a
  bit position it does not report. :func:`compress` finds that position by running an inflate
  over the piece with ``Z_BLOCK`` (the "splice scan"): zlib-ng's own inflate (exported by the
  ``zlib-ng`` package's module, 1.6x zlib's speed here), else libz's; Python's modules do not
  offer that flush mode, so the library is called through ctypes. It then clears the final
  block's BFINAL bit and appends an empty stored block, as a sync flush would. The scan costs
  about a sixth of the deflate time; with it libdeflate is still twice zlib's speed and 1%
  smaller, so it is the default (no deflater that can flush is both faster than zlib and within
  1% of its size).

A deflater whose package cannot be loaded here falls back to ``zlib`` (:func:`implementation`
says which one runs; the deflate cache keys by it). At one deflater and level the output is a
pure function of the bytes: the writer's thread count and scheduling never change it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rocm_build.common.errors import BundleError
from rocm_build.config.schema import DEFLATERS

__all__ = [
    "DEFAULT",
    "DEFLATERS",
    "DICT_SIZE",
    "compress",
    "crc32",
    "crc32_combine",
    "implementation",
    "isal_level",
    "uses_dictionary",
    "version",
]

DICT_SIZE = 32 * 1024  # the deflate window: what each piece is primed with
#: The choices of ``bundle.deflater`` (:data:`rocm_build.config.schema.DEFLATERS`); the first
#: is the default.
DEFAULT = DEFLATERS[0]
_MODULES = {"zlib": "zlib", "zlib-ng": "zlib_ng.zlib_ng", "isal": "isal.isal_zlib"}

try:  # a declared dependency; the fallback covers platforms without a wheel for it
    import deflate as _libdeflate_module

    _libdeflate: ModuleType | None = _libdeflate_module
except ImportError:  # pragma: no cover - exercised by forcing the fallback in tests
    _libdeflate = None

_Z_OK, _Z_STREAM_END, _Z_BLOCK = 0, 1, 5
_AT_BOUNDARY, _IN_FINAL = 128, 64  # z_stream.data_type flags after an inflate(Z_BLOCK) return
_EMPTY_STORED = b"\x00\x00\xff\xff"  # LEN 0 and its complement, after the 3 header bits
_SCAN_OUT = 1 << 18  # inflate output scratch (discarded)


def _stream(name: str, count: Any, total: Any, adler: Any) -> type[ctypes.Structure]:
    """The inflate stream struct: its fields in order, with the given types for the byte
    counts (``avail_*``), the totals (``total_*``) and the checksum."""
    fields = [
        ("next_in", ctypes.c_void_p),
        ("avail_in", count),
        ("total_in", total),
        ("next_out", ctypes.c_void_p),
        ("avail_out", count),
        ("total_out", total),
        ("msg", ctypes.c_char_p),
        ("state", ctypes.c_void_p),
        ("zalloc", ctypes.c_void_p),
        ("zfree", ctypes.c_void_p),
        ("opaque", ctypes.c_void_p),
        ("data_type", ctypes.c_int),
        ("adler", adler),
        ("reserved", ctypes.c_ulong),
    ]
    return type(name, (ctypes.Structure,), {"_fields_": fields})


#: zlib's ``z_stream`` (zlib.h): uInt is unsigned int, uLong unsigned long
_ZStream = _stream("_ZStream", ctypes.c_uint, ctypes.c_ulong, ctypes.c_ulong)
#: zlib-ng's native ``zng_stream`` (zlib-ng.h): uint32_t counts, size_t totals
_ZngStream = _stream("_ZngStream", ctypes.c_uint32, ctypes.c_size_t, ctypes.c_uint32)


@dataclass(frozen=True)
class _Inflater:
    """A raw inflate through ctypes that can stop at block boundaries (``Z_BLOCK``)."""

    name: str
    stream: type[ctypes.Structure]
    init: Callable[[Any], int]  # (pointer to a stream) -> zlib return code
    inflate: Callable[[Any, int], int]
    end: Callable[[Any], int]


def _zlib_ng_inflater() -> _Inflater | None:
    """zlib-ng's native inflate, from the ``zlib-ng`` package's extension (which exports it)."""
    module = _module("zlib-ng")
    try:
        lib = ctypes.CDLL(str(module.__file__)) if module is not None else None
        if lib is None:
            return None
        lib.zlibng_version.restype = ctypes.c_char_p
        if not str(lib.zlibng_version() or b"", "ascii").startswith("2."):
            return None  # the zng_stream above is zlib-ng 2's
    except (OSError, AttributeError, UnicodeDecodeError):  # not built with the native API
        return None
    stream = ctypes.POINTER(_ZngStream)
    lib.zng_inflateInit2.argtypes = [stream, ctypes.c_int32]
    lib.zng_inflate.argtypes = [stream, ctypes.c_int32]
    lib.zng_inflateEnd.argtypes = [stream]
    return _Inflater(
        "zlib-ng",
        _ZngStream,
        lambda s: int(lib.zng_inflateInit2(s, -15)),
        lib.zng_inflate,
        lib.zng_inflateEnd,
    )


def _libz_inflater() -> _Inflater | None:
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
        return _Inflater("zlib", _ZStream, _init_libz(lib), lib.inflate, lib.inflateEnd)
    return None


def _init_libz(lib: ctypes.CDLL) -> Callable[[Any], int]:
    version, size = lib.zlibVersion(), ctypes.sizeof(_ZStream)
    return lambda stream: int(lib.inflateInit2_(stream, -15, version, size))


@functools.cache
def _scan_inflater(prefer: str = "") -> _Inflater | None:
    """The inflate the splice scan runs: zlib-ng's when it loads (faster), else libz's.
    ``prefer``: "zlib" takes libz's (the tests compare the two)."""
    if prefer != "zlib" and (found := _zlib_ng_inflater()) is not None:
        return found
    return _libz_inflater()


@functools.cache
def _module(name: str) -> ModuleType | None:
    """The zlib-like module of a sync-flush deflater (``zlib``, ``zlib-ng``, ``isal``), or None
    when its package is not installed here."""
    try:
        return importlib.import_module(_MODULES[name])
    except ImportError:  # pragma: no cover - the packages are dependencies
        return None


def implementation(name: str = "") -> str:
    """The deflater that ``name`` (default: :data:`DEFAULT`) runs as here: itself when its
    package loads (libdeflate also needs zlib-ng or libz for its scan), else ``zlib``."""
    name = name or DEFAULT
    if name == "libdeflate":
        return name if _libdeflate is not None and _scan_inflater() is not None else "zlib"
    if name in _MODULES and _module(name) is not None:
        return name
    return "zlib"


def version(name: str) -> str:
    """The version of the deflater ``name`` that runs here (part of the deflate cache's key)."""
    name = implementation(name)
    if name == "libdeflate":
        return str(getattr(_libdeflate, "__version__", "?"))
    if name == "isal":
        package = importlib.import_module("isal")
        return str(getattr(package, "__version__", "?"))
    module = _module(name)
    for attr in ("ZLIBNG_RUNTIME_VERSION", "ZLIB_RUNTIME_VERSION"):
        if hasattr(module, attr):
            return str(getattr(module, attr))
    return "?"  # pragma: no cover


def uses_dictionary(name: str) -> bool:
    """Whether ``name``'s pieces are primed with the previous chunk's tail (libdeflate's are not:
    it has no dictionary)."""
    return implementation(name) != "libdeflate"


def isal_level(level: int) -> int:
    """ISA-L's level (0-3) for zlib's scale (1-9): 1 -> 0, 2-3 -> 1, 4-5 -> 2, 6-9 -> 3."""
    return min(3, level // 2)


def crc32(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    if _libdeflate is not None:
        return int(_libdeflate.crc32(data, value))
    return zlib.crc32(data, value)


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """The CRC-32 of A+B from A's CRC, B's CRC and B's length (zlib's ``crc32_combine``), so
    that pieces checksummed on different threads give their member's CRC."""
    return _combine()(crc1, crc2, len2)


@functools.cache
def _combine() -> Callable[[int, int, int], int]:
    for name in ("zlib-ng", "isal"):
        mod = _module(name)
        if mod is not None and hasattr(mod, "crc32_combine"):
            return mod.crc32_combine  # type: ignore[no-any-return]
    return _crc32_combine_py  # pragma: no cover - zlib-ng is a dependency


def _gf2_times(mat: list[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, row) for row in mat]


def _crc32_combine_py(crc1: int, crc2: int, len2: int) -> int:
    """zlib's crc32_combine in Python: ``crc1`` advanced over ``len2`` zero bytes by squaring
    the one-zero-bit operator, then xor ``crc2``."""
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << n for n in range(31)]  # the operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four
    while True:
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return crc1 ^ crc2


def compress(
    chunk: bytes | bytearray | memoryview,
    level: int,
    last: bool,
    previous: bytes | bytearray | memoryview = b"",
    *,
    use: str = "",
) -> bytes | bytearray:
    """Raw deflate of ``chunk`` at zlib-compatible ``level`` (1-9) by the deflater ``use``
    (default: :data:`DEFAULT`; see :func:`implementation`).

    Unless ``last``, the piece ends byte-aligned without BFINAL, so the next piece can follow it
    in the same stream. ``previous`` (the preceding chunk, or at least its last 32 KiB) primes
    the window; libdeflate has no dictionary and ignores it.
    """
    name = implementation(use)
    if name == "libdeflate":
        assert _libdeflate is not None
        piece: bytearray = _libdeflate.deflate_compress(chunk, level)
        if last:
            return piece
        start, end = _final_block(piece, len(chunk))
        return _seal(piece, start, end)
    module = _module(name)
    assert module is not None
    return _sync_piece(
        module,
        chunk,
        isal_level(level) if name == "isal" else level,
        last,
        previous[-DICT_SIZE:],
    )


def _sync_piece(
    module: ModuleType,
    chunk: bytes | bytearray | memoryview,
    level: int,
    last: bool,
    zdict: bytes | bytearray | memoryview,
) -> bytes:
    if zdict:
        comp = module.compressobj(level, module.DEFLATED, -15, zdict=zdict)
    else:
        comp = module.compressobj(level, module.DEFLATED, -15)
    head: bytes = comp.compress(chunk)
    tail: bytes = comp.flush(module.Z_FINISH if last else module.Z_SYNC_FLUSH)
    return head + tail


def _final_block(piece: bytearray, size: int, *, scan: str = "") -> tuple[int, int]:
    """Bit offsets of the final block's header and of the end of its end-of-block code.

    Raises BundleError when the piece does not inflate to exactly ``size`` bytes. ``scan``:
    see :func:`_scan_inflater`.
    """
    inflater = _scan_inflater(scan)
    if inflater is None:
        raise BundleError("libdeflate needs zlib-ng or libz for its splice scan: neither loads")
    strm: Any = inflater.stream()
    ref = ctypes.byref(strm)
    if inflater.init(ref):
        raise BundleError(f"{inflater.name}: inflateInit2 failed")
    src = (ctypes.c_char * len(piece)).from_buffer(piece)
    out = ctypes.create_string_buffer(_SCAN_OUT)
    strm.next_in, strm.avail_in = ctypes.addressof(src), len(piece)
    block_start, final = 0, (-1, -1)
    try:
        while True:
            strm.next_out, strm.avail_out = ctypes.addressof(out), _SCAN_OUT
            rc = inflater.inflate(ref, _Z_BLOCK)
            if rc == _Z_STREAM_END:
                break
            if rc != _Z_OK:
                raise BundleError(
                    f"libdeflate output does not inflate ({inflater.name} error {rc})"
                )
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
        inflater.end(ref)
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
