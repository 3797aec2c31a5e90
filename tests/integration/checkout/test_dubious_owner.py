"""A ``file://`` origin another user owns: git refuses it ("detected dubious ownership"), which
rocm-build reported as "Could not read from remote repository ... check the URL and network",
after its retries. One line that says what git refuses and what to do, the fetch exit code."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GIT_IDENTITY, CliRunner
from tests.support.otheruser import NOBODY_UID


def test_origin_owned_by_another_user_says_what_to_do(run_cli: CliRunner, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("an origin owned by another user needs root to chown it: run as root")
    origin = tmp_path / "origin"
    env = {**os.environ, **GIT_IDENTITY}
    subprocess.run(["git", "init", "-q", "-b", "main", str(origin)], check=True, env=env)
    git = ["git", "-C", str(origin)]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    subprocess.run([*git, "tag", "v1"], check=True, env=env)
    for name in [origin, *origin.rglob("*")]:
        os.lchown(name, NOBODY_UID, NOBODY_UID)
    work = tmp_path / "work"
    work.mkdir()
    args = ["checkout", "torch", "--origin", f"torch={origin.as_uri()}", "--ref", "torch=v1"]
    # no safe.directory of this machine's user applies
    res = run_cli([*args, "--no-hipify"], cwd=work, env={"GIT_CONFIG_GLOBAL": os.devnull})
    assert res.returncode == 5, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert "retry" not in res.stderr, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert "detected dubious ownership" in line, line
    assert f"git config --global --add safe.directory {origin}" in line, line
    assert "own the repository" in line, line
    assert "network" not in line, line
