"""State files: what one run writes and a later run reads back, replaces or deletes (the checkout
journal, the source manifest, the ``all`` stamps, the build report, the download cache's stamp,
the build venv's state file, save-patches' swap record), and the digests and file facts they
record (at the end).

Anyone who may write to the folder could have put something else under such a name, so:

- a name that holds anything but a regular file this user owns and no other user may write to (a
  symbolic link, a folder, a FIFO, a device, another user's file) is refused with a one-line
  ``FileAccessError`` (exit 14) naming it, whether the run reads, replaces or removes it: nothing
  is read through a link, no FIFO is opened to block the run, nothing of another user's is
  trusted or replaced (git refuses another user's repository the same way);
- it is read with ``O_NOFOLLOW|O_NONBLOCK`` after an ``lstat``, and the open file is checked
  again (a swap between the two is caught); what it holds is the caller's to judge
  (``read_json`` raises ``ValueError`` for bytes that are no JSON, ``FileNotFoundError`` when
  there is none);
- it is written under a temporary name of its own making (``tempfiles.create_file``: ``O_EXCL``,
  locked, so a killed run's leftover is swept by the next write), fsynced and renamed into place,
  never through a fixed temporary name someone could have planted a link at first.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rocm_build.common import tempfiles
from rocm_build.common.errors import FileAccessError

__all__ = [
    "LIMIT",
    "ancestor_problem",
    "check",
    "check_folder",
    "content_sha256",
    "facts_unchanged",
    "file_facts",
    "file_kind",
    "file_sha256",
    "fsync_folder",
    "own_folder",
    "read_bytes",
    "read_json",
    "remove",
    "settings_digest",
    "stat_facts",
    "write_bytes",
    "write_json",
]

#: More than any state file rocm-build writes holds: a bigger one is not read (damaged content).
LIMIT = 64 << 20
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFDIR: "a folder",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a device",
    stat.S_IFBLK: "a device",
}


def file_kind(mode: int, default: str = "not a regular file") -> str:
    """What a file of ``mode`` is, for messages: "a folder", "a FIFO", ..."""
    return _KINDS.get(stat.S_IFMT(mode), default)


def _problem(st: os.stat_result) -> tuple[str, str]:
    """What makes ``st`` no state file of this user's alone, and what to do ("" when nothing)."""
    mode = st.st_mode
    if not stat.S_ISREG(mode):
        return f"is {file_kind(mode)}", "move it away"
    if st.st_uid != os.geteuid():
        return f"belongs to another user (uid {st.st_uid})", "move it away"
    if mode & 0o002:
        return f"may be written by any user (mode {stat.filemode(mode)})", "remove it"
    return "", ""


def _refuse(path: Path, what: str, problem: str, fix: str) -> FileAccessError:
    return FileAccessError(
        f"the {what} {path} {problem}, not a file rocm-build wrote; nothing was read from it or "
        f"written through it: {fix} (rocm-build writes its own) and run again"
    )


def _os_error(path: Path, what: str, exc: OSError, doing: str) -> FileAccessError:
    return FileAccessError(
        f"cannot {doing} the {what} {path} ({exc.strerror or exc}): fix the permissions of its "
        "folder, or move away a file that stands where a folder above it belongs"
    )


