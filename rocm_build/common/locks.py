"""One file lock per thing two runs must not change at once: a checkout, a patch folder, a wheel.

The locks are ``flock`` locks, so the kernel drops them when their process dies (a SIGKILL or a
power cut leaves no stale lock to clean up). The lock files live in one folder per user, named
after the real path of what they guard, so two runs with different working folders or settings
still exclude each other, and nothing is added to the user's folders.

A second run waits, saying what it waits for and who holds it; with ``no_wait`` it stops at once
with ``Locked`` (exit 13).

The folder and its files are treated as hostile: the folder must be a real folder (not a link)
that this user owns and no one else may write to (it is made 0700; anything else is refused
with a one-line ``FileAccessError``, exit 14), so no one can plant a link there that makes a
root run write elsewhere. Lock files are opened with ``O_NOFOLLOW`` relative to the folder's
descriptor, created with ``O_EXCL`` and 0600, and must be regular files of this user. The text
they hold (who holds the lock) has credentials masked; read back, it is shown only sanitized.
A run removes its lock file when it is done (under the lock, so a waiting run notices that the
file it locked is gone and takes the new one).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

from rocm_build.common.errors import FileAccessError, Locked
from rocm_build.common.masking import mask_url
from rocm_build.common.statefile import ancestor_problem

__all__ = [
    "check_cache_folder",
    "check_private_folder",
    "hold",
    "lock_dir",
    "open_lock_file",
    "sanitize",
]

log = logging.getLogger(__name__)

_HOLDER_MAX = 200  # characters of a holder's text that are shown
_ENV_HINT = "or set XDG_RUNTIME_DIR to a folder of your own"


def lock_dir() -> Path:
    """Where the lock files live: ``$XDG_RUNTIME_DIR/rocm-build-locks`` or the user's cache."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "rocm-build-locks"
    cache = os.environ.get("XDG_CACHE_HOME")
    if not cache:
        try:
            cache = str(Path.home() / ".cache")
        except (RuntimeError, KeyError) as exc:
            raise FileAccessError(
                "no folder for lock files: HOME is not set and this user has no home folder; "
                "set HOME, XDG_CACHE_HOME or XDG_RUNTIME_DIR"
            ) from exc
    return Path(cache) / "rocm-build" / "locks"


def sanitize(text: str, limit: int = _HOLDER_MAX) -> str:
    """``text`` as it may be shown on a terminal: control characters (escape sequences
    included) become ``?``, and it is cut to ``limit`` characters."""
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def check_private_folder(fd: int, path: Path, what: str, hint: str) -> None:
    """Refuse the open folder ``fd`` (at ``path``) unless it is this user's alone: owned by
    them and writable by no group or other user. ``hint`` says where else to point the tool."""
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        raise FileAccessError(
            f"the {what} {path} belongs to another user (uid {st.st_uid}), who could plant links "
            f"in it: remove it, {hint}"
        )
    if st.st_mode & 0o022:
        raise FileAccessError(
            f"others may write to the {what} {path} (mode {stat.filemode(st.st_mode)}), and could "
            f"plant links in it: run 'chmod 700 {path}', {hint}"
        )
    if problem := ancestor_problem(path):
        raise FileAccessError(
            f"the {what} {path} {problem}: another user could put a folder of theirs in its "
            f"place: give that folder the sticky bit (chmod +t), {hint}"
        )


def check_cache_folder(folder: Path, what: str, hint: str) -> None:
    """Refuse (``FileAccessError``, exit 14) a cache folder that is not a folder, that another
    user owns or may write to, or that is a link another user made: links planted in it could
    make the cache use, or a clean-up delete, what is not the cache's. A missing folder is fine
    (the caller makes it 0700). The one rule for caches (the deflate cache, ``rocm debian``'s)."""
    try:
        link = folder.lstat()
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise FileAccessError(
            f"the {what} {folder} cannot be opened as a folder ({exc.strerror}): {hint}"
        ) from exc
    try:
        # A link of this user's (a cache moved to a bigger disk) is followed; one that another
        # account planted is not.
        if stat.S_ISLNK(link.st_mode) and link.st_uid != os.geteuid():
            raise FileAccessError(
                f"the {what} {folder} is a link that another user (uid {link.st_uid}) "
                f"made: remove it, or {hint}"
            )
        check_private_folder(fd, folder, what, hint)
    finally:
        os.close(fd)


