"""wheelpieces.py: the per-member work the writer's workers share (the sha256 chain, a member's own
hash job, positional reads), and the deflaters' pieces that join without a second pass
(rawdeflate.py)."""

from __future__ import annotations

import base64
import hashlib
import os
import random
import threading
import zipfile
import zlib
from pathlib import Path

import pytest

from rocm_build.common.errors import BundleError
from rocm_build.wheel import rawdeflate, wheelfile, wheelpieces
from rocm_build.wheel.deflate import Deflate
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
        with WheelWriter(tmp_path / "o" / "demo-1.0-py3-none-any.whl", DIST) as w:
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


class _Counted:
    """A source over ``data`` that counts the bytes read from it; ``second`` (if given) is what
    every read after the first of an offset returns: the file changed in place between reads."""

    def __init__(self, data: bytes, rereads: bool, second: bytes | None = None) -> None:
        self.data, self.rereads, self.second = data, rereads, second
        self.read = 0
        self._seen: set[int] = set()
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self.data)

    def pread(self, offset: int, n: int) -> bytes:
        with self._lock:
            self.read += min(n, len(self.data) - offset)
            again = offset in self._seen
            self._seen.add(offset)
        data = self.second if again and self.second is not None else self.data
        return data[offset : offset + n]

    def close(self) -> None:
        pass


@pytest.mark.parametrize("rereads", [True, False])
def test_a_member_of_pieces_is_hashed_by_a_job_of_its_own_when_it_rereads(
    tmp_path: Path, rereads: bool
) -> None:
    """With many workers, a source that may be read again is read twice (its pieces, and in
    order by its hash job, so the hashes of several members run at once); one that may not (a
    stream, edits made on demand) is read once and hashed by its pieces. Either way RECORD holds
    the right sha256."""
    data = _payload(3, 3 * C + 5)
    source = _Counted(data, rereads)
    out = tmp_path / "o" / "demo-1.0-py3-none-any.whl"
    with WheelWriter(out, DIST, workers=wheelfile.OWN_HASH_FROM) as w:
        w.add_source("demo/f", source, 0o644)
        w.commit()
    assert source.read == len(data) * (2 if rereads else 1)
    with zipfile.ZipFile(out) as zf:
        record = zf.read(f"{DIST}/RECORD").decode()
        assert zf.read("demo/f") == data
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert f"demo/f,sha256={digest},{len(data)}" in record.splitlines()


def test_a_member_whose_bytes_differ_when_read_again_is_refused(tmp_path: Path) -> None:
    """The hash job's CRC-32 must equal the pieces': a file changed in place (same size) while
    the wheel was written is refused, not recorded with a hash of other bytes."""
    data = _payload(4, 2 * C + 1)
    changed = data[:C] + b"!" + data[C + 1 :]
    out = tmp_path / "o" / "demo-1.0-py3-none-any.whl"
    with WheelWriter(out, DIST, workers=wheelfile.OWN_HASH_FROM) as w:
        w.add_source("demo/f", _Counted(data, True, second=changed), 0o644)
        with pytest.raises(BundleError, match="changed while being added"):
            w.commit()
    assert not out.exists()


def test_the_archive_goes_to_disk_in_the_background_as_it_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every ``_SYNC_EVERY`` bytes written, a background ``fdatasync`` (the real one, counted)
    sends the archive's pages to the disk, so commit's fsync has little left; the wheel is
    whole."""
    synced: list[int] = []
    real = os.fdatasync

    def counted(fd: int) -> None:
        synced.append(fd)
        real(fd)

    monkeypatch.setattr(wheelfile, "_SYNC_EVERY", 1 << 20)
    monkeypatch.setattr(os, "fdatasync", counted)
    rng = random.Random(5)
    blobs = {f"demo/{i}.bin": rng.randbytes(2 << 20) for i in range(4)}  # incompressible
    out = tmp_path / "o" / "demo-1.0-py3-none-any.whl"
    with WheelWriter(out, DIST, workers=2) as w:
        for name, blob in blobs.items():
            w.add_bytes(name, blob)
        w.commit()
    assert synced
    with zipfile.ZipFile(out) as zf:
        assert zf.testzip() is None
        assert {n: zf.read(n) for n in blobs} == blobs


@pytest.mark.parametrize(("workers", "level"), [(wheelfile.OWN_HASH_FROM - 1, 6), (16, 0)])
def test_few_workers_or_stored_members_read_the_bytes_once(
    tmp_path: Path, workers: int, level: int
) -> None:
    """Below OWN_HASH_FROM workers the chain keeps up with the deflate, and a stored member has
    no deflate to run beside: the pieces feed the hash and the bytes are read once."""
    data = _payload(6, 2 * C + 9)
    source = _Counted(data, True)
    out = tmp_path / "o" / "demo-1.0-py3-none-any.whl"
    with WheelWriter(out, DIST, Deflate(level=level), workers=workers) as w:
        w.add_source("demo/f", source, 0o644)
        w.commit()
    assert source.read == len(data)
    with zipfile.ZipFile(out) as zf:
        assert zf.read("demo/f") == data
