"""A checkout killed inside one of git's own processes is finished by the next run.

A torch-shaped project (a few MB of binary files under data/, a submodule with binary files of
its own, a base series, a hipify step) is stopped inside git at a moment the test knows:

- inside a fetch or clone: the repository is served through an ``upload-pack`` wrapper (in a
  copy of git's exec path, ``GIT_EXEC_PATH``: a clone, and git under ``git submodule``, take no
  ``remote.origin.uploadpack``) that passes git's pack stream on until about half of it has gone
  out, then stops and says so in a file.
  The client's ``git fetch`` has then written the commit and some of the objects one by one
  (``unpack-objects``), not the others; a submodule's ``git clone`` has half a pack;
- inside a ``git checkout`` (of the project or, under ``git submodule update``, of its
  submodule): the data files pass through a smudge filter (``.gitattributes`` in the fixture,
  the driver set for the killed run only) that copies them, except one file, where it says so in
  a file and waits. git has then written the files before that one, holds ``index.lock`` and
  has not written the index or moved HEAD.

The test then kills the whole run (SIGKILL to rocm-build's process group and to git's), as an
OOM kill would. No sleeps decide anything: the kill comes after the file handshake (and, for a
fetch, the object the test waits for).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from .sources_fixture import Project, commit_files, git

pytestmark = pytest.mark.slow

WRAPPER = textwrap.dedent(
    """\
    import os, subprocess, sys, threading
    from pathlib import Path

    hand = Path(os.environ["RB_TEST_CUT_FILE"])
    repo = "/" + os.environ["RB_TEST_CUT_REPO"]
    cut = hand.exists() is False and sys.argv[-1].rstrip("/").endswith(repo)
    child = subprocess.Popen(
        ["git", "upload-pack", *sys.argv[1:]], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )

    def pump_in():
        while data := os.read(0, 65536):
            child.stdin.write(data)
            child.stdin.flush()
        child.stdin.close()

    threading.Thread(target=pump_in, daemon=True).start()
    sent = 0
    while data := os.read(child.stdout.fileno(), 65536):
        os.write(1, data)
        sent += len(data)
        if cut and sent > int(os.environ["RB_TEST_CUT_BYTES"]):
            hand.with_suffix(".tmp").write_text(str(os.getpid()))
            hand.with_suffix(".tmp").rename(hand)
            threading.Event().wait()  # the test kills us
    sys.exit(child.wait())
    """
)

# A smudge filter that copies each file, but stops at one and says so (the test kills it).
GATE = textwrap.dedent(
    """\
    import os, sys, threading
    from pathlib import Path

    data = sys.stdin.buffer.read()
    hand = Path(os.environ["RB_TEST_GATE_FILE"])
    if sys.argv[1] == os.environ["RB_TEST_GATE_PATH"] and not hand.exists():
        hand.with_suffix(".tmp").write_text(str(os.getpid()))
        hand.with_suffix(".tmp").rename(hand)
        threading.Event().wait()  # the test kills us
    sys.stdout.buffer.write(data)
    """
)

HIPIFY = textwrap.dedent(
    """\
    import pathlib
    root = pathlib.Path.cwd()
    for cu in [root / "src" / "k.cu", root / "sub" / "s.cu"]:
        cu.with_suffix(".hip").write_text(cu.read_text().replace("cuda", "hip"))
    """
)

DATA_FILES = 5
DATA_SIZE = 1 << 20
SUB_FILES = 3


class Torch(Project):
    @property
    def src(self) -> Path:
        return self.work / "src" / "torch"


def _data(repo: Path, rng: random.Random, names: list[str]) -> list[str]:
    """Binary files of DATA_SIZE random bytes under data/, added; their blob ids."""
    blobs: list[str] = []
    for name in names:
        path = repo / "data" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(rng.randbytes(DATA_SIZE))
        blobs.append(git(repo, "hash-object", str(path)))
    git(repo, "add", "data")
    return blobs


def _upstream(up: Path, rng: random.Random) -> list[str]:
    """torch v1: data files, the submodule at its second commit (data files of its own); the
    submodule's default branch has moved on since, so a fresh clone of it is not at the commit
    torch records. Returns the blob ids of torch's data files."""
    sub, torch = up / "sub", up / "torch"
    for repo in (sub, torch):
        repo.mkdir(parents=True)
        git(repo, "init", "-q")
    # The data files go through the "gate" filter where a test sets its driver (see GATE).
    attributes = {".gitattributes": "data/*.bin filter=gate\n"}
    commit_files(sub, {**attributes, "s.cu": "int s() { return cuda(); }\n"}, "sub: first")
    _data(sub, rng, [f"s{i}.bin" for i in range(SUB_FILES)])
    git(sub, "commit", "-q", "-m", "sub: data")
    files = {**attributes, "README.md": "torch\n", "src/k.cu": "void k() { cuda(); }\n"}
    commit_files(torch, {**files, "tools/h.py": HIPIFY}, "torch: first")
    blobs = _data(torch, rng, [f"blob{i}.bin" for i in range(DATA_FILES)])
    git(torch, "submodule", "add", "-q", sub.as_uri(), "sub")
    git(torch, "commit", "-q", "-m", "torch: data and sub")
    git(torch, "tag", "v1")
    commit_files(sub, {"s.cu": "int s() { return cuda() + 2; }\n"}, "sub: later")
    return blobs


