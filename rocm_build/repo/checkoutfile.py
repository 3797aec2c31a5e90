"""Reading a file out of a checkout: a regular file inside it, of a sane size, or a refusal.

A checkout's files are the upstream project's (or a fork's, or a developer's), and git commits
symbolic links as they are: a ``version.txt``, ``related_commits`` or Triton pin file may be a
link to ``/proc/self/environ``, ``/etc/shadow`` or ``/dev/zero``. rocm-build reads such a file
only when its real path stays inside the checkout's real path, it is a regular file (opened with
``O_NOFOLLOW|O_NONBLOCK``, checked with ``fstat``: no FIFO is waited on, no device read) and it
holds at most ``LIMIT`` bytes; anything else is a one-line ``UnsafeInput`` (exit 15) naming the
file, and nothing of it is read. A link that stays inside the checkout is followed.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from rocm_build.common import statefile
from rocm_build.common.errors import UnsafeInput

__all__ = ["LIMIT", "read_text"]

#: More than any file rocm-build reads from a checkout (a version, a pin, a requirements list,
#: a pyproject.toml) holds.
LIMIT = 1 << 20
_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def _shown(text: str) -> str:
    clean = "".join(c if c.isprintable() else "?" for c in text)
    return clean if len(clean) <= 120 else clean[:117] + "..."


def _refuse(path: Path, what: str, problem: str) -> UnsafeInput:
    return UnsafeInput(
        f"{what} {_shown(str(path))} {problem}; rocm-build reads only regular files inside a "
        "checkout (nothing was read from it): make it a regular file in the checkout, or check "
        "the project out again"
    )


def read_text(checkout: Path, rel: str | Path, what: str, *, limit: int = LIMIT) -> str | None:
    """The text (UTF-8, bad bytes replaced) of the file ``rel`` in the checkout ``checkout``,
    or None when there is none (a dangling link counts as none). ``what`` names it in
    messages ("torch's version file")."""
    path = checkout / rel
    root = checkout.resolve()
    real = path.resolve()
    if real != root and root not in real.parents:
        if not os.path.lexists(path):
            return None  # a dangling link out of it is no file either
        raise _refuse(path, what, f"leads out of the checkout (to {_shown(str(real))})")
    try:
        fd = os.open(real, _FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # made a link since it was resolved
            raise _refuse(path, what, "was swapped for a symbolic link while it was read") from None
        if exc.errno == errno.ENOTDIR:
            return None
        raise _refuse(path, what, f"cannot be opened ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = statefile.file_kind(mode)
            raise _refuse(path, what, f"is {kind}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit and (chunk := os.read(fd, 1 << 16)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise _refuse(path, what, f"is larger than {limit >> 10} KiB")
    return b"".join(chunks).decode("utf-8", "replace")
