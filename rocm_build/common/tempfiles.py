"""Temporary outputs next to the real ones: named, locked, swept, and one-line write errors.

Every temporary file or folder rocm-build writes beside an output (a wheel being written, an
extract or scratch folder) is named ``.<name>.rocm-build-<pid>-<random>.tmp`` and holds an
``flock`` lock for as long as its process lives: it is made under a ``.new`` name, locked, and
only then renamed to its ``.tmp`` name. A run killed at any instant (SIGKILL, OOM, power cut)
leaves it behind, and the runs that write to the folder remove it, when they start and again
when they end (a killed run may still be going away when the next one starts): ``sweep``
removes the entries of this user whose lock is free, whatever their pid now names (a reused
pid, another pid namespace, a zombie). So it never touches the temporary output of a run still
going (in another terminal, or in a container sharing the folder), nor a link or another
user's file that merely looks like one.

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
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from rocm_build.common import faults
from rocm_build.common.errors import FileAccessError

__all__ = [
    "PATTERN",
    "access_error",
    "atomic_copy",
    "check_folder",
    "create_file",
    "folder",
    "is_full",
    "refuse_file",
    "sweep",
    "swept",
    "writing",
]

log = logging.getLogger(__name__)

PATTERN = re.compile(r"^\.(?P<name>.+)\.rocm-build-(?P<pid>\d{1,10})-[^./]+\.(?P<state>tmp|new)$")
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_DENIED = {errno.EACCES, errno.EPERM, errno.EROFS}
_NOT_A_FOLDER = {errno.ENOTDIR, errno.EEXIST}


def _prefix(name: str) -> str:
    return f".{name}.rocm-build-{os.getpid()}-"


def _claim(made: str, fd: int) -> Path:
    """Lock ``new`` (a ``.new`` name, just made) and rename it to its ``.tmp`` name: a ``.tmp``
    name is locked from the instant it exists, so the sweep may take a free lock for a gone
    writer (whatever its pid says: reused, another pid namespace, a zombie)."""
    new = Path(made)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return new.rename(new.with_suffix(".tmp"))
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            if new.is_dir():
                new.rmdir()
            else:
                new.unlink()
        raise


def create_file(final: Path) -> tuple[int, Path]:
    """A locked temporary file beside ``final`` (same folder, so a rename puts it in place).

    Returns the open descriptor (the lock lasts until it is closed) and the path."""
    fd, new = tempfile.mkstemp(prefix=_prefix(final.name), suffix=".new", dir=final.parent)
    return fd, _claim(new, fd)


@contextlib.contextmanager
def folder(parent: Path, name: str) -> Iterator[Path]:
    """A locked temporary folder in ``parent``, removed on the way out."""
    new = tempfile.mkdtemp(prefix=_prefix(name), suffix=".new", dir=parent)
    fd = os.open(new, os.O_RDONLY | os.O_DIRECTORY)
    path = _claim(new, fd)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def _pid_gone(pid: int) -> bool:
    """Whether no process ``pid`` runs here: none, or a zombie (dead, not yet reaped)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return True
    except PermissionError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False
    return state[state.rfind(")") + 2 : state.rfind(")") + 3] in ("Z", "X")


def _removable(entry: os.DirEntry[str], match: re.Match[str]) -> bool:
    """A name of ours that this user owns; a ``.new`` name also needs its writer gone (its lock
    is taken an instant after it is made)."""
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    if st.st_uid != os.geteuid() or not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return False
    return match["state"] == "tmp" or _pid_gone(int(match["pid"]))


def sweep(where: Path) -> list[Path]:
    """Remove the temporary files and folders that killed runs left in ``where``: those of
    this user whose lock is free (their writer is gone: killed, a zombie, or done)."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(where))
    except OSError:
        return removed
    for entry in entries:
        match = PATTERN.match(entry.name)
        if match is None or not _removable(entry, match):
            continue
        if _remove_unlocked(Path(entry.path), entry.is_dir(follow_symlinks=False)):
            removed.append(Path(entry.path))
    for path in removed:
        log.info("removed %s (left by an interrupted run)", path)
    return removed


def _remove_unlocked(path: Path, is_dir: bool) -> bool:
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | (os.O_DIRECTORY if is_dir else 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # its writer is alive (perhaps in another pid namespace)
        # The name must still be what was locked (not swapped for a link since).
        st, now = os.fstat(fd), path.lstat()
        if (st.st_dev, st.st_ino) != (now.st_dev, now.st_ino):
            return False
        if is_dir:
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def swept(where: Path) -> Iterator[None]:
    """Sweep ``where`` before and after the block: a run killed just before this one may still
    be going away (holding its lock, or a zombie) when the first sweep looks."""
    sweep(where)
    try:
        yield
    finally:
        sweep(where)


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


def refuse_file(path: Path, what: str = "output folder") -> None:
    """A one-line error if ``path`` is there but not a folder (a plan's check: nothing made)."""
    if path.exists() and not path.is_dir():
        raise FileAccessError(
            f"the {what} {path} is a file, not a folder; move it away or choose another folder"
        )


def check_folder(path: Path, what: str = "output folder") -> None:
    """Create ``path`` if missing; a one-line error if it is a file or cannot be made."""
    refuse_file(path, what)
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


def remove_stale(folder: Path, prefix: str) -> list[Path]:
    """Remove what killed runs left in ``folder`` under names starting with ``prefix`` (temp
    files, staging folders). The caller holds the lock that makes them nobody's; another user's
    entries are not this run's to remove, whatever their name."""
    removed: list[Path] = []
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        if not path.name.startswith(prefix):
            continue
        try:
            if path.lstat().st_uid != os.geteuid():
                log.warning("leaving %s alone: another user's, though named as ours", path)
                continue
        except FileNotFoundError:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed.append(path)
        log.info("removed %s (left by an interrupted run)", path)
    return removed