def _move_sub(up: Path) -> None:
    """torch v2, made only now: v1 with two data files changed and the submodule at a new
    commit (new data files)."""
    sub, torch = up / "sub", up / "torch"
    rng = random.Random(25)
    _data(sub, rng, [f"t{i}.bin" for i in range(SUB_FILES)])
    git(sub, "commit", "-q", "-m", "sub: more data")
    git(torch / "sub", "pull", "-q", "origin", "HEAD")
    _data(torch, rng, ["blob1.bin", "blob3.bin"])
    git(torch, "commit", "-q", "-am", "torch: data changed, sub moved")
    git(torch, "tag", "v2")
    git(torch, "reset", "-q", "--hard", "v1")
    git(torch, "submodule", "update", "-q")


def _project(base: Path) -> tuple[Project, list[str]]:
    up = base / "upstream"
    blobs = _upstream(up, random.Random(24))
    torch = up / "torch"
    # A base series, made the way a developer would: a commit, format-patch, dropped again.
    commit_files(torch, {"README.md": "torch, patched\n"}, "base: readme")
    series = base / "work" / "patches" / "t" / "torch" / "base"
    series.mkdir(parents=True)
    git(torch, "format-patch", "-q", "-1", "-o", str(series))
    git(torch, "reset", "-q", "--hard", "v1")
    work = base / "work"
    (work / "rocm-build.toml").write_text(
        textwrap.dedent(
            f"""\
            patchset = "t"
            default_projects = ["torch"]
            [checkout]
            retries = 1
            retry_delay = 0.0
            [projects.torch]
            origin = "{torch.as_uri()}"
            ref = "v1"
            hipify = ["{{python}}", "tools/h.py"]
            """
        )
    )
    _exec_path(base / "exec-path")
    (base / "gate.py").write_text(GATE)
    return Torch(base, work), blobs


def _exec_path(folder: Path) -> None:
    """git's exec path, with the upload-pack wrapper in place of git-upload-pack."""
    real = Path(git(folder.parent, "--exec-path"))
    folder.mkdir()
    for tool in real.iterdir():
        if tool.name != "git-upload-pack":
            (folder / tool.name).symlink_to(tool)
    wrapper = folder / "git-upload-pack"
    wrapper.write_text(f"#!{sys.executable}\n{WRAPPER}")
    wrapper.chmod(0o755)


