"""Two processes and one lock: the second waits or, with no_wait, stops with exit 13."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rocm_build.common import locks
from rocm_build.common.errors import Locked

# Holds the lock until its stdin closes or it is killed.
HOLDER = """
import sys
from pathlib import Path
from rocm_build.common import locks
with locks.hold(Path(sys.argv[1]), "the thing"):
    print("held", flush=True)
    sys.stdin.read()
"""


def _holder(target: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(target)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "held"
    child.stdout.close()
    return child


def _stop(child: subprocess.Popen[str]) -> None:
    child.kill()
    child.wait()
    if child.stdin is not None:
        child.stdin.close()


@pytest.fixture
def lock_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    import os

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    (tmp_path / "run").mkdir()
    return {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}


def test_no_wait_stops_at_once_naming_the_holder(tmp_path: Path, lock_env: dict[str, str]) -> None:
    child = _holder(tmp_path / "src" / "torch", lock_env)
    try:
        with (
            pytest.raises(Locked) as err,
            locks.hold(tmp_path / "src" / "torch", "the checkout", no_wait=True),
        ):
            pass
        assert f"pid {child.pid}" in str(err.value)
        assert err.value.exit_code == 13
    finally:
        _stop(child)


class _Seen(logging.Handler):
    """Sets ``event`` when a log message holds ``text``."""

    def __init__(self, text: str, event: threading.Event) -> None:
        super().__init__()
        self.text, self.event = text, event

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def test_second_holder_waits_until_the_first_is_killed(
    tmp_path: Path, lock_env: dict[str, str]
) -> None:
    target = tmp_path / "wheels" / "x.whl"
    child = _holder(target, lock_env)
    # The same target by another spelling is the same lock.
    (tmp_path / "alias").symlink_to(tmp_path / "wheels", target_is_directory=True)
    (tmp_path / "wheels").mkdir(exist_ok=True)
    waiting, acquired = threading.Event(), threading.Event()
    seen = _Seen("waiting for the wheel", waiting)
    logging.getLogger("rocm_build.common.locks").addHandler(seen)

    def second() -> None:
        with locks.hold(tmp_path / "alias" / "x.whl", "the wheel"):
            acquired.set()

    worker = threading.Thread(target=second, daemon=True)
    try:
        worker.start()
        assert waiting.wait(120), "the second holder never said it waits"
        assert not acquired.is_set()  # it waits while the first holds the lock
        _stop(child)  # SIGKILL of the holder releases the lock
        worker.join(120)
        assert acquired.is_set()
    finally:
        logging.getLogger("rocm_build.common.locks").removeHandler(seen)
        _stop(child)


def test_different_targets_do_not_block(tmp_path: Path, lock_env: dict[str, str]) -> None:
    child = _holder(tmp_path / "a", lock_env)
    try:
        with locks.hold(tmp_path / "b", "b", no_wait=True):
            pass
    finally:
        _stop(child)
