"""The unit-test guard: unit tests start no processes and open no sockets.

``tests/unit/conftest.py`` applies :func:`install` to every unit test. It is an enforcement, not a
stand-in: every entry point that would start a process or open a socket raises
:class:`UnitTestGuardError` instead, naming what was attempted, so a test that needs a real
process or socket fails loudly and belongs in ``tests/integration``.
"""

from __future__ import annotations

import _posixsubprocess  # type: ignore[import-not-found]
import os
import socket
import subprocess
from typing import Any, NoReturn

import pytest

HINT = "unit tests start no processes and open no sockets; move this test to tests/integration"


class UnitTestGuardError(RuntimeError):
    """A unit test tried to start a process or open a socket."""


def _refuse(what: str) -> Any:
    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise UnitTestGuardError(f"{what} was called: {HINT}")

    return refuse


# (owner, attribute, what the error names). Popen.__init__ catches every user of the class, also
# code that imported ``Popen`` by name; fork_exec is what Popen and multiprocessing's spawn call.
PROCESS_ENTRY_POINTS: tuple[tuple[object, str, str], ...] = (
    (subprocess.Popen, "__init__", "subprocess.Popen"),
    (_posixsubprocess, "fork_exec", "_posixsubprocess.fork_exec"),
    (os, "fork", "os.fork"),
    (os, "forkpty", "os.forkpty"),
    (os, "posix_spawn", "os.posix_spawn"),
    (os, "posix_spawnp", "os.posix_spawnp"),
    (os, "system", "os.system"),
)
SOCKET_ENTRY_POINTS: tuple[tuple[object, str, str], ...] = (
    (socket.socket, "__init__", "socket.socket (creating a socket)"),
    (socket.socket, "connect", "socket.connect"),
    (socket.socket, "connect_ex", "socket.connect_ex"),
    (socket.socket, "bind", "socket.bind"),
)


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every process and socket entry point raise for the rest of the test."""
    for owner, name, what in PROCESS_ENTRY_POINTS + SOCKET_ENTRY_POINTS:
        if hasattr(owner, name):
            monkeypatch.setattr(owner, name, _refuse(what))
