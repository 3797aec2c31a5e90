"""The developer scripts as a user runs them: ``dev/test --quick`` is the unit tier alone, with no
set-up, no linters and no ROCm tree."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

VENV = Path(sys.executable).parent.parent  # the venv running these tests (not resolved)


def _dev_test(*args: str, venv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "dev" / "test"), *args],
        env={**os.environ, "RB_VENV": str(venv)},
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def test_quick_is_the_unit_tier_without_set_up_or_linters() -> None:
    # --collect-only: what it would run, without running it
    done = _dev_test("--quick", "--collect-only", "-q", "-p", "no:cacheprovider", venv=VENV)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    assert ids
    assert all(i.startswith("tests/unit/") for i in ids), [i for i in ids if "unit/" not in i][:3]
    assert " deselected)" in done.stdout  # the integration tier, left out by its marker
    both = done.stdout + done.stderr
    assert "dev/setup" not in both  # no set-up
    assert "Success: no issues found" not in both  # no mypy
    assert "All checks passed" not in both  # no ruff


def test_quick_without_a_venv_says_to_run_setup(tmp_path: Path) -> None:
    done = _dev_test("--quick", venv=tmp_path / "no-venv")
    assert done.returncode == 1
    assert "run bash dev/setup once" in done.stderr
    assert not (tmp_path / "no-venv").exists()  # nothing made


def test_quick_with_the_quick_starts_venv_says_to_run_setup(tmp_path: Path) -> None:
    """The quick start makes the venv with the tool alone (no pytest): --quick then says what to
    run, not Python's "No module named pytest"."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    done = _dev_test("--quick", venv=venv)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"dev/test --quick: the venv at {venv} has no test tools: run bash dev/setup once"
    ]
