"""The lock folder and lock files under the usual attacks (tests/support/hostile.py): a planted link
never makes a run write elsewhere, another user's or a shared folder is refused in one line (exit
14), crafted holder text never reaches the terminal raw, and a token in the command line never
reaches a lock file."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rocm_build.common import locks
from rocm_build.common.errors import FileAccessError, Locked
from rocm_build.rocm import debtree
from tests.conftest import REPO
from tests.support import hostile

from .conftest import Bundler


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    return run


def _lock_file(target: Path) -> Path:
    return locks.lock_dir() / locks._key(target)


def _one_line(err: pytest.ExceptionInfo[FileAccessError]) -> str:
    text = str(err.value)
    assert "\n" not in text
    assert err.value.exit_code == 14
    return text


@pytest.mark.parametrize("attack", hostile.FOLDER_ATTACKS)
def test_planted_lock_folder_is_refused(run_dir: Path, tmp_path: Path, attack: str) -> None:
    planted = hostile.plant(
        run_dir / "rocm-build-locks", attack, elsewhere=tmp_path / "elsewhere", folder=True
    )
    with pytest.raises(FileAccessError) as err, locks.hold(tmp_path / "wheel.whl", "the wheel"):
        pass
    text = _one_line(err)
    assert str(planted.path) in text
    planted.assert_untouched()


@pytest.mark.parametrize("attack", ["wrong-type", "fifo", "symlink", "foreign-owner"])
def test_planted_lock_file_is_refused(run_dir: Path, tmp_path: Path, attack: str) -> None:
    target = tmp_path / "src" / "torch"
    path = _lock_file(target)
    path.parent.mkdir(mode=0o700)
    planted = hostile.plant(path, attack, elsewhere=tmp_path / "elsewhere", folder=False)
    with pytest.raises(FileAccessError) as err, locks.hold(target, "the checkout"):
        pass
    assert str(path) in _one_line(err)
    planted.assert_untouched()


@pytest.mark.parametrize("attack", ["stale", "world-writable"])
def test_leftover_lock_file_is_taken_and_removed(
    run_dir: Path, tmp_path: Path, attack: str
) -> None:
    target = tmp_path / "src" / "torch"
    path = _lock_file(target)
    path.parent.mkdir(mode=0o700)
    stale = b"rocm-build pid 4194305 (checkout torch)"
    planted = hostile.plant(path, attack, elsewhere=tmp_path / "elsewhere", folder=False,
                            content=stale)  # fmt: skip
    with locks.hold(target, "the checkout", no_wait=True):
        assert path.read_bytes().startswith(f"rocm-build pid {os.getpid()}".encode())
    assert not path.exists()  # a finished run leaves no lock file
    assert os.listdir(path.parent) == []
    planted.assert_untouched()


def test_crafted_holder_text_is_shown_sanitized(run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "out" / "x.whl"
    path = _lock_file(target)
    path.parent.mkdir(mode=0o700)
    hostile.plant(path, "crafted", elsewhere=tmp_path / "elsewhere", folder=False)
    with path.open("rb") as other:  # another run holds it (another open file: another lock)
        fcntl.flock(other, fcntl.LOCK_EX)
        with pytest.raises(Locked) as err, locks.hold(target, "the wheel", no_wait=True):
            pass
    text = str(err.value)
    assert not any(ord(c) < 32 or ord(c) == 127 for c in text), repr(text)
    assert len(text) < 400
    assert "rocm-build pid 1" in text


def test_token_in_the_command_line_never_reaches_a_lock_file(
    run_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["rocm-build", "--origin=torch=https://user:s3cr3t-token@example.com/t.git", "checkout"]
    monkeypatch.setattr(sys, "argv", argv)
    target = tmp_path / "src" / "torch"
    with locks.hold(target, "the checkout"):
        text = _lock_file(target).read_text()
        assert "s3cr3t" not in text
        assert "https://user:***@example.com" in text
        assert _lock_file(target).stat().st_mode & 0o077 == 0
    assert locks.lock_dir().stat().st_mode & 0o077 == 0


def test_lock_folder_on_a_full_disk_still_locks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with hostile.full_disk(tmp_path / "run") as run:
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
        # The holder's text does not fit; the lock works without it.
        with locks.hold(tmp_path / "x.whl", "the wheel", no_wait=True):
            pass


def test_read_only_lock_folder_is_one_line(run_dir: Path, tmp_path: Path) -> None:
    try:
        subprocess.run(["mount", "--bind", "-o", "ro", str(run_dir), str(run_dir)],
                       check=True, capture_output=True)  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount here (needs root and mount rights): {exc}")
    try:
        with pytest.raises(FileAccessError) as err, locks.hold(tmp_path / "x.whl", "the wheel"):
            pass
        assert "Read-only file system" in _one_line(err)
    finally:
        subprocess.run(["umount", str(run_dir)], check=False)


NO_HOME = """
import os
from rocm_build.common import locks
from rocm_build.wheel import deflatecache
from rocm_build.common.errors import RocmBuildError
os.setgid(54321)
os.setuid(54321)  # a user with no passwd entry (as in 'docker run --user 54321')
for call in (lambda: locks.lock_dir(), lambda: deflatecache.from_settings("", 1.0)):
    try:
        call()
    except RocmBuildError as exc:
        print(exc.exit_code, exc)
