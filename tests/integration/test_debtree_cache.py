"""``rocm debian --cache`` in a folder others may reach (root often runs it): the cache is held to
the rule of every cache, the package memo is a state file, and every ``.deb`` taken from the
cache must have the SHA256 the package index gives for it. Through the real CLI, with a private
copy of the test cache (its index and its packages: no network when nothing is missing)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocm_build.common.sizes import human_size
from rocm_build.rocm.debindex import load_release, packages_stamp
from tests.conftest import CliRunner
from tests.support import hostile

FOLDER_ATTACKS = ("wrong-type", "symlink", "foreign-owner", "group-writable", "world-writable")


def _test_cache() -> Path:
    return Path(os.environ.get("RB_TEST_CACHE") or Path.home() / ".cache" / "rocm-build-tests")


@pytest.fixture
def cache(rocm_tree: Path, tmp_path: Path) -> Path:
    """A copy of the test cache's index and hard links to its packages (the shared cache itself
    is never written by these tests)."""
    del rocm_tree  # only so that the cached packages are there (downloaded once per cache)
    shared, mine = _test_cache(), tmp_path / "cache"
    mine.mkdir(mode=0o700)
    shutil.copytree(shared / "apt", mine / "apt", symlinks=True)
    (mine / "debs").mkdir(mode=0o700)
    for deb in (shared / "debs").glob("*.deb"):
        os.link(deb, mine / "debs" / deb.name)
    return mine


def _one_line(res: subprocess.CompletedProcess[str], code: int) -> str:
    assert res.returncode == code, res.stderr
    assert "Traceback" not in res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert len(errors) == 1, res.stderr
    return errors[0]


@pytest.mark.parametrize("where", ["cache", "debs"])
@pytest.mark.parametrize("attack", FOLDER_ATTACKS)
def test_a_cache_folder_others_could_plant_in_is_refused(
    run_cli: CliRunner, cache: Path, tmp_path: Path, attack: str, where: str
) -> None:
    if attack in ("symlink", "foreign-owner"):
        hostile.need_root("a link or a folder owned by another user")
    target = cache if where == "cache" else cache / "debs"
    shutil.rmtree(target)
    planted = hostile.plant(target, attack, elsewhere=tmp_path / "elsewhere", folder=True)
    dest = tmp_path / "rocm"
    res = run_cli(["rocm", "debian", str(dest), "--cache", str(cache)], cwd=tmp_path)
    if attack == "wrong-type" and where == "cache":
        assert res.returncode == 2, res.stderr  # click's own check of --cache: not a folder
    else:
        assert str(target) in _one_line(res, 14)
    planted.assert_left_alone()
    assert not dest.exists()


@pytest.mark.parametrize("plant", ["links-and-damaged-package", "memos-of-wrong-types"])
def test_memo_and_packages_planted_in_the_cache(
    run_cli: CliRunner, cache: Path, tmp_path: Path, plant: str
) -> None:
    """A link at the memo's temporary name (the fixed one older versions wrote through) and a
    package of other bytes, or memos of the wrong types: the tree is made from the index's
    packages, nothing is written through the link, and the damaged package is not unpacked."""
    release = load_release()
    stamp = packages_stamp((*release.packages, *release.sysdeps))
    debs = cache / "debs"
    elsewhere = tmp_path / "elsewhere"
    links = []
    victim = sorted(debs.glob(f"{release.packages[0]}_*.deb"))[0]
    good = victim.read_bytes()
    if plant == "links-and-damaged-package":
        links = [
            hostile.plant(debs / f".{release.name}-{stamp}{suffix}.json.tmp", "symlink",
                          elsewhere=elsewhere, folder=False)
            for suffix in ("", ".debs")
        ]  # fmt: skip
        # One package replaced by other bytes (a same-user mistake, or a planted one).
        victim.unlink()
        victim.write_bytes(b"!<arch>\nnot the package the index names\n")
    else:
        for suffix in ("", ".debs"):
            (debs / f".{release.name}-{stamp}{suffix}.json").write_bytes(hostile.WRONG_JSON)
    dest = tmp_path / "rocm"
    res = run_cli(["rocm", "debian", str(dest), "--cache", str(cache)], cwd=tmp_path)
    for link in links:
        link.assert_untouched()
    if res.returncode == 0:  # the mirror was reachable (or nothing was missing)
        assert victim.read_bytes() == good
        assert (dest / "lib").is_dir()
    else:  # offline: the damaged package was removed, nothing was unpacked from it
        assert "index" in _one_line(res, 5)
        assert not victim.exists()
        assert not dest.exists()
        victim.write_bytes(good)
        res = run_cli(["rocm", "debian", str(dest), "--cache", str(cache)], cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    again = run_cli(["rocm", "debian", str(dest), "--cache", str(cache)], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "up to date" in again.stderr + again.stdout


def test_a_package_of_another_user_in_the_cache_is_refused(
    run_cli: CliRunner, cache: Path, tmp_path: Path
) -> None:
    hostile.need_root("a file owned by another user")
    release = load_release()
    victim = sorted((cache / "debs").glob(f"{release.packages[0]}_*.deb"))[0]
    data = victim.read_bytes()
    victim.unlink()
    victim.write_bytes(data)
    os.chown(victim, hostile.NOBODY, hostile.NOBODY)
    dest = tmp_path / "rocm"
    res = run_cli(["rocm", "debian", str(dest), "--cache", str(cache)], cwd=tmp_path)
    assert str(victim) in _one_line(res, 14)
    assert victim.lstat().st_uid == hostile.NOBODY
    assert not dest.exists()


@pytest.mark.parametrize("content", [hostile.CRAFTED, hostile.WRONG_JSON, b"{"])
def test_a_damaged_stamp_in_the_tree_is_one_line(
    run_cli: CliRunner, tmp_path: Path, content: bytes
) -> None:
    dest = tmp_path / "rocm"
    dest.mkdir()
    (dest / ".rocm-build-debtree.json").write_bytes(content)
    (dest / "keep").write_text("the user's\n")
    res = run_cli(["rocm", "debian", str(dest), "--cache", str(tmp_path / "c")], cwd=tmp_path)
    assert str(dest) in _one_line(res, 8)
    assert (dest / "keep").read_text() == "the user's\n"


def test_a_download_says_how_far_it_is(run_cli: CliRunner, cache: Path, tmp_path: Path) -> None:
    """Packages missing from the cache are downloaded with a count and sizes: plain lines when
    stderr is no terminal (a bar with the speed on one). Needs the mirror: skipped offline."""
    release = load_release()
    debs = cache / "debs"
    small = sorted(debs.glob("*.deb"), key=lambda p: p.stat().st_size)[:2]
    sizes = sum(p.stat().st_size for p in small)
    for deb in small:
        deb.unlink()
    dest = tmp_path / "rocm"
    res = run_cli(["rocm", "debian", str(dest), "--cache", str(cache)], cwd=tmp_path)
    if res.returncode != 0 and "index" in res.stderr:
        pytest.skip(f"the Debian mirror is out of reach: {res.stderr[-300:]}")
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("downloaded ")]
    assert lines, res.stderr
    total = human_size(sizes)
    assert lines[-1] == (f"downloaded 2/2 Debian {release.suite} packages ({total} of {total})"), (
        lines
    )
    assert all(p.exists() for p in small)
