"""What a build writes and empties in its work folder (``.rocm-build/dist``, ``dist/<project>``,
``logs/build-<project>.log``, ``logs/requirements-<project>.txt``) is held to the rules of state
files: a link, a file, a FIFO or another user's thing planted at one of those names stops
``build`` with one line and exit 14; nothing is emptied, written or truncated through it, no FIFO
hangs the run, and the planted thing is left as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import hostile

from .conftest import Workspace

WORK = ".rocm-build"
#: Bait a link at ``dist`` would expose: the build empties ``dist/torch`` and writes there.
BAIT = {"victim": b"precious: not the tool's\n", "torch/victim": b"precious too\n"}

FILES = {"log": "logs/build-torch.log", "requirements": "logs/requirements-torch.txt"}
FOLDERS = {"dist": "dist", "project dist": "dist/torch", "logs": "logs"}
FOLDER_ATTACKS = ["symlink", "wrong-type", "foreign-owner", "world-writable"]


def _refused(workspace: Workspace, planted: hostile.Planted) -> None:
    res = workspace.build("torch")
    assert res.returncode == 14, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if str(planted.path) in ln]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    planted.assert_left_alone()
    assert not workspace.wheels.exists()


@pytest.mark.parametrize("attack", hostile.UNTRUSTED)
@pytest.mark.parametrize("name", list(FILES))
def test_planted_work_files_are_refused(
    workspace: Workspace, tmp_path: Path, name: str, attack: str
) -> None:
    path = workspace.root / WORK / FILES[name]
    planted = hostile.plant(
        path, attack, elsewhere=tmp_path / "elsewhere", folder=False, content=b"old\n"
    )
    _refused(workspace, planted)


@pytest.mark.parametrize("attack", FOLDER_ATTACKS)
@pytest.mark.parametrize("name", list(FOLDERS))
def test_planted_work_folders_are_refused(
    workspace: Workspace, tmp_path: Path, name: str, attack: str
) -> None:
    path = workspace.root / WORK / FOLDERS[name]
    planted = hostile.plant(path, attack, elsewhere=tmp_path / "elsewhere", folder=True, bait=BAIT)
    _refused(workspace, planted)