"""


def test_no_home_folder_is_one_line(tmp_path: Path) -> None:
    hostile.need_root("running as a user without a passwd entry")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)}  # no HOME, no XDG_*
    res = subprocess.run(
        [sys.executable, "-c", NO_HOME], env=env, capture_output=True, text=True, check=False,
        cwd="/",
    )  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 2, res.stdout
    assert all(line.startswith("14 no folder for") for line in lines), lines
    assert all("set HOME" in line for line in lines)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("state", "attack"),
    [
        ("lock folder", "wrong-type"),
        ("lock folder", "symlink"),
        ("deflate cache", "world-writable"),
    ],
)
def test_bundle_refuses_planted_state_in_one_line(
    bundler: Bundler, tmp_path: Path, state: str, attack: str
) -> None:
    if state == "lock folder":
        path, env = bundler.home / "rocm-build-locks", {}
    else:
        path = tmp_path / "deflate"
        env = {"ROCM_BUILD_BUNDLE_DEFLATE_CACHE": str(path)}
    planted = hostile.plant(path, attack, elsewhere=tmp_path / "elsewhere", folder=True)
    res = bundler.run(**env)
    assert res.returncode == 14, res.stderr
    assert "Traceback" not in res.stderr
    [line] = [x for x in res.stderr.splitlines() if "error" in x]
    assert f"the {state} {path}" in line
    planted.assert_untouched()
    assert not list(bundler.out.glob("*.whl"))


# No fifo here: the open("w") this replaced would block on one forever, not fail.
@pytest.mark.parametrize("attack", ["wrong-type", "symlink", "foreign-owner"])
def test_planted_debian_tree_lock_is_refused(tmp_path: Path, attack: str) -> None:
    """``rocm debian`` locks ``.<tree>.lock`` beside the tree (a shared cache): a planted link
    never makes it create or truncate another file, another user's or a folder is refused."""
    dest = tmp_path / "cache" / "rocm"
    path = dest.parent / f".{dest.name}.lock"
    planted = hostile.plant(path, attack, elsewhere=tmp_path / "elsewhere", folder=False)
    with pytest.raises(FileAccessError) as err, debtree._locked(dest):
        pass
    assert str(path) in _one_line(err)
    planted.assert_untouched()


@pytest.mark.parametrize("attack", ["stale", "crafted", "world-writable"])
def test_leftover_debian_tree_lock_is_taken(tmp_path: Path, attack: str) -> None:
    dest = tmp_path / "cache" / "rocm"
    path = dest.parent / f".{dest.name}.lock"
    left = b"left by a killed run\n"
    elsewhere = tmp_path / "elsewhere"
    planted = hostile.plant(path, attack, elsewhere=elsewhere, folder=False, content=left)
    with debtree._locked(dest), path.open("rb") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            taken = True
        except BlockingIOError:  # held: another run would wait
            taken = False
    assert not taken
    planted.assert_untouched()


def test_a_new_debian_tree_lock_is_private(tmp_path: Path) -> None:
    dest = tmp_path / "cache" / "rocm"
    with debtree._locked(dest):
        pass
    st = (dest.parent / ".rocm.lock").lstat()
    assert (st.st_mode & 0o777, st.st_uid) == (0o600, os.geteuid())
