"""Unit tests are guarded: starting a process or opening a socket fails the test."""

from __future__ import annotations

import pytest

from . import guard


@pytest.fixture(autouse=True)
def _no_processes_or_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    guard.install(monkeypatch)
