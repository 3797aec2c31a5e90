"""rawdeflate.py: libdeflate pieces spliced into one raw deflate stream, checked by zlib."""

from __future__ import annotations

import os
import random
import zlib
from pathlib import Path

import pytest
import zstandard

from rocm_build.common.errors import BundleError
from rocm_build.wheel import rawdeflate

needs_libdeflate = pytest.mark.skipif(
    rawdeflate.implementation("libdeflate") != "libdeflate",
    reason="libdeflate, or zlib-ng and libz, not loadable here",
)


def _join(chunks: list[bytes], level: int, use: str) -> bytes:
    pieces, prev = [], b""
    for i, chunk in enumerate(chunks):
        pieces.append(rawdeflate.compress(chunk, level, i == len(chunks) - 1, prev, use=use))
        prev = chunk
    return b"".join(pieces)


def _sample(rng: random.Random) -> bytes:
    """Text-like runs mixed with incompressible bytes (which libdeflate stores verbatim)."""
    parts = []
    for _ in range(rng.randint(1, 6)):
        n = rng.randint(0, 40000)
        if rng.random() < 0.3:
            parts.append(rng.randbytes(n))
        else:
            words = [
                rng.choice([b"hip", b"rocm", b"gfx90a", b"\0\0\0\0", b"kernel"])
                for _ in range(n // 5)
            ]
            parts.append(b" ".join(words))
    return b"".join(parts)


def test_the_splice_scan_runs_zlib_ngs_inflate() -> None:
    """zlib-ng is a dependency: its module's native inflate must load (1.6x libz's speed)."""
    found = rawdeflate._scan_inflater()
    libz = rawdeflate._scan_inflater("zlib")
    assert (found.name if found else None, libz.name if libz else None) == ("zlib-ng", "zlib")


@needs_libdeflate
def test_spliced_pieces_inflate_for_every_bit_alignment() -> None:
    """Every way a piece can end (byte-aligned, 1-5 free bits, 6-7 bits used) joins correctly,
    and both scans (zlib-ng's inflate, libz's) find the same final block."""
    rng = random.Random(20261122)
    seen: set[int] = set()
    for _ in range(300):
        chunks = [_sample(rng) for _ in range(rng.randint(1, 4))]
        for chunk in chunks[:-1]:
            piece = rawdeflate._libdeflate.deflate_compress(chunk, 6)
            found = rawdeflate._final_block(piece, len(chunk))
            assert rawdeflate._final_block(piece, len(chunk), scan="zlib") == found
            seen.add(found[1] & 7)
        stream = _join(chunks, 6, "libdeflate")
        assert zlib.decompress(stream, -15) == b"".join(chunks)
        if seen == set(range(8)):
            break
    assert seen == set(range(8))


@needs_libdeflate
@pytest.mark.parametrize("level", [1, 6, 9])
def test_libdeflate_and_zlib_pieces_mix(level: int) -> None:
    rng = random.Random(level)
    chunks = [_sample(rng) for _ in range(4)] + [b""]
    stream = b"".join(
        rawdeflate.compress(c, level, i == 4, use="libdeflate" if i % 2 else "zlib")
        for i, c in enumerate(chunks)
    )
    assert zlib.decompress(stream, -15) == b"".join(chunks)


def test_zlib_fallback_primes_with_previous_chunk() -> None:
    text = b"".join(str(i * 7919).encode() * 3 for i in range(100000))
    chunks = [text[i : i + (256 << 10)] for i in range(0, len(text), 256 << 10)]
    stream = _join(chunks, 6, "zlib")
    assert zlib.decompress(stream, -15) == text
    assert len(stream) <= len(zlib.compress(text, 6)) * 1.01  # the ratio of one single stream


@needs_libdeflate
def test_libdeflate_ratio_at_least_zlibs_on_machine_code() -> None:
    """The faster deflate must not cost size: real shared libraries, 1 MiB chunks, level 6."""
    code = b"".join(p.read_bytes() for p in Path(zstandard.__file__).parent.glob("*.so"))
    assert len(code) > 500_000
    chunks = [code[i : i + (1 << 20)] for i in range(0, len(code), 1 << 20)]
    fast, plain = _join(chunks, 6, "libdeflate"), _join(chunks, 6, "zlib")
    assert zlib.decompress(fast, -15) == code
    assert len(fast) <= len(plain) * 1.005, (len(fast), len(plain))


@needs_libdeflate
@pytest.mark.parametrize("scan", ["", "zlib"])
def test_piece_that_does_not_inflate_is_refused(scan: str) -> None:
    with pytest.raises(BundleError, match="does not inflate"):
        rawdeflate._final_block(bytearray(b"\xff\xff\xff\xff"), 10, scan=scan)
    good = rawdeflate._libdeflate.deflate_compress(b"abc" * 1000, 6)
    with pytest.raises(BundleError, match="not 2999"):
        rawdeflate._final_block(good, 2999, scan=scan)


def test_crc32_matches_zlib() -> None:
    data = os.urandom(100_000)
    assert rawdeflate.crc32(data[50:], rawdeflate.crc32(data[:50])) == zlib.crc32(data)