def _state(src: Path) -> list[str]:
    """Commits, trees, tags and status of the project and its submodule."""
    return [
        git(repo, *args)
        for repo in (src, src / "sub")
        for args in (
            ("rev-parse", "HEAD", "HEAD^{tree}"),
            ("for-each-ref", "--format=%(refname) %(objectname)", "refs/tags"),
            ("status", "--porcelain"),
        )
    ]


def _fsck(src: Path) -> None:
    for repo in (src, src / "sub"):
        fsck = subprocess.run(
            ["git", "fsck", "--no-dangling"], cwd=repo, capture_output=True, text=True, check=False
        )
        assert fsck.returncode == 0, f"{repo}: {fsck.stderr}"


def _wrapped(p: Project, repo: str = "torch") -> dict[str, str]:
    """The environment of a run whose fetch or clone of ``repo`` is cut half way."""
    return {
        "GIT_EXEC_PATH": str(p.base / "exec-path"),
        "RB_TEST_CUT_FILE": str(p.base / "cut"),
        "RB_TEST_CUT_REPO": repo,
        "RB_TEST_CUT_BYTES": str((DATA_FILES if repo == "torch" else SUB_FILES) * DATA_SIZE // 2),
    }


def _gated(p: Project, path: str) -> dict[str, str]:
    """The environment of a run whose ``git checkout`` stops before writing ``path``."""
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "filter.gate.smudge",
        "GIT_CONFIG_VALUE_0": f"{sys.executable} {p.base / 'gate.py'} %f",
        "RB_TEST_GATE_FILE": str(p.base / "cut"),
        "RB_TEST_GATE_PATH": path,
    }


def _wait_for(check: object, what: str) -> None:
    """Poll for a file the other side writes (a handshake, not a guess at timing)."""
    deadline = time.monotonic() + 120
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def _kill_inside_git(
    p: Project, env: dict[str, str], *args: str, wait_for: Path | None = None, glob: str = ""
) -> None:
    """Run ``checkout ARGS`` with ``env`` until git says (in the file "cut") that it stopped
    where the test wants it (and ``wait_for`` is a file, or ``glob`` under the checkout finds
    one), then kill rocm-build's process group and git's."""
    run = p.popen("checkout", *args, **env)
    hand = p.base / "cut"
    try:
        _wait_for(lambda: hand.is_file() or run.poll() is not None, "git stopped")
        assert run.poll() is None, f"the run ended first: {run.communicate()[1]}"
        if wait_for is not None:
            _wait_for(wait_for.is_file, f"{wait_for.name} is in the store")
        if glob:
            _wait_for(lambda: any(p.src.glob(glob)), f"{glob} is there")
        git_group = os.getpgid(int(hand.read_text()))
        os.killpg(run.pid, signal.SIGKILL)
        os.killpg(git_group, signal.SIGKILL)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
        run.communicate()
    assert run.returncode == -signal.SIGKILL
    hand.unlink()


def _loose(store: Path, oid: str) -> Path:
    return store / "objects" / oid[:2] / oid[2:]


def _finish(p: Project, then: tuple[str, ...], *args: str) -> None:
    """The next runs are killed at the fault points ``then``; the one after must finish the
    checkout just as an uninterrupted run makes it, with a sound object store."""
    for point in then:
        killed = p.rb("checkout", *args, check=False, RB_FAULT_POINT=point)
        assert killed.returncode == -signal.SIGKILL, f"{point}: {killed.stderr}"
    again = p.rb("checkout", *args, check=False)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    # The same checkout, never interrupted, in another folder (if the test has not made it).
    p.rb("checkout", *args, "--src-dir", str(p.work / "uninterrupted"))
    assert _state(p.src) == _state(p.work / "uninterrupted" / "torch")
    _fsck(p.src)
    assert not (p.work / "src" / ".rocm-build-journal" / "torch.json").exists()


