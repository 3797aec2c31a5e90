"""What a checkout's working tree holds beyond its commits: the uncommitted state a build sees.

A wheel built from a checkout is made of its HEAD, its submodules' HEADs (patches and hipify
move them off the commit the parent records, so the parent's pointer says nothing) and whatever
is uncommitted in any of those repositories: edits to tracked files, staged or not, and
untracked files that no ignore rule hides. ``read`` asks git for each repository's status
(``--untracked-files=all``, the submodules' pointers ignored: each submodule is asked itself)
and reduces the changed paths' contents to a fingerprint, so two builds of the same dirty state
are the same input and any other edit is a new one.

What a project's own build writes into its checkout (``git.BUILD_OUTPUTS``: ``build/``,
``dist/``, ...) is no one's work: untracked paths under those names are left out, as the
checkout's ``info/exclude`` leaves them out once ``build`` has listed them there.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rocm_build.repo import git

__all__ = ["WorkTree", "build_output", "parse_status", "read"]

_CHUNK = 1 << 20


@dataclass(frozen=True)
class WorkTree:
    """A checkout's state: ``head`` ("" = not a git checkout), each submodule's HEAD, and the
    uncommitted paths (relative to the checkout, a submodule's with its path in front, sorted)
    with ``fingerprint``, the sha256 of their contents ("" when there are none)."""

    head: str = ""
    submodules: tuple[tuple[str, str], ...] = ()
    paths: tuple[str, ...] = ()
    fingerprint: str = ""

    @property
    def dirty(self) -> bool:
        return bool(self.paths)

    def as_key(self) -> dict[str, object]:
        """What a build's inputs record of the checkout."""
        return {"head": self.head, "submodules": dict(self.submodules), "dirty": self.fingerprint}


def parse_status(out: str) -> list[tuple[str, str]]:
    """``(XY, path)`` per entry of ``git status --porcelain -z`` (a rename's or copy's source,
    the second field of its entry, is left out: the new path is what holds the content)."""
    fields = out.split("\0")
    entries: list[tuple[str, str]] = []
    i = 0
    while i < len(fields):
        item = fields[i]
        i += 1
        if len(item) < 4:
            continue
        code, path = item[:2], item[3:]
        if code[0] in "RC":
            i += 1  # the source path
        entries.append((code, path))
    return entries


def build_output(path: str) -> bool:
    """Whether an untracked ``path`` lies under a name of ``git.BUILD_OUTPUTS``."""
    parts = path.split("/")
    if len(parts) > 1 and (
        parts[0] in ("build", "dist", ".eggs") or parts[0].endswith(".egg-info")
    ):
        return True
    return "__pycache__" in parts[:-1]


def _content(path: Path) -> str:
    """One path's state for the fingerprint: gone, a link's target, a folder (a repository
    nested without being a submodule), or a file's mode bits and sha256."""
    try:
        st = path.lstat()
    except OSError:
        return "gone"
    if stat.S_ISLNK(st.st_mode):
        return f"link {path.readlink()}"
    if not stat.S_ISREG(st.st_mode):
        return "folder" if stat.S_ISDIR(st.st_mode) else "special"
    digest = hashlib.sha256()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        return f"unreadable {exc.errno}"
    with os.fdopen(fd, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return f"file {st.st_mode & 0o111:o} {digest.hexdigest()}"


def _changed(repo: Path) -> list[str]:
    res = git.run(
        repo,
        "--no-optional-locks",  # a read-only question must not rewrite the index
        "status",
        "--porcelain",
        "-z",
        "--ignore-submodules=all",
        "--untracked-files=all",
    )
    return [
        path.rstrip("/")
        for code, path in parse_status(res.stdout)
        if not (code == "??" and build_output(path))
    ]


def read(source: Path) -> WorkTree:
    """The state of the checkout at ``source`` and of every submodule in it (git's status of
    each; the contents of what it names, hashed). A folder that is not its own repository is
    ``WorkTree()``: git would answer for a parent's."""
    if not git.is_repo(source):
        return WorkTree()
    subs = git.submodules(source)
    paths: list[str] = []
    for prefix, repo in [("", source), *((s.path + "/", source / s.path) for s in subs)]:
        paths += [prefix + p for p in _changed(repo)]
    paths.sort()
    fingerprint = ""
    if paths:
        digest = hashlib.sha256()
        for rel in paths:
            digest.update(f"{rel}\0{_content(source / rel)}\0".encode("utf-8", "surrogateescape"))
        fingerprint = digest.hexdigest()
    return WorkTree(
        head=git.head(source),
        submodules=tuple((s.path, s.commit) for s in subs),
        paths=tuple(paths),
        fingerprint=fingerprint,
    )
