"""Two processes and one lock: the second waits or, with no_wait, stops with exit 13."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocm_build import locks
from rocm_build.errors import Locked

HOLDER = """
import sys, time
from pathlib import Path
from rocm_build import locks
with locks.hold(Path(sys.argv[1]), "the thing"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _holder(target: Path, seconds: float, env: dict[str, str]) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(target), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    child.stdout.close()
    return child


@pytest.fixture
def lock_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    import os

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}


def test_no_wait_stops_at_once_naming_the_holder(tmp_path: Path, lock_env: dict[str, str]) -> None:
    child = _holder(tmp_path / "src" / "torch", 30, lock_env)
    try:
        with (
            pytest.raises(Locked) as err,
            locks.hold(tmp_path / "src" / "torch", "the checkout", no_wait=True),
        ):
            pass
        assert f"pid {child.pid}" in str(err.value)
        assert err.value.exit_code == 13
    finally:
        child.kill()
        child.wait()


def test_second_holder_waits_until_the_first_is_killed(
    tmp_path: Path, lock_env: dict[str, str]
) -> None:
    target = tmp_path / "wheels" / "x.whl"
    child = _holder(target, 30, lock_env)
    start = time.monotonic()
    killer = subprocess.Popen(["sh", "-c", f"sleep 1; kill -9 {child.pid}"])
    # The same target by another spelling is the same lock.
    (tmp_path / "alias").symlink_to(tmp_path / "wheels", target_is_directory=True)
    (tmp_path / "wheels").mkdir(exist_ok=True)
    with locks.hold(tmp_path / "alias" / "x.whl", "the wheel"):
        waited = time.monotonic() - start
    killer.wait()
    child.wait()
    assert waited >= 0.9  # it did wait: SIGKILL of the holder released the lock


def test_different_targets_do_not_block(tmp_path: Path, lock_env: dict[str, str]) -> None:
    child = _holder(tmp_path / "a", 30, lock_env)
    try:
        with locks.hold(tmp_path / "b", "b", no_wait=True):
            pass
    finally:
        child.kill()
        child.wait()