def _open_folder(path: Path) -> int:
    """The lock folder, made 0700 if missing, opened without following a link; checked."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            problem = f"lock folder {path} is a symbolic link"
            fix = f"remove it (rocm-build makes its own), {_ENV_HINT}"
        elif exc.errno in (errno.ENOTDIR, errno.EEXIST):
            problem = f"lock folder {path} (or a folder above it) is a file, not a folder"
            fix = f"move it away, {_ENV_HINT}"
        else:
            problem = f"lock folder {path} cannot be made or opened ({exc.strerror})"
            fix = f"fix its permissions, {_ENV_HINT}"
        raise FileAccessError(f"the {problem}: {fix}") from exc
    try:
        check_private_folder(fd, path, "lock folder", _ENV_HINT)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _key(target: Path) -> str:
    # The real path (of the parent, when the target does not exist yet) names the lock, so
    # 'src/torch', './src/torch' and a symlink to it are one lock.
    target = target.absolute()
    real = target.resolve() if target.exists() else target.parent.resolve() / target.name
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
    return f"{target.name[:60]}-{digest}.lock"


_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def open_lock_file(dir_fd: int, name: str, shown: Path) -> int:
    """The lock file ``name`` in the folder ``dir_fd``, created (O_EXCL, 0600) if missing and
    opened without following a link or truncating it; a link, a file of another type or another
    user's is refused (``FileAccessError``). For a lock that lives beside what it guards."""
    return _open_lock(dir_fd, name, shown)


def _open_lock(dir_fd: int, name: str, shown: Path) -> int:
    """The lock file ``name`` in the folder, created (O_EXCL, 0600) if missing; a link, a file
    of another type or another user's is refused."""
    while True:
        try:
            fd = os.open(name, _FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            try:
                fd = os.open(name, _FLAGS | os.O_CREAT | os.O_EXCL, 0o600, dir_fd=dir_fd)
            except FileExistsError:
                continue  # another run made it first: open theirs
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise FileAccessError(
                    f"the lock file {shown} is a symbolic link, not a lock rocm-build made: "
                    "remove it"
                ) from exc
            raise FileAccessError(
                f"cannot open the lock file {shown} ({exc.strerror}): fix the lock folder's "
                f"permissions, {_ENV_HINT}"
            ) from exc
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            return fd
        os.close(fd)
        what = "another user's file" if stat.S_ISREG(st.st_mode) else "not a regular file"
        raise FileAccessError(
            f"the lock file {shown} is {what}, not a lock rocm-build made: remove it"
        )


def _still_there(fd: int, dir_fd: int, name: str) -> bool:
    """Whether the locked file is still the one the folder names (the run before may have
    removed it on its way out, after this run opened it)."""
    try:
        now = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    st = os.fstat(fd)
    return (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        text = ""
    return sanitize(text) or "another run"


def _acquire(dir_fd: int, name: str, shown: Path, what: str, no_wait: bool) -> int:
    """The open lock file, locked."""
    warned = False
    while True:
        fd = _open_lock(dir_fd, name, shown)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                if no_wait:
                    msg = (
                        f"{what} is in use by {holder}; wait for it to finish, or run again "
                        "without --no-wait to wait"
                    )
                    raise Locked(msg) from None
                if not warned:
                    log.warning("waiting for %s (in use by %s)", what, holder)
                    warned = True
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _still_there(fd, dir_fd, name):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _note_holder(fd: int) -> None:
    # Best effort (the lock works without it, e.g. on a full disk); masked, as argv may hold a
    # URL with a token (--origin=NAME=URL).
    text = mask_url(f"rocm-build pid {os.getpid()} ({' '.join(sys.argv[1:3])})")
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, text.encode("utf-8", "replace"), 0)


@contextlib.contextmanager
def hold(target: Path, what: str, *, no_wait: bool = False) -> Iterator[None]:
    """Hold the lock on ``target`` (``what`` names it in messages: 'the checkout src/torch')."""
    folder = lock_dir()
    name = _key(target)
    dir_fd = _open_folder(folder)
    try:
        fd = _acquire(dir_fd, name, folder / name, what, no_wait)
        try:
            _note_holder(fd)
            yield
        finally:
            # Removed while still locked: a run waiting on this file sees it gone and retries.
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
            os.close(fd)
    finally:
        os.close(dir_fd)
