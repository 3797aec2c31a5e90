"""wheelpieces.py: the per-member work the writer's workers share (the sha256 chain, positional
reads), and the deflaters' pieces that join without a second pass (rawdeflate.py)."""

from __future__ import annotations

import hashlib
import random
import threading
import zlib
from pathlib import Path

import pytest

from rocm_build.errors import BundleError
from rocm_build.wheel import rawdeflate, wheelpieces
from rocm_build.wheel.wheelfile import WheelWriter

C = wheelpieces.DEFLATE_CHUNK
DIST = "demo-1.0.dist-info"
AVAILABLE = [d for d in rawdeflate.DEFLATERS if rawdeflate.implementation(d) == d]


def _payload(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    text = b"".join(b"rocm gfx%d kernel " % rng.randint(0, 99) for _ in range(n // 16 + 1))
    return (text[: n // 2] + rng.randbytes(n - n // 2))[:n]


@pytest.mark.parametrize("deflater", AVAILABLE)
@pytest.mark.parametrize("sizes", [[0], [1], [C], [C, 0], [C - 1, 1, C + 1], [5, C, C, 17]])
def test_pieces_join_without_a_second_pass(deflater: str, sizes: list[int]) -> None:
    """Every piece but the last ends on a byte boundary with an empty stored block (a sync
    flush: nothing to find by inflating it), and the pieces inflate to the input as one stream."""
    chunks = [_payload(n, n) for n in sizes]
    pieces = [
        rawdeflate.compress(c, 6, i == len(chunks) - 1, chunks[i - 1] if i else b"", use=deflater)
        for i, c in enumerate(chunks)
    ]
    for piece in pieces[:-1]:
        assert bytes(piece[-4:]) == b"\x00\x00\xff\xff"
    assert zlib.decompress(b"".join(pieces), -15) == b"".join(chunks)


def test_crc32_combine_matches_one_pass() -> None:
    rng = random.Random(4)
    for _ in range(20):
        a, b = rng.randbytes(rng.randint(0, 5000)), rng.randbytes(rng.randint(0, 5000))
        whole = zlib.crc32(a + b)
        assert rawdeflate.crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == whole
        assert rawdeflate._crc32_combine_py(zlib.crc32(a), zlib.crc32(b), len(b)) == whole


def test_hash_chain_takes_pieces_in_any_order_from_any_thread() -> None:
    rng = random.Random(7)
    pieces = [rng.randbytes(rng.randint(0, 3000)) for _ in range(200)]
    order = list(range(len(pieces)))
    rng.shuffle(order)
    chain = wheelpieces.HashChain()
    threads = [
        threading.Thread(target=lambda part: [chain.feed(i, pieces[i]) for i in part], args=(p,))
        for p in (order[0::3], order[1::3], order[2::3])
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert chain.digest(len(pieces)) == hashlib.sha256(b"".join(pieces)).digest()
    with pytest.raises(BundleError, match="internal"):
        wheelpieces.HashChain().digest(1)


def test_a_file_that_changes_size_while_written_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 10000)
    for grown in (b"x" * 10001, b"x" * 9000):
        with WheelWriter(tmp_path / "o" / "demo-1.0-py3-none-any.whl", DIST, cache=None) as w:
            source = wheelpieces.FileSource(path)
            path.write_bytes(grown)
            w.add_source("demo/f", source, 0o644)
            with pytest.raises(BundleError, match="changed while being added"):
                w.commit()
        path.write_bytes(b"x" * 10000)


def test_the_default_deflater_is_the_settings_default() -> None:
    """The writer's own default (used where no settings were read) is the built-in setting's."""
    from rocm_build import config

    assert config.load_defaults()["bundle"]["deflater"] == rawdeflate.DEFAULT
