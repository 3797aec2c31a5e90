"""The deflate cache: a re-bundle copies stored streams instead of deflating; a damaged entry, or
one another user could have written, never reaches a wheel; the size bound and the off switch
hold."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from rocm_build.wheel import deflatecache
from rocm_build.wheel.deflate import Deflate
from rocm_build.wheel.deflatecache import DeflateCache
from rocm_build.wheel.wheelfile import WheelReader, WheelWriter

DIST = "demo-1.0.dist-info"


def _payload(n: int, seed: int = 0) -> bytes:
    # compressible but not trivial: several deflate chunks' worth of varied text
    return b"".join(f"line {i * 7919 + seed} {i % 97}\n".encode() for i in range(n))


def _write(out: Path, files: dict[str, Path], cache: DeflateCache | None) -> Path:
    with WheelWriter(out, DIST, Deflate(cache=cache)) as writer:
        for arc, path in files.items():
            writer.add_file(arc, path, 0o644)
        writer.add_bytes(f"{DIST}/METADATA", b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        writer.add_bytes(f"{DIST}/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
        return writer.commit()


def _check(wheel: Path, files: dict[str, Path]) -> None:
    with zipfile.ZipFile(wheel) as zf:
        assert zf.testzip() is None
        for arc, path in files.items():
            assert zf.read(arc) == path.read_bytes()
    with WheelReader(wheel) as reader:
        reader.verify_all()  # every member against RECORD


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    src = tmp_path / "src"
    src.mkdir()
    out = {}
    for i, n in enumerate((300_000, 100, 40_000)):  # ~8 MB (two deflate chunks), tiny, small
        path = src / f"f{i}.bin"
        path.write_bytes(_payload(n, i))
        out[f"demo/f{i}.bin"] = path
    return out


def test_second_write_copies_from_cache(tmp_path: Path, files: dict[str, Path]) -> None:
    cache = DeflateCache(tmp_path / "cache", 10**9)
    first = _write(tmp_path / "a" / "demo-1.0-py3-none-any.whl", files, cache)
    assert cache.stored == 2  # the tiny file is below the entry threshold
    again = DeflateCache(tmp_path / "cache", 10**9)
    second = _write(tmp_path / "b" / "demo-1.0-py3-none-any.whl", files, again)
    assert again.hits == 2
    assert again.stored == 0
    _check(second, files)
    assert first.read_bytes() == second.read_bytes()


def test_changed_source_misses(tmp_path: Path, files: dict[str, Path]) -> None:
    cache = DeflateCache(tmp_path / "cache", 10**9)
    _write(tmp_path / "a" / "demo-1.0-py3-none-any.whl", files, cache)
    changed = files["demo/f0.bin"]
    changed.write_bytes(_payload(300_000, 99))  # same size, new bytes and times
    again = DeflateCache(tmp_path / "cache", 10**9)
    wheel = _write(tmp_path / "b" / "demo-1.0-py3-none-any.whl", files, again)
    assert again.hits == 1
    assert again.stored == 1
    _check(wheel, files)


@pytest.mark.parametrize("damage", ["flip", "truncate", "header"])
def test_damaged_entry_is_never_used(tmp_path: Path, files: dict[str, Path], damage: str) -> None:
    cache = DeflateCache(tmp_path / "cache", 10**9)
    _write(tmp_path / "a" / "demo-1.0-py3-none-any.whl", files, cache)
    entries = sorted(
        (p for p in (tmp_path / "cache").rglob("*") if p.is_file()), key=os.path.getsize
    )
    for entry in entries:
        data = bytearray(entry.read_bytes())
        if damage == "flip":
            data[len(data) // 2] ^= 0x55
        elif damage == "truncate":
            del data[-100:]
        else:
            data[:6] = b"XXXXXX"
        entry.write_bytes(data)
    again = DeflateCache(tmp_path / "cache", 10**9)
    wheel = _write(tmp_path / "b" / "demo-1.0-py3-none-any.whl", files, again)
    assert again.hits == 0
    assert again.stored == 2
    _check(wheel, files)
    third = DeflateCache(tmp_path / "cache", 10**9)
    _check(_write(tmp_path / "c" / "demo-1.0-py3-none-any.whl", files, third), files)
    assert third.hits == 2


@pytest.mark.parametrize("plant", ["another-owner", "group-writable"])
def test_entry_another_user_could_have_written_is_not_used(
    tmp_path: Path, files: dict[str, Path], plant: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = DeflateCache(tmp_path / "cache", 10**9)
    first = _write(tmp_path / "a" / "demo-1.0-py3-none-any.whl", files, cache)
    entries = [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]
    assert entries
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in entries)
    assert (tmp_path / "cache").stat().st_mode & 0o777 == 0o700
    for entry in entries:
        if plant == "another-owner":
            if os.geteuid() != 0:
                pytest.skip("giving a file to another user needs root")
            os.chown(entry, 65534, 65534)  # nobody: as if planted from that account
        else:
            entry.chmod(0o620)  # the group could have rewritten it
    again = DeflateCache(tmp_path / "cache", 10**9)
    wheel = _write(tmp_path / "b" / "demo-1.0-py3-none-any.whl", files, again)
    assert again.hits == 0
    assert again.foreign == 2
    assert again.stored == 2  # deflated again, and the entries are this user's own again
    assert wheel.read_bytes() == first.read_bytes()
    assert "is another user's or others may write to it: not used" in caplog.text
    third = DeflateCache(tmp_path / "cache", 10**9)
    _check(_write(tmp_path / "c" / "demo-1.0-py3-none-any.whl", files, third), files)
    assert third.hits == 2


def test_size_bound_drops_least_recently_used(tmp_path: Path, files: dict[str, Path]) -> None:
    cache = DeflateCache(tmp_path / "cache", 1)  # smaller than any entry
    _write(tmp_path / "a" / "demo-1.0-py3-none-any.whl", files, cache)
    assert cache.stored == 2
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_settings_turn_it_off_or_place_it(tmp_path: Path) -> None:
    assert deflatecache.from_settings("none", 20) is None
    active = deflatecache.from_settings("", 20, {"XDG_CACHE_HOME": str(tmp_path)})
    assert active is not None
    assert active.folder == tmp_path / "rocm-build" / "deflate"
    assert active.max_bytes == 20 * 10**9
    active = deflatecache.from_settings(str(tmp_path / "x"), 0.5)
    assert active is not None
    assert active.folder == tmp_path / "x"
