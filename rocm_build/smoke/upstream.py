"""Summarize a run of PyTorch's own test files (pytest output) on a ROCm build.

``summarize(log_text)`` is pure: it reads the totals line, the short test summary (``-rfE``) and
the failure sections, and counts, per operator, how many failing tests reported it as not
implemented for the device (or for a dtype on the device). Those operators are what a ROCm port
is missing; the rest of the failures are listed as they are.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["Failure", "NotImplementedOp", "UpstreamSummary", "summarize"]

_TOTALS = re.compile(
    r"^=+ (?P<body>(?:\d+ \w+(?:, )?)+)(?: in [\d.]+s.*)? =+$",
    re.MULTILINE,
)
_TOTAL_ITEM = re.compile(r"(\d+) (\w+)")
_SHORT = re.compile(r"^(?P<kind>FAILED|ERROR) (?P<test>\S+)(?: - (?P<reason>.*))?$")
_BLOCK_HEADER = re.compile(r"^_{3,} (?P<title>.+?) _{3,}$")
_SECTION = re.compile(r"^={3,} (?P<name>[A-Za-z ]+?) ={3,}$")
# The ways PyTorch says an operator has no kernel: no kernel registered for the dispatch key,
# a kernel that does not handle a dtype, or a device-specific "not currently implemented".
_NOT_IMPLEMENTED = (
    re.compile(r"Could not run '(?P<op>[\w:.]+)' with arguments from the '(?P<on>\w+)' backend"),
    re.compile(r"\"(?P<op>[\w:.]+)\" not implemented for '(?P<on>[\w ]+)'"),
    re.compile(
        r"The operator '(?P<op>[\w:.]+)' is not currently implemented for the (?P<on>\w+) device"
    ),
)


@dataclass(frozen=True)
class Failure:
    kind: str  # FAILED | ERROR
    test: str
    reason: str


@dataclass(frozen=True)
class NotImplementedOp:
    op: str
    on: str  # the backend, device or dtype named in the message
    tests: int  # how many failing tests reported it


@dataclass(frozen=True)
class UpstreamSummary:
    totals: dict[str, int]
    failures: tuple[Failure, ...]
    not_implemented: tuple[NotImplementedOp, ...]

    @property
    def failed(self) -> int:
        return self.totals.get("failed", 0) + self.totals.get("error", 0)

    def as_json(self) -> dict[str, Any]:
        return {
            "totals": dict(self.totals),
            "failures": [
                {"kind": f.kind, "test": f.test, "reason": f.reason} for f in self.failures
            ],
            "not_implemented": [
                {"op": n.op, "on": n.on, "tests": n.tests} for n in self.not_implemented
            ],
        }

    def lines(self, limit: int = 15) -> list[str]:
        """A short human summary."""
        totals = ", ".join(f"{n} {k}" for k, n in sorted(self.totals.items()))
        out = [f"upstream tests: {totals or 'no totals line (did pytest run?)'}"]
        if self.not_implemented:
            out.append("not implemented, by number of failing tests:")
            out += [f"  {n.tests:>4}  {n.op} ({n.on})" for n in self.not_implemented[:limit]]
        others = [f for f in self.failures if not _matches(f.reason)]
        if others:
            out.append(f"other failures ({len(others)}):")
            out += [f"  {f.test}: {f.reason[:120]}" for f in others[:limit]]
        return out


def _matches(text: str) -> list[tuple[str, str]]:
    found = []
    for pattern in _NOT_IMPLEMENTED:
        found += [(m["op"], m["on"]) for m in pattern.finditer(text)]
    return found


def _normalize_total(word: str) -> str:
    word = word.lower()
    return {"errors": "error", "warnings": "warning"}.get(word, word)


def summarize(log_text: str) -> UpstreamSummary:
    """Totals, failures and not-implemented operators from pytest's output."""
    lines = log_text.splitlines()
    totals: dict[str, int] = {}
    for match in _TOTALS.finditer(log_text):
        totals = {_normalize_total(w): int(n) for n, w in _TOTAL_ITEM.findall(match["body"])}

    failures: list[Failure] = []
    seen_tests: set[str] = set()
    section = ""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in lines:
        sec = _SECTION.match(line)
        if sec:
            section = sec["name"].strip().lower()
            current = None
            continue
        if section in ("failures", "errors"):
            header = _BLOCK_HEADER.match(line)
            if header:
                current = blocks.setdefault(header["title"], [])
                continue
            if current is not None:
                current.append(line)
        elif section == "short test summary info":
            short = _SHORT.match(line)
            if short and short["test"] not in seen_tests:
                seen_tests.add(short["test"])
                failures.append(Failure(short["kind"], short["test"], short["reason"] or ""))

    # One vote per failing test and operator, whether the message came from its traceback, its
    # summary line, or both (the summary line repeats a truncated copy of the traceback's).
    votes: Counter[tuple[str, str]] = Counter()
    voted: dict[str, set[tuple[str, str]]] = {}
    for title, body in blocks.items():
        key = _block_key(title)
        voted.setdefault(key, set()).update(_matches("\n".join(body)))
    for failure in failures:
        voted.setdefault(_short_key(failure.test), set()).update(_matches(failure.reason))
    for ops in voted.values():
        votes.update(ops)
    ranked = sorted(votes.items(), key=lambda item: (-item[1], item[0]))
    return UpstreamSummary(
        totals=totals,
        failures=tuple(failures),
        not_implemented=tuple(NotImplementedOp(op, on, n) for (op, on), n in ranked),
    )


def _block_key(title: str) -> str:
    """``TestFooCUDA.test_bar_cuda`` (a failure header) -> ``TestFooCUDA.test_bar_cuda``;
    ``ERROR at setup of TestX.test_y`` -> ``TestX.test_y``."""
    title = re.sub(r"^ERROR at (setup|teardown|call) of ", "", title).strip()
    return title.replace("::", ".")


def _short_key(test: str) -> str:
    """``test_ops.py::TestFooCUDA::test_bar_cuda`` -> ``TestFooCUDA.test_bar_cuda``."""
    parts = test.split("::")
    return ".".join(parts[1:]) if len(parts) > 1 else test
