"""A first checkout killed inside git's own fetch (objects half written) is finished next run.

A torch-shaped project (a few MB of binary files under data/, a submodule, a base series, a
hipify step) is served through an ``upload-pack`` wrapper that passes git's pack stream on until
about half of it has gone out, then stops and says so in a file. The client's ``git fetch`` has
then written the commit and some of the objects one by one (``unpack-objects``), not the others;
the test waits for the commit to be in the checkout's store and kills the whole run (SIGKILL to
rocm-build's process group and to git's), as an OOM kill would. No sleeps decide anything: the
kill comes after the file handshake and the object the test waits for.
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

from .sources_fixture import Project, commit, git

pytestmark = pytest.mark.slow

WRAPPER = textwrap.dedent(
    """\
    import os, subprocess, sys, threading
    from pathlib import Path

    hand = Path(os.environ["RB_TEST_CUT_FILE"])
    cut = hand.exists() is False and sys.argv[-1].rstrip("/").endswith("/torch")
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
            hand.write_text(str(os.getpid()))
            threading.Event().wait()  # the test kills us
    sys.exit(child.wait())
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


class Torch(Project):
    @property
    def src(self) -> Path:
        return self.work / "src" / "torch"


def _project(base: Path) -> tuple[Project, list[str]]:
    rng = random.Random(24)
    up = base / "upstream"
    sub, torch = up / "sub", up / "torch"
    for repo in (sub, torch):
        repo.mkdir(parents=True)
        git(repo, "init", "-q")
    commit(sub, {"s.cu": "int s() { return cuda(); }\n"}, "sub: first")
    files = {"README.md": "torch\n", "src/k.cu": "void k() { cuda(); }\n", "tools/h.py": HIPIFY}
    commit(torch, files, "torch: first")
    blobs: list[str] = []
    for i in range(DATA_FILES):
        path = torch / "data" / f"blob{i}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(rng.randbytes(DATA_SIZE))
        blobs.append(git(torch, "hash-object", str(path)))
    git(torch, "add", "data")
    git(torch, "submodule", "add", "-q", sub.as_uri(), "sub")
    git(torch, "commit", "-q", "-m", "torch: data and sub")
    git(torch, "tag", "v1")
    # A base series, made the way a developer would: a commit, format-patch, dropped again.
    commit(torch, {"README.md": "torch, patched\n"}, "base: readme")
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
    (base / "wrap.py").write_text(WRAPPER)
    return Torch(base, work), blobs


def _state(src: Path) -> list[str]:
    return [
        git(repo, "rev-parse", f"HEAD{what}")
        for repo in (src, src / "sub")
        for what in ("", "^{tree}")
    ] + [git(src, "status", "--porcelain")]


def _wrapped(p: Project) -> dict[str, str]:
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "remote.origin.uploadpack",
        "GIT_CONFIG_VALUE_0": f"{sys.executable} {p.base / 'wrap.py'}",
        "RB_TEST_CUT_FILE": str(p.base / "cut"),
        "RB_TEST_CUT_BYTES": str(DATA_FILES * DATA_SIZE // 2),
    }


def _wait_for(check: object, what: str) -> None:
    """Poll for a file the other side writes (a handshake, not a guess at timing)."""
    deadline = time.monotonic() + 120
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def _kill_inside_fetch(p: Project) -> None:
    run = p.popen("checkout", **_wrapped(p))
    hand = p.base / "cut"
    _wait_for(lambda: hand.is_file() and hand.read_text().strip(), "the pack stream was cut")
    target = git(p.base / "upstream" / "torch", "rev-parse", "v1^{commit}")
    loose = p.src / ".git" / "objects" / target[:2] / target[2:]
    _wait_for(loose.is_file, "the fetched commit is in the checkout's store")
    os.killpg(run.pid, signal.SIGKILL)
    os.killpg(os.getpgid(int(hand.read_text())), signal.SIGKILL)
    run.communicate()
    assert run.returncode == -signal.SIGKILL


@pytest.mark.parametrize("then", [(), ("checkout.locked", "checkout.before-refetch")])
def test_a_first_checkout_killed_inside_git_fetch_resumes(
    tmp_path: Path, then: tuple[str, ...]
) -> None:
    p, blobs = _project(tmp_path)
    _kill_inside_fetch(p)
    store = p.src / ".git" / "objects"
    have = [b for b in blobs if (store / b[:2] / b[2:]).is_file()]
    assert len(have) < len(blobs), "the kill came after every object was written"
    # The next run is killed too, at its start and as it repairs: each run after goes on.
    for point in then:
        killed = p.rb("checkout", check=False, RB_FAULT_POINT=point)
        assert killed.returncode == -signal.SIGKILL, f"{point}: {killed.stderr}"
    again = p.rb("checkout", check=False)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    # The same checkout, never interrupted, in another folder.
    p.rb("checkout", "--src-dir", str(p.work / "uninterrupted"))
    assert _state(p.src) == _state(p.work / "uninterrupted" / "torch")
    fsck = subprocess.run(
        ["git", "fsck", "--no-dangling"], cwd=p.src, capture_output=True, text=True, check=False
    )
    assert fsck.returncode == 0, fsck.stderr
    assert not (p.work / "src" / ".rocm-build-journal" / "torch.json").exists()