@pytest.mark.parametrize("then", [(), ("checkout.locked", "checkout.before-refetch")])
def test_a_first_checkout_killed_inside_git_fetch_resumes(
    tmp_path: Path, then: tuple[str, ...]
) -> None:
    p, blobs = _project(tmp_path)
    target = git(p.base / "upstream" / "torch", "rev-parse", "v1^{commit}")
    _kill_inside_git(p, _wrapped(p), wait_for=_loose(p.src / ".git", target))
    have = [b for b in blobs if _loose(p.src / ".git", b).is_file()]
    assert len(have) < len(blobs), "the kill came after every object was written"
    # The next run is killed too, at its start and as it repairs: each run after goes on.
    _finish(p, then)


AT_START = ("checkout.locked",)


@pytest.mark.parametrize("then", [(), AT_START])
def test_a_first_checkout_killed_inside_a_fetch_that_keeps_a_pack_resumes(
    tmp_path: Path, then: tuple[str, ...]
) -> None:
    """A fetch of more objects than fetch.unpackLimit (as torch's always is) writes one pack
    through index-pack: killed half way, it leaves a half-written tmp_pack_* and no commit.
    The next run fetches again and removes the half-written pack (git would keep it for two
    weeks)."""
    p, _ = _project(tmp_path)
    env = {**_wrapped(p), "GIT_CONFIG_COUNT": "1"}
    env.update(GIT_CONFIG_KEY_0="fetch.unpackLimit", GIT_CONFIG_VALUE_0="1")
    _kill_inside_git(p, env, glob=".git/objects/pack/tmp_pack_*")
    _finish(p, then)
    assert sorted(p.src.glob(".git/objects/**/tmp_*")) == []


@pytest.mark.parametrize("then", [(), AT_START])
def test_a_first_checkout_killed_inside_git_checkout_resumes(
    tmp_path: Path, then: tuple[str, ...]
) -> None:
    """The original report: killed while `git checkout` writes data/blob2.bin."""
    p, _ = _project(tmp_path)
    _kill_inside_git(p, _gated(p, "data/blob2.bin"))
    assert (p.src / "data" / "blob1.bin").is_file()
    assert not (p.src / "data" / "blob2.bin").exists()
    assert (p.src / ".git" / "index.lock").exists()
    _finish(p, then)


@pytest.mark.parametrize("then", [(), AT_START])
def test_a_first_checkout_killed_inside_the_submodule_clone_resumes(
    tmp_path: Path, then: tuple[str, ...]
) -> None:
    p, _ = _project(tmp_path)
    _kill_inside_git(p, _wrapped(p, "sub"))
    assert (p.src / ".git" / "modules" / "sub").is_dir()
    _finish(p, then)


@pytest.mark.parametrize("then", [(), AT_START])
def test_a_first_checkout_killed_inside_the_submodule_checkout_resumes(
    tmp_path: Path, then: tuple[str, ...]
) -> None:
    """The submodule is cloned (HEAD at its origin's default branch, past the commit torch
    records), and its `git checkout` of the recorded commit was writing data/s1.bin."""
    p, _ = _project(tmp_path)
    _kill_inside_git(p, _gated(p, "data/s1.bin"))
    assert (p.src / "sub" / "data" / "s0.bin").is_file()
    assert not (p.src / "sub" / "data" / "s1.bin").exists()
    _finish(p, then)


def _moved(p: Project) -> None:
    """A checkout at v1, v2 made upstream, and the same checkout moved to v2 uninterrupted
    in another folder (moving keeps v1's tag: this is what _finish compares with)."""
    for src_dir in ("src", "uninterrupted"):
        p.rb("checkout", "--src-dir", str(p.work / src_dir))
    _move_sub(p.base / "upstream")
    p.rb("checkout", "--ref", "torch=v2", "--src-dir", str(p.work / "uninterrupted"))


