"""Every JSON state file rocm-build reads back, replaces or deletes, under the usual attacks
(tests/support/hostile.py), through the real command that reads it.

The state files: the checkout journal and the source manifest (``checkout``), save-patches' swap
record (``save-patches``), the ``all`` stamps (``all``), the build report and the build venv's
state file (``build``), and the download cache's stamp (``rocm fetch``). A small pure-Python
project goes through ``all`` once per module (a real checkout, build venv, build, bundle against
the real ROCm tree); each test starts from a copy of what that left.

Each attack ends one of two ways: the run succeeds, or it stops with one line and a documented
exit code. A name that holds no regular file of this user's alone (a link, a folder, a FIFO,
another user's file, a file anyone may write to) is refused with exit 14 and left as it is;
damaged content of state that is only ever derived (stamps, reports, the download stamp, the
venv's) is redone and replaced; a damaged journal (exit 6) or source manifest (exit 2) stops the
run. Never a traceback, never a hang (a FIFO opened for reading), and nothing elsewhere changes
(what a planted link points at stays as it was).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import DEFLATE_CACHE_ENV
from tests.support import hostile
from tests.support.gitrepo import git
from tests.support.httpserver import small_tree_tarball

from .sources_fixture import commit_files, env_for

pytestmark = pytest.mark.slow

DEAD = 4194305  # above the largest pid Linux hands out: no process has it
#: Only tells a hang (a FIFO opened for reading) from a result; no measure of speed.
TIMEOUT = 120

SETUP = "from setuptools import setup\nsetup(name='mini', version='1.0', packages=['mini'])\n"
CONFIG = """\
patchset = "t"
default_projects = ["mini"]
[build]
venv = "{venv}"
[checkout]
retries = 1
retry_delay = 0.0
[projects.mini]
origin = "{origin}"
ref = "v1"
hipify = []
build_tool = "pip"
device_code = false
"""
IGNORE = "build/\n*.egg-info/\n"
VENV_STATE = "venv/.rocm-build-venv"


@dataclass
class Mini:
    """A work folder with one pure-Python project, as ``all`` left it; its build venv beside it
    (``base/venv``), shared by the module's tests."""

    base: Path
    work: Path
    tree: Path

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        extra = {"XDG_CACHE_HOME": str(self.base / "cache"), DEFLATE_CACHE_ENV: "none", **env}
        try:
            return subprocess.run(
                [sys.executable, "-m", "rocm_build", "-q", *args],
                cwd=self.work,
                env=env_for(self.base, **extra),
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.fail(f"rocm-build {' '.join(args)} hangs")

    def command(self, name: str) -> tuple[str, ...]:
        tree = ("--rocm", str(self.tree), "--arch", "gfx90a")
        return {
            "all": ("all", *tree, "--no-smoke"),
            "build": ("build", *tree),
        }.get(name, (name,))

    @property
    def src(self) -> Path:
        return self.work / "src" / "mini"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory, rocm_tree: Path) -> tuple[Mini, Path]:
    base = tmp_path_factory.mktemp("state")
    upstream = base / "upstream" / "mini"
    upstream.mkdir(parents=True)
    git(upstream, "init", "-q")
    files = {"setup.py": SETUP, "mini/__init__.py": "x = 1\n", ".gitignore": IGNORE}
    commit_files(upstream, files, "mini 1.0")
    git(upstream, "tag", "v1")
    work = base / "work"
    work.mkdir()
    config = CONFIG.format(origin=upstream.as_uri(), venv=base / "venv")
    (work / "rocm-build.toml").write_text(config)
    mini = Mini(base, work, rocm_tree)
    first = mini.run(*mini.command("all"))
    assert first.returncode == 0, first.stderr
    shutil.copytree(work, base / "initial", symlinks=True)
    return mini, base / "initial"


@pytest.fixture
def mini(made: tuple[Mini, Path]) -> Iterator[Mini]:
    m, initial = made
    shutil.rmtree(m.work)
    shutil.copytree(initial, m.work, symlinks=True)
    yield m
    # The venv is shared: what a test planted at its state file goes (a remade venv stays).
    state = m.base / VENV_STATE
    if state.is_dir() and not state.is_symlink():
        shutil.rmtree(state)
    else:
        state.unlink(missing_ok=True)
    state.write_text("complete\n")


