"""How long steps report progress without printing.

A stage takes a ``Progress`` and calls ``start(task, total)`` once per task (``total`` None
when unknown; calling ``start`` again for a running task sets its total), ``advance(task, n)``
as work is done and ``done(task)`` at the end. Task names are short labels meant for people
("torch: fetch objects"). The CLI renders them with rich; library code never prints, and the
default ``NO_PROGRESS`` ignores everything.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["NO_PROGRESS", "NoProgress", "Progress"]


class Progress(Protocol):
    def start(self, task: str, total: int | None = None) -> None: ...

    def advance(self, task: str, n: int = 1) -> None: ...

    def done(self, task: str) -> None: ...


class NoProgress:
    """Reports nothing (the default everywhere)."""

    def start(self, task: str, total: int | None = None) -> None:
        pass

    def advance(self, task: str, n: int = 1) -> None:
        pass

    def done(self, task: str) -> None:
        pass


NO_PROGRESS: Progress = NoProgress()
