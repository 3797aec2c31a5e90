"""build's copy into the output folder: under the output wheel's lock, and the next run removes
the temporary files that killed runs left there (never those of a live run)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from rocm_build.common import locks

from .conftest import Workspace

pytestmark = pytest.mark.slow


def test_build_output_is_locked_and_stale_temporaries_go(
    workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # this test's locks, and the CLI's
    first = workspace.build("torch")
    assert first.returncode == 0, first.stderr
    wheel = workspace.wheel("torch")
    before = wheel.read_bytes()
    # A partial copy of a run that was killed (no process has that pid), and one of a live run
    # (which holds its lock, as every writer does).
    stale = wheel.with_name(f".{wheel.name}.rocm-build-{2**22 + 1}-abc123.tmp")
    stale.write_bytes(b"partial")
    live = wheel.with_name(f".{wheel.name}.rocm-build-{os.getpid()}-def456.tmp")
    live.write_bytes(b"partial")

    with live.open("rb") as held, locks.hold(wheel, "the wheel"):  # another run writes it
        fcntl.flock(held, fcntl.LOCK_EX)
        res = workspace.build("torch", "--force", env={"ROCM_BUILD_NO_WAIT": "1"})
    assert res.returncode == 13, res.stderr
    assert f"the wheel {wheel} is in use by rocm-build pid {os.getpid()}" in res.stderr
    assert wheel.read_bytes() == before
    assert not stale.exists()
    assert live.exists()
