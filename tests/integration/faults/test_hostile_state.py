"""The deflate cache and the output folder's temporaries under the usual attacks
(tests/support/hostile.py): the trim and the sweep delete only what is provably the tool's own
(name, owner, type, and the cache's header), never through a link; a cache folder another user owns
or may write to is refused in one line (exit 14)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from rocm_build.common import tempfiles
from rocm_build.common.errors import FileAccessError
from rocm_build.wheel import deflatecache
from rocm_build.wheel.deflate import Deflate
from rocm_build.wheel.deflatecache import DeflateCache
from rocm_build.wheel.wheelfile import WheelWriter
from tests.support import hostile

DIST = "demo-1.0.dist-info"
DEAD = 4194305  # above the largest pid Linux hands out: no process has it


def _fill(cache: DeflateCache, tmp_path: Path) -> list[Path]:
    """A wheel written through ``cache``: returns the entries it stored."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    with WheelWriter(tmp_path / "w" / "demo-1.0-py3-none-any.whl", DIST, Deflate(cache=cache)) as w:
        for i in range(3):
            path = src / f"f{i}.bin"
            path.write_bytes(b"".join(b"line %d %d\n" % (i, n) for n in range(20_000)))
            w.add_file(f"demo/f{i}.bin", path, 0o644)
        w.add_bytes(f"{DIST}/METADATA", b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        w.add_bytes(f"{DIST}/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
        w.commit()
    entries = sorted(p for p in cache.folder.rglob("*") if p.is_file())
    assert len(entries) == 3
    return entries


@pytest.mark.parametrize("attack", hostile.FOLDER_ATTACKS)
def test_planted_cache_folder_is_refused(tmp_path: Path, attack: str) -> None:
    if attack == "symlink":
        hostile.need_root("a link owned by another user")
    planted = hostile.plant(tmp_path / "deflate", attack, elsewhere=tmp_path / "elsewhere",
                            folder=True)  # fmt: skip
    with pytest.raises(FileAccessError) as err:
        Deflate(cache=deflatecache.from_settings(str(planted.path), 1.0)).check()
    assert "\n" not in str(err.value)
    assert err.value.exit_code == 14
    assert str(planted.path) in str(err.value)
    planted.assert_untouched()


def test_trim_deletes_only_its_own_entries(tmp_path: Path) -> None:
    cache = DeflateCache(tmp_path / "cache", 10**9)
    own = _fill(cache, tmp_path)
    sub = own[0].parent
    key = own[0].name
    header = own[0].read_bytes()[: deflatecache.HEAD.size]
    lookalike = sub.name + "f" * 62  # named as an entry of this folder
    bait = {lookalike: header + b"bait", "victim": b"precious\n"}
    other = "ff" if sub.name != "ff" else "fe"
    planted = [
        # a two-hex folder that is a link: nothing in it is the cache's
        hostile.plant(cache.folder / other, "symlink", elsewhere=tmp_path / "e1", folder=True,
                      bait={other + "0" * 62: header + b"bait"}),
        # in a real folder: a link named as an entry, another user's entry, a FIFO, a folder,
        # a file not named as an entry, a temporary entry that is a link
        hostile.plant(sub / lookalike, "symlink", elsewhere=tmp_path / "e2", folder=False,
                      bait=bait),
        hostile.plant(sub / (sub.name + "e" * 62), "foreign-owner", elsewhere=tmp_path / "e3",
                      folder=False, content=own[0].read_bytes()),
        hostile.plant(sub / (sub.name + "d" * 62), "fifo", elsewhere=tmp_path / "e4",
                      folder=False),
        hostile.plant(sub / (sub.name + "c" * 62), "wrong-type", elsewhere=tmp_path / "e5",
                      folder=False),
        hostile.plant(sub / "notes.txt", "stale", elsewhere=tmp_path / "e6", folder=False,
                      content=header),
        hostile.plant(sub / ".tmp-abcdefgh", "symlink", elsewhere=tmp_path / "e7",
                      folder=False),
    ]  # fmt: skip
    for p in planted:
        old = 1_000_000_000  # long unused: first in line for the trim
        os.utime(p.path, (old, old), follow_symlinks=False)
    # A get() through the linked folder or a planted link finds nothing to use.
    assert cache.get(other + "0" * 62) is None
    assert cache.get(lookalike) is None
    DeflateCache(cache.folder, 1).trim()  # smaller than any entry: every entry of its own goes
    assert not any(p.exists() for p in own), "the cache's own entries stay"
    for p in planted:
        assert os.path.lexists(p.path), f"{p.attack}: {p.path.name} was deleted"
        p.assert_untouched()
    assert cache.get(key) is None


def _sweep_in_time(where: Path) -> list[Path]:
    # A FIFO opened for reading blocks until a writer comes: a sweep that opens one never ends.
    # The deadline only tells a hang from a result; it is no measure of speed.
    found: list[list[Path]] = []
    worker = threading.Thread(target=lambda: found.append(tempfiles.sweep(where)), daemon=True)
    worker.start()
    worker.join(60)
    assert found, "the sweep hangs"
    return found[0]


def test_sweep_deletes_only_its_own_temporaries(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    name = "x-1.0-py3-none-any.whl"
    planted = [
        hostile.plant(out / f".{name}.rocm-build-{DEAD}-{attack}.tmp", attack,
                      elsewhere=tmp_path / f"e-{attack}", folder=False)
        for attack in ("symlink", "foreign-owner", "fifo")
    ] + [
        hostile.plant(out / f".{name}.extract.rocm-build-{DEAD}-dirlink.tmp", "symlink",
                      elsewhere=tmp_path / "e-folder", folder=True),
        hostile.plant(out / f".{name}.rocm-build-{'9' * 25}-bigpid.tmp", "stale",
                      elsewhere=tmp_path / "e-bigpid", folder=False, content=b"partial"),
    ]  # fmt: skip
    stale = out / f".{name}.rocm-build-{DEAD}-stale.tmp"
    stale.write_bytes(b"partial")
    extract = out / f".{name}.extract.rocm-build-{DEAD}-stale.tmp"
    (extract / "lib").mkdir(parents=True)
    (extract / "lib" / "link").symlink_to(tmp_path / "e-symlink" / "victim")
    removed = _sweep_in_time(out)
    assert sorted(removed) == sorted([stale, extract])
    for p in planted:
        assert os.path.lexists(p.path), f"{p.attack}: {p.path.name} was deleted"
        p.assert_untouched()