def error_line(res: subprocess.CompletedProcess[str], code: int) -> str:
    """The run's one error line; it exited ``code`` and printed no traceback."""
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == code, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert len(lines) == 1, res.stderr
    assert not any(ord(c) < 32 for c in lines[0]), repr(lines[0])
    return lines[0]


# --- what each state file holds when it is stale or of the wrong types ---------------------------


def _json(data: object) -> bytes:
    return json.dumps(data).encode()


def _edit(real: bytes, change: Callable[[dict[str, object]], None]) -> bytes:
    data = json.loads(real)
    change(data)
    return _json(data)


def _stale_journal(mini: Mini, _real: bytes) -> bytes:
    """What a checkout killed at its first step long ago left, with today's HEAD."""
    head = git(mini.src, "rev-parse", "HEAD")
    step = {"step": "begin", "heads": {".": head}}
    return _json({"format": 1, "project": "mini", "created": False, "target": "", "pid": DEAD,
                  "steps": [step]})  # fmt: skip


def _project(key: str, value: object) -> Callable[[dict[str, object]], None]:
    def change(data: dict[str, object]) -> None:
        projects = data["projects"]
        assert isinstance(projects, dict)
        projects["mini"][key] = value

    return change


@dataclass(frozen=True)
class StateFile:
    rel: str  # under the module's base folder (the work folder is work/)
    command: str
    stale: Callable[[Mini, bytes], bytes]
    wrong: Callable[[Mini, bytes], bytes] = lambda _mini, _real: hostile.WRONG_JSON
    damaged_rc: int = 0  # after content that is no JSON or of the wrong types; 0: redone


STATE_FILES = {
    "journal": StateFile(
        "work/src/.rocm-build-journal/mini.json", "checkout", _stale_journal, damaged_rc=6
    ),
    "manifest": StateFile(
        "work/src/rocm-build-sources.json",
        "checkout",
        # What a checkout under other settings recorded (another hipify command).
        lambda _m, real: _edit(real, _project("stamp", "0" * 64)),
        lambda _m, real: _edit(real, _project("submodules", [{"path": 7}])),
        damaged_rc=2,
    ),
    "swap-record": StateFile(
        "work/patches/t/.mini.swap.json",
        "save-patches",
        lambda _m, _r: _json({"root": "mini", "new": f".mini.new-{DEAD}", "old": ".mini.old-1"}),
        lambda _m, _r: _json({"root": "mini", "new": ["x"], "old": {"y": 1}}),
    ),
    "all-stamp": StateFile(
        "work/.rocm-build/stamps/build.json",
        "all",
        lambda _m, real: _edit(real, lambda d: d.update(key="0" * 64)),
        # The stamp's own key (so it is taken as current), outputs of the wrong types.
        lambda _m, real: _edit(real, lambda d: d.update(outputs=[1], detail="x")),
    ),
    "build-report": StateFile(
        "work/wheels/build-report.json",
        "build",
        lambda _m, real: _edit(real, _project("inputs", "0" * 64)),
        # The entry of the current inputs and wheel (so it is taken), values of the wrong types.
        lambda _m, real: _edit(real, _project("jobs", "many")),
    ),
    "venv-state": StateFile(
        VENV_STATE,
        "build",
        lambda _m, _r: b"making\n",  # what a run killed while making the venv left
        lambda _m, _r: b"complete\0\n",
    ),
}
CASES = [
    pytest.param(name, attack, id=f"{name}-{attack}")
    for name in STATE_FILES
    for attack in hostile.STATE_FILE_ATTACKS
]


def _plant(mini: Mini, state: StateFile, attack: str, elsewhere: Path) -> hostile.Planted:
    path = mini.base / state.rel
    real = path.read_bytes() if path.is_file() else b""
    stale = state.stale(mini, real)
    content = {"stale": stale, "crafted": b"", "wrong-json": state.wrong(mini, real)}.get(
        attack, real or stale
    )
    path.unlink(missing_ok=True)
    return hostile.plant(path, attack, elsewhere=elsewhere, folder=False, content=content)


