"""One file lock per thing two runs must not change at once: a checkout, a patch folder, a wheel.

The locks are ``flock`` locks, so the kernel drops them when their process dies (a SIGKILL or a
power cut leaves no stale lock to clean up). The lock files live in one folder per user, named
after the real path of what they guard, so two runs with different working folders or settings
still exclude each other, and nothing is added to the user's folders.

A second run waits, saying what it waits for and who holds it; with ``no_wait`` it stops at once
with ``Locked`` (exit 13).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from .errors import Locked

__all__ = ["hold", "lock_dir"]

log = logging.getLogger(__name__)


def lock_dir() -> Path:
    """Where the lock files live: ``$XDG_RUNTIME_DIR/rocm-build-locks`` or the user's cache."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "rocm-build-locks"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "rocm-build" / "locks"


def _key(target: Path) -> Path:
    # The real path (of the parent, when the target does not exist yet) names the lock, so
    # 'src/torch', './src/torch' and a symlink to it are one lock.
    target = target.absolute()
    real = target.resolve() if target.exists() else target.parent.resolve() / target.name
    digest = hashlib.sha256(os.fsencode(real)).hexdigest()[:16]
    return lock_dir() / f"{target.name[:60]}-{digest}.lock"


@contextlib.contextmanager
def hold(target: Path, what: str, *, no_wait: bool = False) -> Iterator[None]:
    """Hold the lock on ``target`` (``what`` names it in messages: 'the checkout src/torch')."""
    path = _key(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "another run"
            if no_wait:
                msg = (
                    f"{what} is in use by {holder}; wait for it to finish, or run again "
                    "without --no-wait to wait"
                )
                raise Locked(msg) from None
            log.warning("waiting for %s (in use by %s)", what, holder)
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"rocm-build pid {os.getpid()} ({' '.join(sys.argv[1:3])})".encode(), 0)
        yield
    finally:
        os.close(fd)
