"""The writer's per-piece work on its workers (wheelpieces.py): the output is the same bytes as the
simple one-pass path and as the writer before the work moved to the workers, whatever the number
of workers, for every deflater; the deflate cache's hits copy raw, keyed apart by deflater."""

from __future__ import annotations

import functools
import hashlib
import io
import random
import zipfile
import zlib
from pathlib import Path

import pytest

from rocm_build.binary import elfpatch
from rocm_build.wheel import rawdeflate, wheelfile, wheelpieces
from rocm_build.wheel.deflate import Deflate
from rocm_build.wheel.deflatecache import DeflateCache
from rocm_build.wheel.wheelfile import WheelReader, WheelWriter

from .helpers import make_wheel

C = wheelpieces.DEFLATE_CHUNK
DIST = "demo-1.0.dist-info"
SIZES = {"empty": 0, "one": 1, "small": 5000, "exact": C, "exact1": C + 1, "less": C - 1}
SIZES["nine"] = 9 * (1 << 20) + 12345

#: sha256 of the wheel :func:`_build` writes, by the writer as it was before its per-piece work
#: moved to the workers (the commit before this test), for the deflater versions of that run;
#: the same bytes are the claim (other versions of a deflater may write other bytes: skipped).
BEFORE = {
    ("libdeflate", "0.9.0"): "7f579279d7857f060fe1476d6669283d144fa0bbe5d10e113436b899f060cb9c",
    ("zlib", "1.2.13"): "1ea531f8cae67dcc3281864102032153ed757822596070e5eff0c82481730d01",
}
AVAILABLE = [d for d in rawdeflate.DEFLATERS if rawdeflate.implementation(d) == d]


@functools.cache
def _base() -> bytes:
    """1 MiB of machine-code-like runs with incompressible stretches (libdeflate stores those)."""
    rng = random.Random(20261126)
    words = [b"hip", b"rocm", b"gfx90a", b"\0\0\0\0", b"kernel", bytes(range(7))]
    out = bytearray()
    while len(out) < 1 << 20:
        if rng.random() < 0.2:
            out += rng.randbytes(rng.randint(0, 300))
        else:
            out += b" ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
    return bytes(out[: 1 << 20])


