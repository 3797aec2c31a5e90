"""Background services tests start (redis-server, dockerd): waiting until one answers, and
stopping it."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable

import pytest


def wait_until(
    answers: Callable[[], bool],
    proc: subprocess.Popen[bytes],
    seconds: float,
    log: Callable[[], str],
    name: str,
    every: float = 0.05,
) -> None:
    """Poll ``answers`` until it is true; fail with the end of ``log()`` when ``proc`` (the
    service ``name``) exits or ``seconds`` pass first; ``every``: seconds between polls."""
    deadline = time.monotonic() + seconds
    while not answers():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{name} did not start:\n{log()[-2000:]}")
        time.sleep(every)


def stop(proc: subprocess.Popen[bytes], seconds: float) -> None:
    """SIGTERM, then SIGKILL after ``seconds``; reaped either way."""
    proc.terminate()
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
