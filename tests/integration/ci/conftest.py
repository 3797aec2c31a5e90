"""Fixtures for the CI area: a real Redis server on loopback, started and stopped per test."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """``redis://127.0.0.1:PORT`` of a private redis-server (Debian's ``redis-server``)."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is not installed: run dev/setup (dev/apt-packages-test.txt)")
    data = tmp_path / "redis"
    data.mkdir()
    port = _free_port()
    proc = subprocess.Popen(
        [
            server,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--dir",
            str(data),
            "--save",
            "",
            "--appendonly",
            "no",
            "--protected-mode",
            "yes",
            "--logfile",
            str(data / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not _ping(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                log = (data / "redis.log").read_text(errors="replace")[-2000:]
                pytest.fail(f"redis-server did not start on port {port}:\n{log}")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