@pytest.mark.parametrize(("name", "attack"), CASES)
def test_state_file_under_attack(mini: Mini, tmp_path: Path, name: str, attack: str) -> None:
    state = STATE_FILES[name]
    planted = _plant(mini, state, attack, tmp_path / "elsewhere")
    res = mini.run(*mini.command(state.command))
    if attack in hostile.UNTRUSTED:
        line = error_line(res, 14)
        assert str(planted.path) in line, line
        planted.assert_left_alone()
        return
    if attack != "stale" and state.damaged_rc:
        line = error_line(res, state.damaged_rc)
        assert str(planted.path) in line, line
        planted.assert_left_alone()
        return
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    planted.assert_untouched()
    if planted.path.exists():  # redone: what is there now is what this run wrote
        st = planted.path.lstat()
        assert stat.S_ISREG(st.st_mode), planted.path
        assert planted.path.read_bytes() != planted.planted[2]


# --- temporary names, the swap record's folder names ---------------------------------------------


@pytest.mark.parametrize(
    "rel",
    [
        "wheels/.build-report.json.tmp",
        ".rocm-build/stamps/.build.json.tmp",
        ".rocm-build/.run-report.json.tmp",
    ],
)
def test_a_link_at_a_temporary_name_is_never_written_through(
    mini: Mini, tmp_path: Path, rel: str
) -> None:
    """A state file is written under a name of its own making (O_EXCL), never through a name
    someone else could have planted first."""
    planted = hostile.plant(mini.work / rel, "symlink", elsewhere=tmp_path / "elsewhere",
                            folder=False)  # fmt: skip
    res = mini.run(*mini.command("all"), "--redo")
    assert res.returncode == 0, res.stderr
    planted.assert_untouched()


def test_a_crafted_swap_record_never_moves_a_folder_from_elsewhere(
    mini: Mini, tmp_path: Path
) -> None:
    """The series folder is missing (a swap cut in half), and the record names a folder outside
    the patch folder as the new series: nothing is moved, the old series stays where it is."""
    parent = mini.work / "patches" / "t"
    old = parent / ".mini.old-1"
    (old / "base").mkdir(parents=True)
    (old / "base" / "0001-mine.patch").write_text("the user's series\n")
    elsewhere = tmp_path / "elsewhere"
    record = _json({"root": "mini", "new": os.path.relpath(elsewhere, parent), "old": old.name})
    planted = hostile.plant(parent / ".mini.swap.json", "crafted", elsewhere=elsewhere,
                            folder=False, content=record)  # fmt: skip
    res = mini.run("save-patches")
    planted.assert_untouched()
    assert (old / "base" / "0001-mine.patch").read_text() == "the user's series\n"
    assert not (parent / "mini").exists()
    planted.assert_left_alone()
    line = error_line(res, 14)
    assert ".mini.old-1" in line, line


# --- the download cache's stamp ------------------------------------------------------------------


@pytest.fixture
def tarball(tmp_path: Path) -> str:
    """A small tree's tarball on a file:// URL with its sha256."""
    data = small_tree_tarball()
    path = tmp_path / "rocm.tar.gz"
    path.write_bytes(data)
    return f"{path.as_uri()}#sha256={hashlib.sha256(data).hexdigest()}"


def _fetched(mini: Mini, url: str) -> Path:
    res = mini.run("rocm", "fetch", url)
    assert res.returncode == 0, res.stderr
    (done,) = (mini.base / "cache" / "rocm-build" / "rocm").glob("*/done.json")
    return done


@pytest.mark.parametrize("attack", hostile.STATE_FILE_ATTACKS)
def test_download_stamp_under_attack(mini: Mini, tmp_path: Path, tarball: str, attack: str) -> None:
    done = _fetched(mini, tarball)
    real = done.read_bytes()
    content = {
        "stale": _edit(real, lambda d: d.update(sha256="0" * 64)),  # of another tarball
        "crafted": b"",
        "wrong-json": b"",
    }.get(attack, real)
    done.unlink()
    try:
        planted = hostile.plant(done, attack, elsewhere=tmp_path / "elsewhere", folder=False,
                                content=content)  # fmt: skip
        res = mini.run("rocm", "fetch", tarball)
        if attack in hostile.UNTRUSTED:
            assert str(done) in error_line(res, 14)
            planted.assert_left_alone()
            return
        assert res.returncode == 0, res.stderr  # fetched again
        assert res.stdout.strip() == str(done.parent / "tree")
        assert json.loads(done.read_bytes()) == json.loads(real)
        planted.assert_untouched()
    finally:
        shutil.rmtree(mini.base / "cache", ignore_errors=True)


