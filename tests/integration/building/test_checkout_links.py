"""A checkout's files are read as regular files inside it: a committed ``version.txt`` that is a
link to ``/proc/self/environ`` or ``/dev/zero`` stops ``build --dry-run`` in one line (exit 15),
nothing of what it points at printed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GIT_IDENTITY

from .conftest import Workspace

SECRET = "RB_TEST_SECRET_VALUE_4711"


def _commit_link(repo: Path, name: str, target: str) -> None:
    env = {**os.environ, **GIT_IDENTITY}
    (repo / name).unlink(missing_ok=True)
    (repo / name).symlink_to(target)
    for cmd in (["add", "-A"], ["commit", "-q", "-m", f"{name} as a link"]):
        subprocess.run(["git", *cmd], cwd=repo, env=env, check=True)


@pytest.mark.parametrize("target", ["/proc/self/environ", "/dev/zero"])
def test_dry_run_refuses_a_version_file_linked_out_of_the_checkout(
    workspace: Workspace, target: str
) -> None:
    _commit_link(workspace.root / "src" / "torch", "version.txt", target)
    res = workspace.build("torch", "--dry-run", env={"RB_TEST_SECRET": SECRET})
    assert res.returncode == 15, res.stdout + res.stderr
    assert SECRET not in res.stdout + res.stderr
    assert "MemoryError" not in res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if "version file" in ln]
    assert "leads out of the checkout" in line
    assert "Traceback" not in res.stderr
