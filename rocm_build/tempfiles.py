"""Temporary outputs next to the real ones: named, locked, swept, and one-line write errors.

Every temporary file or folder rocm-build writes beside an output (a wheel being written, an
extract or scratch folder) is named ``.<name>.rocm-build-<pid>-<random>.tmp`` and holds an
``flock`` lock for as long as its process lives. A run killed at any instant (SIGKILL, OOM,
power cut) leaves it behind, and the next run that writes to the folder removes it: ``sweep``
removes those whose lock is free and whose pid is not alive, so it never touches the temporary
output of a run still going (in another terminal, or in a container sharing the folder).

``writing`` turns what the kernel says when an output cannot be written (disk full, file too
large, permission, read-only file system, not a folder) into a one-line ``FileAccessError``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from . import faults
from .errors import FileAccessError

__all__ = [
    "PATTERN",
    "access_error",
    "atomic_copy",
    "check_folder",
    "create_file",
    "folder",
    "is_full",
    "sweep",
    "writing",
]

log = logging.getLogger(__name__)

PATTERN = re.compile(r"^\.(?P<name>.+)\.rocm-build-(?P<pid>\d+)-[^./]+\.tmp$")
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}
_NOT_A_FOLDER = {errno.ENOTDIR, errno.EEXIST}


def _prefix(name: str) -> str:
    return f".{name}.rocm-build-{os.getpid()}-"


def create_file(final: Path) -> tuple[int, Path]:
    """A locked temporary file beside ``final`` (same folder, so a rename puts it in place).

    Returns the open descriptor (the lock lasts until it is closed) and the path."""
    fd, tmp = tempfile.mkstemp(prefix=_prefix(final.name), suffix=".tmp", dir=final.parent)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd, Path(tmp)


@contextlib.contextmanager
def folder(parent: Path, name: str) -> Iterator[Path]:
    """A locked temporary folder in ``parent``, removed on the way out."""
    path = Path(tempfile.mkdtemp(prefix=_prefix(name), suffix=".tmp", dir=parent))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep(where: Path) -> list[Path]:
    """Remove the temporary files and folders that killed runs left in ``where``: only those
    with rocm-build's name format, owned by this user, whose pid is gone and whose lock is free."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(where))
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return removed
    for entry in entries:
        match = PATTERN.match(entry.name)
        if match is None or _pid_alive(int(match.group("pid"))):
            continue
        path = Path(entry.path)
        try:
            flags = os.O_RDONLY | os.O_NOFOLLOW
            fd = os.open(path, flags | (os.O_DIRECTORY if entry.is_dir() else 0))
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():
                continue  # another user's, whatever its name says
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its writer is alive (in another pid namespace)
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed.append(path)
        finally:
            os.close(fd)
    for path in removed:
        log.info("removed %s (left by an interrupted run)", path)
    return removed


def is_full(exc: OSError) -> bool:
    """True if ``exc`` says the disk (or the quota, or the file size limit) is full."""
    return exc.errno in _FULL


def _mb(size: float) -> str:
    return f"{size / 1e6:,.0f} MB" if size >= 1e6 else f"{size / 1e6:.1f} MB"


Needed = int | Callable[[], int] | None


def access_error(
    exc: OSError, target: Path, *, needed: Needed = None, doing: str = "writing"
) -> FileAccessError | None:
    """The one-line error for ``exc`` raised while writing ``target``; None if it is not one.

    ``needed``: about how many bytes ``target`` needs (or a function that estimates it)."""
    where = target.parent
    if exc.errno in _FULL:
        if callable(needed):
            needed = needed()
        free = shutil.disk_usage(where).free if where.is_dir() else 0
        if exc.errno == errno.EFBIG:
            what = f"a file in {where} cannot grow any larger (file size limit)"
        else:
            what = f"no space left in {where}"
        need = f"about {_mb(needed)} needed, {_mb(free)} free" if needed else f"{_mb(free)} free"
        return FileAccessError(
            f"{what} while {doing} {target.name} ({need}); the previous file is intact and "
            "nothing partial was left: free some space or choose another --output-dir"
        )
    name = Path(exc.filename) if isinstance(exc.filename, str) else None
    if name is not None and where not in (name, *name.parents):
        return None  # an input that cannot be read: not this folder's problem
    if exc.errno in _DENIED:
        return FileAccessError(
            f"cannot write to {where} ({exc.strerror}) while {doing} {target.name}: fix its "
            "permissions or choose another --output-dir"
        )
    if exc.errno in _NOT_A_FOLDER:
        return FileAccessError(
            f"cannot write {target.name}: {name or where} or a folder above it is a file, not a "
            "folder; move it away or choose another --output-dir"
        )
    return None


@contextlib.contextmanager
def writing(target: Path, *, needed: Needed = None, doing: str = "writing") -> Iterator[None]:
    """Turn a write failure for ``target`` into a one-line ``FileAccessError``."""
    try:
        yield
    except OSError as exc:
        err = access_error(exc, target, needed=needed, doing=doing)
        if err is None:
            raise
        raise err from exc


def check_folder(path: Path, what: str = "output folder") -> None:
    """Create ``path`` if missing; a one-line error if it is a file or cannot be made."""
    if path.exists() and not path.is_dir():
        raise FileAccessError(
            f"the {what} {path} is a file, not a folder; move it away or choose another folder"
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FileAccessError(
            f"cannot create the {what} {path} ({exc.strerror}); choose another folder"
        ) from exc


def atomic_copy(src: Path, dest: Path) -> None:
    """Copy ``src`` to ``dest`` through a temporary file beside it: ``dest`` is old or new."""
    with writing(dest, needed=src.stat().st_size):
        fd, tmp = create_file(dest)
        try:
            with os.fdopen(fd, "wb") as out, src.open("rb") as inp:
                _copy(inp, out)
                faults.point("output.copy-written")
                os.fsync(out.fileno())
                tmp.chmod(0o644)
                tmp.replace(dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    faults.point("output.copy-renamed")


def _copy(inp: BinaryIO, out: BinaryIO) -> None:
    # sendfile copies in the kernel (a torch wheel is gigabytes); a plain copy where it cannot.
    offset = 0
    try:
        while sent := os.sendfile(out.fileno(), inp.fileno(), offset, 1 << 30):
            offset += sent
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP) or offset:
            raise
        shutil.copyfileobj(inp, out, 1 << 20)
        out.flush()
