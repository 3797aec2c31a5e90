"""The shape every stage follows: ``plan(ctx, ...)`` and ``execute(plan, progress) -> result``.

``plan`` decides up front from the run context (its tree and targets decided before it) and
its inputs, which it may read: it makes no folder, writes no file, downloads nothing and starts
no process, and returns a frozen value (``tests/unit/test_stage_contract.py`` holds this);
``execute`` does the work, reporting long steps to a ``Progress``. Every result answers the
same three questions, which is all ``pipeline`` and the CLI need to know about a stage:

- ``as_json()``: the result as plain data (``--json`` and the run report);
- ``nothing_to_do``: "" when the stage did work, else why it did not ("sources up to date");
- ``outputs``: the files later stages consume (the wheels built, the fat wheels bundled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

__all__ = ["Outputs", "StageResult"]


class StageResult(Protocol):
    """What ``execute`` of every stage returns."""

    @property
    def nothing_to_do(self) -> str: ...

    @property
    def outputs(self) -> list[Path]: ...

    def as_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Outputs:
    """A result that is only its output files (for a stage step that reports nothing else)."""

    files: Sequence[Path]
    nothing_to_do: str = ""

    @property
    def outputs(self) -> list[Path]:
        return list(self.files)

    def as_json(self) -> dict[str, Any]:
        return {"outputs": [str(p) for p in self.files], "nothing_to_do": self.nothing_to_do}