def _payload(seed: int, n: int) -> bytes:
    """``n`` bytes of :func:`_base`, from a place that depends on ``seed``."""
    base = _base()
    at = seed * 4099 % len(base)
    out = (base[at:] + base) * (n // len(base) + 1)
    return out[:n]


def _overlays() -> list[elfpatch.Overlay]:
    """An edit, a made overlay across the first piece boundary, 2 MiB of dropped code."""
    return [
        elfpatch.Overlay(100, 50, b"X" * 20),
        elfpatch.Overlay(C - 10, 30, make=lambda: b"made" * 5),
        elfpatch.Overlay(6 << 20, 2 << 20),
    ]


def _build(tmp: Path, deflater: str, workers: int = 0, cache: DeflateCache | None = None) -> Path:
    """Every kind of member: copied, files of every size around the 4 MiB piece, a stream, an
    edited file (PatchedFile), bytes; in the order the bundle writes them."""
    files = {}
    for name, n in SIZES.items():
        path = tmp / name
        if not path.exists():
            path.write_bytes(_payload(n + 7, n))
        files[name] = path
    members = {"demo/a.py": b"A = 1\n" * 100, "demo/b.bin": _payload(99, 300000)}
    src = make_wheel(tmp / "in", "demo", "1.0", members, tag="py3-none-any")  # type: ignore[arg-type]
    out = tmp / f"out-{deflater}-{workers}" / "demo-1.0-py3-none-any.whl"
    with (
        WheelReader(src) as reader,
        WheelWriter(out, DIST, Deflate(deflater, 6, cache), workers=workers) as w,
    ):
        w.copy_member(reader, "demo/a.py")
        for name, path in files.items():
            w.add_file(f"demo/{name}", path, 0o644)
        w.add_stream("demo/stream", io.BytesIO(_payload(5, C + 77)), C + 77, 0o644)
        w.add_source("demo/patched", elfpatch.PatchedFile(files["nine"], None, _overlays()), 0o755)
        w.copy_member(reader, "demo/b.bin")
        w.add_bytes(f"{DIST}/METADATA", b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        w.add_bytes("demo-1.0.dist-info/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
        return w.commit()


def _one_pass(data: bytes, deflater: str) -> bytes:
    """The simple path: one thread, the pieces one after another, each primed with the one
    before."""
    pieces = [data[i : i + C] for i in range(0, len(data), C)] or [b""]
    return b"".join(
        rawdeflate.compress(p, 6, i == len(pieces) - 1, pieces[i - 1] if i else b"", use=deflater)
        for i, p in enumerate(pieces)
    )


def _raw_stream(wheel: Path, info: zipfile.ZipInfo) -> bytes:
    with wheel.open("rb") as fh:
        fh.seek(info.header_offset + 26)
        name_len, extra_len = (
            int.from_bytes(fh.read(2), "little"),
            int.from_bytes(fh.read(2), "little"),
        )
        fh.seek(info.header_offset + 30 + name_len + extra_len)
        return fh.read(info.compress_size)


@pytest.mark.parametrize("deflater", AVAILABLE)
def test_same_bytes_as_one_pass_and_for_any_worker_count(tmp_path: Path, deflater: str) -> None:
    first = _build(tmp_path, deflater, workers=1)
    with zipfile.ZipFile(first) as zf:
        assert zf.testzip() is None
        for info in zf.infolist():
            if info.filename.startswith("demo/") and info.filename not in (
                "demo/a.py",
                "demo/b.bin",
            ):
                data = zf.read(info)
                assert zlib.crc32(data) == info.CRC
                assert _raw_stream(first, info) == _one_pass(data, deflater), info.filename
        patched = zf.read("demo/patched")
    with WheelReader(first) as reader:
        reader.verify_all()  # every member against RECORD: sha256 and size
    expect = bytearray((tmp_path / "nine").read_bytes())
    expect[100:150] = b"X" * 20 + bytes(30)
    expect[C - 10 : C + 20] = b"made" * 5 + bytes(10)
    expect[6 << 20 : 8 << 20] = bytes(2 << 20)
    assert patched == expect
    for workers in (2, 5, wheelfile.OWN_HASH_FROM + 1):  # the last: members hashed on jobs
        assert _build(tmp_path, deflater, workers=workers).read_bytes() == first.read_bytes()


@pytest.mark.parametrize("deflater", sorted({d for d, _ in BEFORE}))
def test_same_bytes_as_the_writer_before(tmp_path: Path, deflater: str) -> None:
    version = rawdeflate.version(deflater)
    if rawdeflate.implementation(deflater) != deflater or (deflater, version) not in BEFORE:
        pytest.skip(f"{deflater} {version}: no wheel of the writer before to compare with")
    digest = hashlib.sha256(_build(tmp_path, deflater).read_bytes()).hexdigest()
    assert digest == BEFORE[deflater, version]


@pytest.mark.parametrize("deflater", AVAILABLE)
def test_cache_hit_copies_the_stream_raw(tmp_path: Path, deflater: str) -> None:
    cache = DeflateCache(tmp_path / "cache", 10**9)
    cold = _build(tmp_path, deflater, workers=wheelfile.OWN_HASH_FROM, cache=cache)
    assert cache.stored == 5  # the files of 4 KiB or more; streams and bytes are not keyed
    warm_cache = DeflateCache(tmp_path / "cache", 10**9)
    warm = _build(tmp_path, deflater, workers=3, cache=warm_cache)
    assert warm_cache.hits == 5
    assert warm.read_bytes() == cold.read_bytes()


def test_deflaters_key_the_cache_apart(tmp_path: Path) -> None:
    if len(AVAILABLE) < 2:
        pytest.skip("one deflater here")
    cache = DeflateCache(tmp_path / "cache", 10**9)
    _build(tmp_path, AVAILABLE[0], cache=cache)
    other = DeflateCache(tmp_path / "cache", 10**9)
    _build(tmp_path, AVAILABLE[1], cache=other)
    assert other.hits == 0
    assert other.stored == 5