def check(path: Path, what: str) -> os.stat_result | None:
    """``path``'s own status (a link's, not its target's), or None when nothing is there;
    ``FileAccessError`` when what is there is not a state file of this user's alone."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _os_error(path, what, exc, "read") from exc
    problem, fix = _problem(st)
    if problem:
        raise _refuse(path, what, problem, fix)
    return st


def _folder_problem(st: os.stat_result) -> str:
    mode = st.st_mode
    if not stat.S_ISDIR(mode):
        return f"is {file_kind(mode, 'a file')}, not a folder"
    if st.st_uid != os.geteuid():
        return f"belongs to another user (uid {st.st_uid})"
    if mode & 0o002 and not mode & stat.S_ISVTX:
        return f"may be written by any user (mode {stat.filemode(mode)})"
    return ""


def ancestor_problem(folder: Path) -> str:
    """A folder above ``folder`` that any user may write to without the sticky bit (as
    ``/tmp`` has): another user could rename ``folder`` away and plant their own."""
    for parent in folder.absolute().parents:
        try:
            mode = parent.stat().st_mode
        except OSError:
            continue
        if mode & 0o002 and not mode & stat.S_ISVTX:
            return f"lies in {parent}, which any user may write to (mode {stat.filemode(mode)})"
    return ""


def check_folder(folder: Path, what: str) -> os.stat_result | None:
    """The status of a folder rocm-build makes for its own state files (a checkout's journal
    folder, the ``all`` stamps, a download's cache folder), or None when there is none; a link, a
    file, another user's folder, one any user may write to, or one inside a folder any user may
    write to (without the sticky bit) at its name is refused (exit 14), so no state file is
    read, written or swept through a folder planted in its place."""
    try:
        st: os.stat_result | None = folder.lstat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _os_error(folder, what, exc, "read") from exc
    if st is not None and (problem := _folder_problem(st)):
        raise FileAccessError(
            f"the {what} {folder} {problem}: not a folder rocm-build made; nothing was read from "
            "it or written into it: move it away (rocm-build makes its own) and run again"
        )
    if problem := ancestor_problem(folder):
        raise FileAccessError(
            f"the {what} {folder} {problem}: another user could put a folder of theirs in its "
            "place; nothing was read from it or written into it: use a folder whose parents only "
            "you (or root) may write to, or give that folder the sticky bit (chmod +t)"
        )
    return st


def own_folder(folder: Path, what: str) -> Path:
    """``check_folder``, making the folder (and those above it) when it is not there."""
    if check_folder(folder, what) is None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise _os_error(folder, what, exc, "make") from exc
        check_folder(folder, what)  # what another process put there in between
    return folder


def read_bytes(path: Path, what: str, limit: int = LIMIT) -> bytes:
    """The bytes of the state file ``path`` (``what`` names it in messages). Raises
    ``FileNotFoundError`` when there is none, ``ValueError`` when it is larger than ``limit``."""
    if check(path, what) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    try:
        fd = os.open(path, _READ)
    except FileNotFoundError:
        raise
    except OSError as exc:  # replaced by a link since the check (ELOOP), or unreadable
        check(path, what)
        raise _os_error(path, what, exc, "read") from exc
    try:
        problem, fix = _problem(os.fstat(fd))
        if problem:
            raise _refuse(path, what, problem, fix)
        chunks: list[bytes] = []
        size = 0
        while size <= limit and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise _os_error(path, what, exc, "read") from exc
    finally:
        os.close(fd)
    if size > limit:
        raise ValueError(f"larger than {limit} bytes")
    return b"".join(chunks)


def read_json(path: Path, what: str) -> Any:
    """The JSON value in the state file ``path``: ``FileNotFoundError`` when there is none,
    ``ValueError`` when it holds no JSON (not UTF-8, not JSON, nested too deep, too large);
    whether the value has the types the caller wrote is the caller's to check."""
    data = read_bytes(path, what)
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError as exc:
        raise ValueError("nested too deep") from exc


def fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (where the file system can sync a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot sync a folder; the rename is still atomic
    finally:
        os.close(fd)


def write_bytes(path: Path, data: bytes, what: str, *, mode: int = 0o644) -> None:
    """Put ``data`` at ``path`` atomically and durably: after a kill or a power cut the name holds
    the old or the new content. What is there now must be a state file of this user's alone
    (``check``): a link, a folder or another user's file is refused, not replaced."""
    check(path, what)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tempfiles.sweep(path.parent)  # what killed writers left
        fd, tmp = tempfiles.create_file(path)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            os.fsync(fd)
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            os.close(fd)  # after the rename: the lock keeps a sweep off the temporary name
    except OSError as exc:
        raise _os_error(path, what, exc, "write") from exc
    fsync_folder(path.parent)


def write_json(path: Path, data: Any, what: str, *, sort_keys: bool = True) -> None:
    """``data`` as indented JSON at ``path``, as ``write_bytes`` writes."""
    text = json.dumps(data, indent=2, sort_keys=sort_keys, default=str) + "\n"
    write_bytes(path, text.encode("utf-8"), what)


def remove(path: Path, what: str) -> None:
    """Remove the state file ``path`` if there is one; refused as ``check`` refuses."""
    if check(path, what) is None:
        return
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise _os_error(path, what, exc, "remove") from exc
    fsync_folder(path.parent)


# --- digests and file facts ---------------------------------------------------------------------
#
# The one way a digest or a file's stat facts are taken: a whole file's sha256, the digest of
# settings (what decides an output: a different value makes it stale), and the (path, size,
# mtime) facts that tell whether a file an output was made from has changed since.


def file_sha256(path: Path) -> str:
    """The sha256 of the file's bytes, hex."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def settings_digest(settings: Any) -> str:
    """The sha256 (hex) of ``settings`` as JSON with sorted keys (``str()`` for what JSON has no
    type for): the same for the same values in any order."""
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def file_facts(path: Path) -> list[Any]:
    """``[path, size, mtime_ns, inode, ctime_ns]``: what :func:`facts_unchanged` compares. A
    rewrite that keeps the size and sets the mtime back (``os.utime``), or another file renamed
    into place, still changes the inode or the ctime, which only root can set."""
    return [str(path), *stat_facts(path.stat())]


def stat_facts(st: os.stat_result) -> list[int]:
    """The facts of :func:`file_facts` but the path, from a stat (or an open file's fstat)."""
    return [st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def facts_unchanged(facts: Sequence[Sequence[Any]]) -> bool:
    """Whether the files these :func:`file_facts` name are as they were (a gone file is not;
    nor is a record of other shapes: an older tool's, or crafted)."""
    try:
        entries = [(Path(path), list(rest)) for path, *rest in facts]
    except (TypeError, ValueError):  # a record of other shapes (crafted): not these files
        return False
    for path, rest in entries:
        try:
            st = path.stat()
        except OSError:
            return False
        if rest != stat_facts(st):
            return False
    return True


#: (device, facts) -> sha256 of the file they describe: a file is hashed once per run
_DIGESTS: dict[tuple[int, ...], str] = {}


def content_sha256(path: Path, fd: int | None = None) -> str:
    """The sha256 (hex) of the file at ``path`` (or open as ``fd``), hashed once per run: while
    its device, inode, size, mtime and ctime stay the same its bytes do."""
    with contextlib.ExitStack() as stack:
        if fd is None:
            fd = stack.enter_context(path.open("rb")).fileno()
        before = os.fstat(fd)
        key = (before.st_dev, *stat_facts(before))
        if (found := _DIGESTS.get(key)) is not None:
            return found
        digest = hashlib.sha256()
        offset = 0
        while block := os.pread(fd, 1 << 20, offset):
            digest.update(block)
            offset += len(block)
        after = os.fstat(fd)
        if (after.st_dev, *stat_facts(after)) == key:
            _DIGESTS[key] = digest.hexdigest()
        return digest.hexdigest()
