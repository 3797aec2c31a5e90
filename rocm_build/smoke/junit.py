"""The outcome of each test of a smoke run, read from the JUnit XML file pytest writes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

__all__ = ["TestOutcome", "parse_junit"]


@dataclass(frozen=True)
class TestOutcome:
    name: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""

    @property
    def headline(self) -> str:
        return self.message.splitlines()[0] if self.message else ""


def parse_junit(path: Path) -> tuple[TestOutcome, ...]:
    """Per-test outcomes from a pytest JUnit XML file."""
    root = ET.parse(path).getroot()  # noqa: S314 - pytest wrote this file just now
    outcomes = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or child.text or "").strip()
                break
        outcomes.append(TestOutcome(name, outcome, message[:4000]))
    return tuple(outcomes)
