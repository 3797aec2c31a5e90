"""Fault points: silent without the variables, logged with RB_FAULT_LOG."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build.common import faults


def test_point_logs_each_name_reached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "points"
    monkeypatch.setenv("RB_FAULT_LOG", str(log))
    monkeypatch.setenv("RB_FAULT_POINT", "never-reached")
    faults.point("a")
    faults.point("b")
    faults.point("a")
    assert log.read_text().split() == ["a", "b", "a"]


def test_point_is_silent_without_the_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RB_FAULT_LOG", raising=False)
    monkeypatch.delenv("RB_FAULT_POINT", raising=False)
    monkeypatch.chdir(tmp_path)
    faults.point("a")
    assert list(tmp_path.iterdir()) == []
