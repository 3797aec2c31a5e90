"""Fixtures for the CI area: a real Redis server on loopback, started and stopped per test."""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import services


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
        log = data / "redis.log"
        services.wait_until(
            lambda: _ping(port),
            proc,
            20,
            lambda: log.read_text(errors="replace") if log.exists() else "",
            f"redis-server on port {port}",
        )
        yield f"redis://127.0.0.1:{port}"
    finally:
        services.stop(proc, 10)
