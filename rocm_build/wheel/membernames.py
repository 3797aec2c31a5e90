"""Member names of a wheel (or any archive to be unpacked into one folder): which are safe.

Part of the checked reader (:mod:`rocm_build.wheel.wheelread`), which imports it from here.
"""

from __future__ import annotations

import posixpath
import re
import stat
from collections.abc import Iterable

from rocm_build.common.errors import UnsafeInput

__all__ = ["check_member_names", "shown"]

_DRIVE = re.compile(r"[A-Za-z]:")
_REGULAR_TYPES = (0, stat.S_IFREG, stat.S_IFDIR)


def shown(text: str) -> str:
    """``text`` on one line: control characters escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _name_problem(name: str) -> str | None:
    if not name:
        return "has an empty name"
    if not name.isprintable():
        return "has a control character in its name"
    if "\\" in name:
        return "has a backslash in its name"
    if name.startswith("/"):
        return "is an absolute path"
    if _DRIVE.match(name):
        return "starts with a drive letter"
    for part in (name[:-1] if name.endswith("/") else name).split("/"):
        if part in ("", "."):
            return "has an empty or '.' part in its path"
        if part == "..":
            return "has a '..' part in its path"
    return None


def check_member_names(wheel: str, members: Iterable[tuple[str, int]]) -> None:
    """Refuse a wheel whose members could not be extracted safely into one folder.

    ``members``: (name, external_attr) from the central directory. One pass, no member read:
    absolute paths, ``..``, ``.`` or empty parts, backslashes, drive letters, control
    characters, duplicate names, a name that is both a file and a folder, and symlinks or other
    special files (their type in the high 16 bits of ``external_attr``) raise
    :class:`UnsafeInput` naming the member.
    """
    seen: set[str] = set()
    files: set[str] = set()
    folders: set[str] = set()

    def unsafe(name: str, why: str) -> UnsafeInput:
        return UnsafeInput(
            f"{wheel}: member '{shown(name)}' {why}: the wheel is unsafe; do not install it, "
            "rebuild it (or download it again from a source you trust)"
        )

    for name, attr in members:
        if why := _name_problem(name):
            raise unsafe(name, why)
        if name in seen:
            raise unsafe(name, "appears twice")
        seen.add(name)
        kind = stat.S_IFMT(attr >> 16)
        if kind == stat.S_IFLNK:
            raise unsafe(name, "is a symbolic link")
        if kind not in _REGULAR_TYPES:
            raise unsafe(name, "is a special file (device, pipe or socket)")
        path = name.rstrip("/")
        if name.endswith("/"):
            if path in files:
                raise unsafe(path, "is both a file and a folder")
            folders.add(path)
        else:
            if path in folders:
                raise unsafe(path, "is both a file and a folder")
            files.add(path)
        parent = posixpath.dirname(path)
        while parent and parent not in folders:
            if parent in files:
                raise unsafe(parent, "is both a file and a folder")
            folders.add(parent)
            parent = posixpath.dirname(parent)
