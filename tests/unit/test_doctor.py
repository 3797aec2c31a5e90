"""The doctor report's verdict: the first blocker's exit code, every blocker in one line."""

from __future__ import annotations

from rocm_build.commands.doctor import Blocker, DoctorReport
from rocm_build.common.errors import ConfigError, RocmTreeError, ToolMissing


def test_nothing_blocks() -> None:
    assert DoctorReport({"blockers": []}, (), ()).error() is None


def test_the_first_blocker_sets_the_exit_code_and_all_are_named() -> None:
    blockers = (
        Blocker(ToolMissing, "git is not installed"),
        Blocker(ConfigError, "pass --arch"),
        Blocker(RocmTreeError, "no miopen"),
    )
    error = DoctorReport({}, (), blockers).error()
    assert type(error) is ToolMissing
    assert str(error) == ("3 problems block a build: git is not installed; pass --arch; no miopen")
    one = DoctorReport({}, (), blockers[2:]).error()
    assert type(one) is RocmTreeError
    assert str(one) == "1 problem blocks a build: no miopen"
