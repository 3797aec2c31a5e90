"""The unit-test guard refuses processes and sockets (and the guard is what refuses them)."""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess

import pytest

from rocm_build.common import proc

from .guard import UnitTestGuardError


def test_subprocess_run_is_refused() -> None:
    with pytest.raises(UnitTestGuardError, match=r"subprocess\.Popen.*tests/integration"):
        subprocess.run(["true"], check=False)


def test_popen_imported_by_name_is_refused() -> None:
    from subprocess import Popen

    with pytest.raises(UnitTestGuardError):
        Popen(["true"])


def test_the_project_runner_is_refused() -> None:
    with pytest.raises(UnitTestGuardError):
        proc.run(["true"])


@pytest.mark.parametrize(
    "start",
    [
        lambda: os.system("true"),
        lambda: os.fork(),
        lambda: os.posix_spawn("/bin/true", ["true"], {}),
        lambda: os.posix_spawnp("true", ["true"], {}),
    ],
    ids=["os.system", "os.fork", "os.posix_spawn", "os.posix_spawnp"],
)
def test_os_process_calls_are_refused(start: object) -> None:
    with pytest.raises(UnitTestGuardError):
        start()  # type: ignore[operator]


def test_multiprocessing_is_refused() -> None:
    worker = multiprocessing.get_context("spawn").Process(target=print)
    with pytest.raises(UnitTestGuardError):
        worker.start()


def test_creating_a_socket_is_refused() -> None:
    with pytest.raises(UnitTestGuardError, match="socket"):
        socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(UnitTestGuardError):
        socket.create_connection(("127.0.0.1", 9))


def test_connect_and_bind_on_an_existing_socket_are_refused() -> None:
    # A socket made before the guard (here: bypassing the patched constructor) is still refused.
    sock = socket.socket.__new__(socket.socket)
    with pytest.raises(UnitTestGuardError, match="connect"):
        sock.connect(("127.0.0.1", 9))
    with pytest.raises(UnitTestGuardError, match="bind"):
        sock.bind(("127.0.0.1", 0))


def test_unit_tests_do_not_carry_the_integration_marker(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("integration") is None
