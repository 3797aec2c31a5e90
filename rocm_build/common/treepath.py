"""What may be read out of a ROCm tree: paths that stay inside it, and files this user can read.

A tree is read-only input, but it is the user's folder, not ours: a symlink in it may point
anywhere (a private key, another ROCm install). :class:`TreeGuard` resolves each path a wheel
would take and refuses what resolves outside the tree, unless the user named that place.
:func:`reading` turns a permission problem into one line naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rocm_build.common.errors import BundleError, FileAccessError, UnsafeInput

__all__ = [
    "BUNDLE_HINT",
    "TreeGuard",
    "denied",
    "outside_link",
    "reading",
    "refuse_outside_links",
    "walk_files",
]

#: How a ``bundle`` user allows a folder outside the tree (its flag, setting and variable).
BUNDLE_HINT = "--allow-outside DIR (bundle.allow_outside, ROCM_BUILD_BUNDLE_ALLOW_OUTSIDE)"


def denied(exc: OSError, what: str) -> FileAccessError:
    """The one-line error for a file or folder this user may not read."""
    name = exc.filename or what
    return FileAccessError(
        f"cannot read {name} ({what}): permission denied for this user; give it read access "
        "(chmod a+rX) or run as a user who can read it"
    )


@contextmanager
def reading(what: str) -> Iterator[None]:
    """Raise :func:`denied` instead of a ``PermissionError`` inside the block."""
    try:
        yield
    except PermissionError as exc:
        raise denied(exc, what) from None


def _within(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@dataclass(frozen=True)
class TreeGuard:
    """Paths of a tree that may go into a wheel: those whose real path is inside the tree's real
    path or inside one of the ``allow`` folders (real paths too). ``hint``: how the user of
    the command at hand allows a folder (each command has its own flags and settings)."""

    root: Path
    allow: tuple[Path, ...] = ()
    hint: str = BUNDLE_HINT

    @classmethod
    def of(cls, root: Path, allow: Sequence[Path] = (), hint: str = BUNDLE_HINT) -> TreeGuard:
        return cls(root.resolve(), tuple(Path(a).resolve() for a in allow), hint)

    def allowed(self, real: Path) -> bool:
        return _within(real, self.root) or any(_within(real, a) for a in self.allow)

    def check(self, path: Path) -> Path:
        """``path``'s real path, if it may be read; else a ``BundleError`` naming the link."""
        real = path.resolve()
        if self.allowed(real):
            return real
        link, target = self._culprit(path, real)
        shown = link.relative_to(self.root) if _within(link, self.root) else link
        where = (
            f"{self.root} ({', '.join(map(str, self.allow))} allowed)"
            if self.allow
            else (str(self.root))
        )
        raise BundleError(
            f"{shown} in the ROCm tree is a symlink to {target}, outside the tree {where}: "
            "refusing to put it in a wheel; if it belongs there, allow that folder with "
            + self.hint
        )

    def _culprit(self, path: Path, real: Path) -> tuple[Path, Path]:
        """The symlink on ``path`` (followed hop by hop from the tree's root) whose own target
        is outside, and that target."""
        for _ in range(40):  # the kernel's limit on links in a path
            try:
                parts = path.relative_to(self.root).parts
            except ValueError:
                return path, real
            here = self.root
            for i, part in enumerate(parts):
                here = here / part
                if here.is_symlink():
                    hop = Path(os.path.normpath(here.parent.resolve() / here.readlink()))
                    if not self.allowed(hop):
                        return here, hop
                    path = hop.joinpath(*parts[i + 1 :])
                    break
            else:
                return path, real
        return path, real


def walk_files(top: Path, guard: TreeGuard | None, what: str) -> list[Path]:
    """Every file under the folder ``top``, sorted, following symlinked folders and files that
    stay inside the tree; a link that leads outside stops the walk (``guard.check``). A folder
    reached twice through links (a loop) is walked once."""
    found: list[Path] = []
    seen: set[Path] = set()
    stack = [top]
    while stack:
        folder = stack.pop()
        real = guard.check(folder) if guard else folder.resolve()
        if real in seen:
            continue
        seen.add(real)
        with reading(what), os.scandir(folder) as entries:
            items = sorted(entries, key=lambda e: e.name)
        for entry in items:
            path = Path(entry.path)
            with reading(what):
                is_dir = entry.is_dir()
                is_file = not is_dir and entry.is_file()
            if is_dir:
                stack.append(path)
            elif is_file:
                if guard is not None and entry.is_symlink():
                    guard.check(path)
                found.append(path)
    return sorted(found)


def outside_link(link: Path, root: Path) -> str | None:
    """Why the symlink ``link`` (somewhere under ``root``) is unsafe to keep in a tree made from
    an archive or a package, or None: its target is absolute (it would name a file of whatever
    machine the tree is used on), or it leads out of ``root`` (followed for real, chains of
    links and ``..`` through linked folders included)."""
    target = link.readlink()
    if target.is_absolute():
        return f"an absolute symlink to {target}"
    if not _within(link.resolve(), root.resolve()):
        return f"a symlink to {target}, which leads out of the tree"
    return None


def refuse_outside_links(root: Path, what: str) -> None:
    """The one rule for trees rocm-build unpacks (``rocm fetch`` tarballs, ``rocm debian``
    packages): every symlink stays inside; else an ``UnsafeInput`` naming the link."""
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(folder, name)
            if not path.is_symlink():
                continue
            why = outside_link(path, root)
            if why is not None:
                shown = path.relative_to(root)
                raise UnsafeInput(
                    f"{what}: {shown} is {why}; refusing to put it in a ROCm tree "
                    "(links must stay inside the tree); use another archive or package"
                )