@pytest.mark.parametrize("attack", ["symlink", "wrong-type", "foreign-owner"])
def test_download_cache_tree_under_attack(
    mini: Mini, tmp_path: Path, tarball: str, attack: str
) -> None:
    """What stands where the unpacked tree belongs is never used as the ROCm tree, never
    deleted through a link."""
    done = _fetched(mini, tarball)
    tree = done.parent / "tree"
    shutil.rmtree(tree)
    try:
        planted = hostile.plant(tree, attack, elsewhere=tmp_path / "elsewhere", folder=True)
        res = mini.run("rocm", "fetch", tarball)
        assert str(tree) in error_line(res, 14)
        planted.assert_left_alone()
    finally:
        shutil.rmtree(mini.base / "cache", ignore_errors=True)


def test_a_link_at_the_partial_download_is_never_written_through(
    mini: Mini, tmp_path: Path, tarball: str
) -> None:
    """A download goes to ``<name>.part`` beside the stamp (resumed from there): a link planted
    at that name never makes the run truncate or append to the file it points at."""
    done = _fetched(mini, tarball)
    shutil.rmtree(done.parent / "tree")
    done.unlink()
    part = done.parent / "rocm.tar.gz.part"
    try:
        planted = hostile.plant(part, "symlink", elsewhere=tmp_path / "elsewhere", folder=False)
        res = mini.run("rocm", "fetch", tarball)
        planted.assert_untouched()
        assert str(part) in error_line(res, 14)
        planted.assert_left_alone()
    finally:
        shutil.rmtree(mini.base / "cache", ignore_errors=True)


# --- the folders rocm-build makes for its own state files -----------------------------------------

STATE_FOLDERS = {
    "journal-folder": ("work/src/.rocm-build-journal", "checkout"),
    "stamps-folder": ("work/.rocm-build/stamps", "all"),
}


@pytest.mark.parametrize("attack", ["symlink", "wrong-type", "foreign-owner", "world-writable"])
@pytest.mark.parametrize("name", list(STATE_FOLDERS))
def test_a_state_folder_planted_in_its_place_is_refused(
    mini: Mini, tmp_path: Path, name: str, attack: str
) -> None:
    """A link (to a folder holding a crafted journal or stamp), a file, another user's folder or
    one anyone may write to where rocm-build keeps its own state files: refused with one line
    (exit 14), nothing read from it, written into it or swept from it."""
    rel, command = STATE_FOLDERS[name]
    folder = mini.base / rel
    shutil.rmtree(folder, ignore_errors=True)
    planted = hostile.plant(folder, attack, elsewhere=tmp_path / "elsewhere", folder=True)
    res = mini.run(*mini.command(command))
    assert str(folder) in error_line(res, 14)
    planted.assert_left_alone()


@pytest.mark.parametrize("attack", ["symlink", "wrong-type", "foreign-owner"])
def test_a_download_cache_folder_planted_in_its_place_is_refused(
    mini: Mini, tmp_path: Path, tarball: str, attack: str
) -> None:
    """The folder a download is kept in (named by the URL's hash) is made by rocm-build: a link
    planted there never has the tarball unpacked into the folder it points at."""
    done = _fetched(mini, tarball)
    folder = done.parent
    shutil.rmtree(folder)
    try:
        planted = hostile.plant(folder, attack, elsewhere=tmp_path / "elsewhere", folder=True)
        res = mini.run("rocm", "fetch", tarball)
        assert str(folder) in error_line(res, 14)
        planted.assert_left_alone()
    finally:
        shutil.rmtree(mini.base / "cache", ignore_errors=True)
