"""The bundle fault suite: SIGKILL `rocm-build bundle` at every fault point it passes (and at a few
random instants), then check what a user can rely on:

- the wheel's name in the output folder holds a complete, valid wheel at every instant (the
  previous one until the new one is complete);
- running the same command again leaves no temporary file or folder behind;
- and gives exactly the bytes of an uninterrupted run.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from .conftest import Bundler, check_wheel, strays

pytestmark = pytest.mark.slow


def _reference(bundler: Bundler, tmp_path: Path) -> tuple[bytes, bytes, list[str]]:
    """(old output at -z 0, uninterrupted output at -z 1, the fault points that run passes)."""
    old_run = bundler.run(level=0)
    assert old_run.returncode == 0, old_run.stderr
    [wheel] = sorted(bundler.out.glob("*.whl"))
    old = wheel.read_bytes()
    log = tmp_path / "points.log"
    run = bundler.run(RB_FAULT_LOG=str(log))
    assert run.returncode == 0, run.stderr
    new = wheel.read_bytes()
    assert new != old
    seen: Counter[str] = Counter()
    points = []
    for name in log.read_text().split() if log.exists() else []:
        seen[name] += 1
        points.append(f"{name}@{seen[name]}")
    return old, new, points


def _check_after_kill(bundler: Bundler, old: bytes, new: bytes, where: str) -> None:
    wheels = sorted(bundler.out.glob("*.whl"))
    assert len(wheels) == 1, f"{where}: {[w.name for w in wheels]}"
    check_wheel(wheels[0])
    assert wheels[0].read_bytes() in (old, new), f"{where}: the wheel is neither old nor new"


def _rerun_and_compare(bundler: Bundler, new: bytes, where: str) -> None:
    again = bundler.run()
    assert again.returncode == 0, f"{where}: {again.stderr}"
    assert strays(bundler.out) == [], f"{where}: left behind"
    [wheel] = sorted(bundler.out.glob("*.whl"))
    assert wheel.read_bytes() == new, f"{where}: the re-run's wheel differs"


def _restore_old(bundler: Bundler, old: bytes) -> None:
    [wheel] = sorted(bundler.out.glob("*.whl"))
    wheel.write_bytes(old)


def test_kill_at_every_point_then_rerun(bundler: Bundler, tmp_path: Path) -> None:
    old, new, points = _reference(bundler, tmp_path)
    names = {p.split("@")[0] for p in points}
    assert len(points) >= 20, points
    assert {"bundle.extracted", "bundle.library", "wheel.commit.synced"} <= names
    for point in points:
        _restore_old(bundler, old)  # each kill interrupts the rewrite of an existing wheel
        killed = bundler.run(RB_FAULT_POINT=point)
        assert killed.returncode == -signal.SIGKILL, f"{point}: not reached\n{killed.stderr}"
        _check_after_kill(bundler, old, new, point)
        _rerun_and_compare(bundler, new, point)


def test_kill_at_random_instants_then_rerun(bundler: Bundler, tmp_path: Path) -> None:
    old, new, _ = _reference(bundler, tmp_path)
    rng = random.Random(20240610)
    for _ in range(4):
        _restore_old(bundler, old)
        delay = rng.uniform(0.2, 1.2)
        child = bundler.start()
        time.sleep(delay)
        child.kill()
        child.communicate()
        where = f"kill after {delay:.2f} s"
        _check_after_kill(bundler, old, new, where)
        _rerun_and_compare(bundler, new, where)
