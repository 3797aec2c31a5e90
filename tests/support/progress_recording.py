"""A real ``rocm_build.common.progress.Progress`` that records what a stage reports, for tests."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TaskRecord:
    total: int | None = None
    counts: list[int] = field(default_factory=list)  # cumulative count after each advance
    done: bool = False

    @property
    def count(self) -> int:
        return self.counts[-1] if self.counts else 0


class RecordingProgress:
    """Implements the Progress protocol; fails loudly on calls a renderer could not honour."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskRecord] = {}

    def start(self, task: str, total: int | None = None) -> None:
        record = self.tasks.setdefault(task, TaskRecord())
        assert not record.done, f"{task} started again after it was done"
        record.total = total

    def advance(self, task: str, n: int = 1) -> None:
        record = self.tasks[task]  # KeyError: advanced before start
        assert not record.done, f"{task} advanced after it was done"
        record.counts.append(record.count + n)

    def done(self, task: str) -> None:
        self.tasks[task].done = True

    def completed(self, task: str) -> TaskRecord:
        """The record of ``task``, checked: done, counts strictly increasing, last == total."""
        record = self.tasks[task]
        assert record.done, f"{task} never done"
        assert record.total is not None, f"{task} has no total"
        assert record.counts, f"{task} never advanced"
        assert all(b > a for a, b in zip([0, *record.counts], record.counts, strict=False)), (
            f"{task}: counts not increasing: {record.counts}"
        )
        assert record.count == record.total, f"{task}: ended at {record.count} of {record.total}"
        return record
