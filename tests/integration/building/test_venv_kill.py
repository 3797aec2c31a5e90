"""A kill while the build venv is made never breaks later builds: the next build makes it again.

Real venvs, real pip, a real build of the fixture torch project against the real ROCm tree;
the kill is a real SIGKILL at the fault point between the venv and its pip (what Ctrl-C or an
OOM kill during ``python -m venv`` leaves)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rocm_build.building.venv import STATE_FILE

from .conftest import Workspace

pytestmark = pytest.mark.slow


def _default_venv(ws: Workspace) -> Path:
    """Configure the workspace with the build venv in its default place (rocm-build's own)."""
    ws.configure()
    config = ws.root / "rocm-build.toml"
    lines = config.read_text().splitlines(keepends=True)
    config.write_text("".join(ln for ln in lines if not ln.startswith("venv = ")))
    return ws.root / ".rocm-build" / "venv"


def _half_made(venv: Path) -> None:
    """What a kill during ``python -m venv`` leaves: a venv with a python and no pip."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)


def test_a_kill_between_venv_and_pip_is_made_good_by_the_next_build(workspace: Workspace) -> None:
    venv = _default_venv(workspace)
    killed = workspace.build("torch", env={"RB_FAULT_POINT": "venv.without-pip"})
    assert killed.returncode == -9, killed.stderr
    assert (venv / "bin/python").exists()
    assert (venv / STATE_FILE).read_text().strip() == "making"
    again = workspace.build("torch")
    assert again.returncode == 0, again.stderr
    assert "left half made" in again.stderr
    assert (venv / STATE_FILE).read_text().strip() == "complete"
    # the fixture's release tag v2.9.1 gives the version (version.txt says 2.9.0a0)
    assert workspace.wheel("torch").name.startswith("torch-2.9.1+rocm5.2-")


def test_a_half_made_venv_in_the_default_place_is_made_again(workspace: Workspace) -> None:
    venv = _default_venv(workspace)
    _half_made(venv)  # as an older rocm-build, killed, left it: no state file
    result = workspace.build("torch")
    assert result.returncode == 0, result.stderr
    assert "No module named pip" not in result.stderr
    assert (venv / STATE_FILE).read_text().strip() == "complete"


def test_a_users_broken_venv_is_named_and_kept(workspace: Workspace, tmp_path: Path) -> None:
    venv = tmp_path / "users-venv"
    _half_made(venv)
    (venv / "mine.txt").write_text("the user's\n")
    config = workspace.root / "rocm-build.toml"
    config.write_text(config.read_text().replace(str(workspace.venv), str(venv)))
    result = workspace.build("torch")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = [ln for ln in result.stderr.splitlines() if ln.startswith("rocm-build: error:")]
    assert f"build.venv {venv} is not a working Python environment" in line, line
    assert (venv / "mine.txt").exists()
