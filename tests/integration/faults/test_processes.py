"""Children die with rocm-build: a SIGKILL of the parent (parent-death signal), Ctrl-C and SIGTERM
(process-group kill, exit 130 with one line). Real `rocm-build checkout` processes whose hipify
command, or whose git (through a git hook), runs long."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import GIT_IDENTITY, REPO
from tests.support.gitrepo import git

# The project's "hipify": notes its pid, then works for a long time and, as a build tool that
# finishes its current step would, ignores SIGINT.
SLOW_HIPIFY = textwrap.dedent(
    """\
    import os, pathlib, signal, time
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    pathlib.Path(os.environ["RB_TEST_PIDFILE"]).write_text(str(os.getpid()) + "\\n")
    time.sleep(3600)
    """
)
# A post-checkout hook: notes the pid of the git process running it (its parent) and its own.
SLOW_HOOK = textwrap.dedent(
    """\
    #!/bin/sh
    echo "$PPID $$" > "$RB_TEST_PIDFILE"
    exec sleep 3600
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A one-commit upstream whose hipify command is slow, and a work folder using it."""
    up = tmp_path / "upstream"
    (up / "tools").mkdir(parents=True)
    (up / "tools" / "hipify.py").write_text(SLOW_HIPIFY)
    (up / "README").write_text("proj\n")
    git(up, "init", "-q")
    git(up, "add", "-A")
    git(up, "commit", "-q", "-m", "first")
    git(up, "tag", "v1")
    work = tmp_path / "work"
    work.mkdir()
    (work / "rocm-build.toml").write_text(
        textwrap.dedent(
            f"""\
            [checkout]
            retries = 1
            [projects.proj]
            origin = "{up.as_uri()}"
            ref = "v1"
            hipify = ["{{python}}", "tools/hipify.py"]
            """
        )
    )
    return work


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCM_BUILD_")}
    env.update(GIT_IDENTITY)
    env.update(
        PYTHONPATH=str(REPO),
        RB_TEST_PIDFILE=str(tmp_path / "child.pid"),
        XDG_RUNTIME_DIR=str(tmp_path),
        GIT_CONFIG_NOSYSTEM="1",
    )
    env.update(extra)
    return env


@pytest.fixture
def pidfile(tmp_path: Path) -> Iterator[int]:
    """The FIFO the slow child writes its pid(s) to, held open for reading and writing (so the
    child's open never blocks): a handshake without sleeps."""
    os.mkfifo(tmp_path / "child.pid")
    fd = os.open(tmp_path / "child.pid", os.O_RDWR)
    yield fd
    os.close(fd)


def _start(work: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    # A session of its own, as a shell job is: a terminal's Ctrl-C goes to that whole group.
    return subprocess.Popen(
        [sys.executable, "-m", "rocm_build", *args],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _pids_when_started(pidfile: int, parent: subprocess.Popen[str]) -> list[int]:
    """The pids the slow child wrote, once it has: it then sleeps. Fails at once if rocm-build
    ends first (its pidfd becomes readable); the deadline only turns a hang into a failure."""
    exited = os.pidfd_open(parent.pid)
    try:
        ready, _, _ = select.select([pidfile, exited], [], [], 120)
    finally:
        os.close(exited)
    if pidfile not in ready:
        out, err = parent.communicate()
        raise AssertionError(f"rocm-build ended early ({parent.returncode}):\n{out}\n{err}")
    return [int(p) for p in os.read(pidfile, 100).split()]


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def _dies(pid: int) -> bool:
    """Whether ``pid`` ends (it would sleep an hour on its own). Waits on its pidfd, which
    becomes readable when it exits; the deadline only turns a hang into a failure."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        ready, _, _ = select.select([fd], [], [], 120)
    finally:
        os.close(fd)
    return bool(ready) or not _alive(pid)


@pytest.fixture
def reap() -> Iterator[list[int]]:
    """Pids to SIGKILL after the test, whatever it found."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_sigkill_of_rocm_build_kills_the_hipify_child(
    project: Path, tmp_path: Path, reap: list[int], pidfile: int
) -> None:
    parent = _start(project, _env(tmp_path), "checkout", "proj")
    [child] = _pids_when_started(pidfile, parent)
    reap.append(child)
    os.kill(parent.pid, signal.SIGKILL)  # the parent alone, as the OOM killer does
    parent.communicate()
    assert _dies(child), "the hipify command outlived a SIGKILLed rocm-build"


def test_sigkill_of_rocm_build_kills_its_git(
    project: Path, tmp_path: Path, reap: list[int], pidfile: int
) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "post-checkout").write_text(SLOW_HOOK)
    (hooks / "post-checkout").chmod(0o755)
    # Every git rocm-build starts (through GitPython) runs this hook after `git checkout`.
    env = _env(
        tmp_path,
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0="core.hooksPath",
        GIT_CONFIG_VALUE_0=str(hooks),
    )
    parent = _start(project, env, "checkout", "proj", "--no-hipify")
    git_pid, hook_pid = _pids_when_started(pidfile, parent)
    reap.extend([git_pid, hook_pid])
    os.kill(parent.pid, signal.SIGKILL)
    parent.communicate()
    assert _dies(git_pid), "git outlived a SIGKILLed rocm-build"


@pytest.mark.parametrize(
    ("how", "shown"), [(signal.SIGINT, "interrupted (Ctrl-C)"), (signal.SIGTERM, "(SIGTERM)")]
)
def test_ctrl_c_and_sigterm_stop_children_and_exit_130(
    project: Path, tmp_path: Path, reap: list[int], pidfile: int, how: int, shown: str
) -> None:
    parent = _start(project, _env(tmp_path), "checkout", "proj")
    [child] = _pids_when_started(pidfile, parent)
    reap.append(child)
    if how == signal.SIGINT:
        os.killpg(parent.pid, how)  # what a terminal's Ctrl-C does: the foreground group
    else:
        os.kill(parent.pid, how)  # what a supervisor does: the process
    _, err = parent.communicate(timeout=30)
    assert parent.returncode == 130, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if "error" in line]
    assert errors == [err.strip().splitlines()[-1]], err  # one line, the last
    assert shown in errors[0]
    assert "run the same command again" in errors[0]
    assert _dies(child), "the hipify command outlived the interrupted run"