@pytest.mark.parametrize("then", [(), AT_START])
def test_a_checkout_moving_to_a_new_ref_killed_inside_git_checkout_resumes(
    tmp_path: Path, then: tuple[str, ...]
) -> None:
    """git checkout of v2 over the patched v1 wrote data/blob1.bin, not yet data/blob3.bin:
    the index and HEAD are v1's, index.lock is there."""
    p, _ = _project(tmp_path)
    _moved(p)
    _kill_inside_git(p, _gated(p, "data/blob3.bin"), "--ref", "torch=v2")
    v2 = p.base / "upstream" / "torch"
    assert git(p.src, "hash-object", "data/blob1.bin") == git(v2, "rev-parse", "v2:data/blob1.bin")
    assert (p.src / ".git" / "index.lock").exists()
    _finish(p, then, "--ref", "torch=v2")


def test_a_file_the_user_deleted_after_a_kill_inside_git_checkout_is_theirs(tmp_path: Path) -> None:
    """A file missing where the killed checkout was not replacing it (data/blob0.bin is the
    same in v1 and v2) is the user's deletion: exit 6, naming it; nothing is put back."""
    p, _ = _project(tmp_path)
    _moved(p)
    _kill_inside_git(p, _gated(p, "data/blob3.bin"), "--ref", "torch=v2")
    (p.src / "data" / "blob0.bin").unlink()
    refused = p.rb("checkout", "--ref", "torch=v2", check=False)
    assert refused.returncode == 6, refused.stderr
    assert "(data/blob0.bin)" in refused.stderr
    assert not (p.src / "data" / "blob0.bin").exists()
    git(p.src, "checkout", "HEAD", "--", "data/blob0.bin")  # the user takes it back
    _finish(p, (), "--ref", "torch=v2")


@pytest.mark.parametrize("then", [(), AT_START])
def test_a_checkout_moving_the_submodule_killed_inside_its_fetch_resumes(
    tmp_path: Path, then: tuple[str, ...]
) -> None:
    """A checkout at v1 is moved to v2 (the submodule moves on); the submodule's `git fetch`
    is killed with the new commit in its store and only some of its data."""
    p, _ = _project(tmp_path)
    _moved(p)
    sub_store = p.src / ".git" / "modules" / "sub"
    target = git(p.base / "upstream" / "torch", "rev-parse", "v2:sub")
    _kill_inside_git(p, _wrapped(p, "sub"), "--ref", "torch=v2", wait_for=_loose(sub_store, target))
    complete = subprocess.run(
        ["git", "rev-list", "--objects", "--quiet", target], cwd=p.src / "sub", check=False
    )
    assert complete.returncode != 0, "the kill came after every object was written"
    _finish(p, then, "--ref", "torch=v2")


def test_a_users_commit_in_a_half_made_submodule_is_kept(tmp_path: Path) -> None:
    """After a kill inside the submodule's checkout the user commits there: the next run
    refuses (exit 6) with advice that works, and the commit is never lost."""
    p, _ = _project(tmp_path)
    _kill_inside_git(p, _gated(p, "data/s1.bin"))
    sub = p.src / "sub"
    (p.src / ".git" / "modules" / "sub" / "index.lock").unlink()  # as git's message says
    git(sub, "reset", "-q")  # the index git had not written yet
    commit_files(sub, {"mine.txt": "my work\n"}, "my work")
    mine = git(sub, "rev-parse", "HEAD")
    refused = p.rb("checkout", check=False)
    assert refused.returncode == 6, refused.stderr
    assert "has commits that rocm-build did not make" in refused.stderr
    assert git(sub, "rev-parse", "HEAD") == mine
    git(sub, "branch", "my-work")
    p.rb("checkout", "--force")
    assert git(sub, "rev-parse", "my-work") == mine
    p.rb("checkout", "--src-dir", str(p.work / "uninterrupted"))
    assert _state(p.src) == _state(p.work / "uninterrupted" / "torch")
