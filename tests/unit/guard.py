"""The unit-test guard: unit tests start no processes and open no sockets; a test may also forbid
filesystem writes (:func:`forbid_writes`, the stage contract's test).

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


def _refuse(what: str, hint: str = HINT) -> Any:
    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise UnitTestGuardError(f"{what} was called: {hint}")

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


# --- writes: only where a test asks for it (the stage contract: a plan writes nothing) ----------

WRITE_MODES = frozenset("wax+")
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: Every os call that makes, changes or removes a file or folder (pathlib and shutil go through
#: these: ``Path.mkdir`` is ``os.mkdir``, ``Path.touch`` is ``os.open``, ``rmtree`` is
#: ``os.rmdir``/``os.unlink``).
WRITE_ENTRY_POINTS = (
    *("mkdir", "makedirs", "rename", "renames", "replace", "remove", "unlink", "rmdir"),
    *("removedirs", "symlink", "link", "chmod", "lchmod", "chown", "lchown", "truncate"),
    *("utime", "mkfifo", "mknod", "setxattr", "removexattr"),
)


def forbid_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every filesystem write raise for the rest of the test: folders made or removed, files
    opened for writing (``open``, ``io.open``, ``os.open`` with a writing flag), renamed, linked,
    changed. Opening for reading stays allowed."""
    import builtins
    import io
    from pathlib import Path

    for name in WRITE_ENTRY_POINTS:
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse(f"os.{name} (a filesystem write)", WRITE_HINT))
    monkeypatch.setattr(Path, "mkdir", _refuse("Path.mkdir (a filesystem write)", WRITE_HINT))
    real_open, real_os_open = io.open, os.open

    def checked_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if WRITE_MODES & set(mode):
            raise UnitTestGuardError(f"open({file!r}, {mode!r}) writes; {WRITE_HINT}")
        return real_open(file, mode, *args, **kwargs)

    def checked_os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & WRITE_FLAGS:
            raise UnitTestGuardError(f"os.open({path!r}) with a writing flag; {WRITE_HINT}")
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", checked_open)
    monkeypatch.setattr(io, "open", checked_open)
    monkeypatch.setattr(os, "open", checked_os_open)


WRITE_HINT = "this code must not write (a stage's plan writes nothing: execute does)"
