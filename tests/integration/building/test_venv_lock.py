"""Two builds and one build venv: the second waits for the first's lock, or with ``--no-wait``
stops with exit 13, before it looks at the venv (it never removes a venv the first is still
making)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import DEFLATE_CACHE_ENV, GIT_IDENTITY, REPO

from .conftest import TARGETS, Workspace

# Holds the lock on argv[1] until its stdin closes or it is killed.
HOLDER = """
import sys
from pathlib import Path
from rocm_build.common import locks
with locks.hold(Path(sys.argv[1]), "another build"):
    print("held", flush=True)
    sys.stdin.read()
"""


def _env(workspace: Workspace, runtime: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCM_BUILD_")}
    env.update(GIT_IDENTITY)
    env.update(workspace.env)
    env[DEFLATE_CACHE_ENV] = "none"
    env["PYTHONPATH"] = str(REPO)
    env["XDG_RUNTIME_DIR"] = str(runtime)
    return env


def _hold(target: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    return child


def _stop(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait()
    for pipe in (child.stdin, child.stdout, child.stderr):
        if pipe is not None:
            pipe.close()


def _half_made_venv(venv: Path) -> dict[str, bytes]:
    """A venv another build is making right now: its state file says so."""
    venv.mkdir(parents=True)
    (venv / ".rocm-build-venv").write_text("making\n")
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    return {p.name: p.read_bytes() for p in venv.iterdir()}


@pytest.fixture
def setup(workspace: Workspace, tmp_path: Path) -> tuple[Workspace, Path, dict[str, str]]:
    workspace.venv = tmp_path / "shared-venv"
    workspace.configure()
    runtime = tmp_path / "run"
    runtime.mkdir(mode=0o700)
    return workspace, workspace.venv, _env(workspace, runtime)


def _build(ws: Workspace, env: dict[str, str], *extra: str) -> list[str]:
    return [sys.executable, "-m", "rocm_build", *extra, "build", "--rocm", str(ws.tree),
            "--arch", TARGETS, "torch"]  # fmt: skip


def test_no_wait_stops_before_touching_the_venv(
    setup: tuple[Workspace, Path, dict[str, str]],
) -> None:
    ws, venv, env = setup
    before = _half_made_venv(venv)
    holder = _hold(venv, env)
    try:
        res = subprocess.run(
            _build(ws, env, "--no-wait"),
            cwd=ws.root, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    finally:
        _stop(holder)
    assert res.returncode == 13, res.stdout + res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if "in use by" in ln]
    assert f"the build venv {venv}" in line
    assert {p.name: p.read_bytes() for p in venv.iterdir()} == before
    assert not ws.wheels.exists()


def test_a_second_build_waits_for_the_venv(
    setup: tuple[Workspace, Path, dict[str, str]],
) -> None:
    ws, venv, env = setup
    before = _half_made_venv(venv)
    holder = _hold(venv, env)
    waiting = subprocess.Popen(
        _build(ws, env), cwd=ws.root, env=env, stderr=subprocess.PIPE, text=True,
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert waiting.stderr is not None
        seen = ""
        deadline = time.monotonic() + 120
        while "waiting for the build venv" not in seen and time.monotonic() < deadline:
            line = waiting.stderr.readline()
            if not line:
                break
            seen += line
        assert f"waiting for the build venv {venv}" in seen, seen
        time.sleep(1)
        assert waiting.poll() is None
        assert {p.name: p.read_bytes() for p in venv.iterdir()} == before
    finally:
        waiting.send_signal(signal.SIGTERM)
        waiting.wait(timeout=60)
        if waiting.stderr is not None:
            waiting.stderr.close()
        _stop(holder)
    assert waiting.returncode == 130
    assert {p.name: p.read_bytes() for p in venv.iterdir()} == before
