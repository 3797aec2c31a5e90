"""Patch series: layout, apply (with a conflict report), save (deterministic, all or nothing).

Layout under ``<patches-dir>/<patchset>/<project-subfolder>/``::

    base/0001-*.patch                      the project's own repository, before hipify
    hipified/0001-*.patch                  ... after hipify
    <submodule-path>/base/0001-*.patch     a submodule (path as in the project's tree)
    <submodule-path>/hipified/0001-*.patch
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocm_build.common import faults, statefile, tempfiles
from rocm_build.common.errors import ConfigError, FileAccessError, PatchConflict, RocmBuildError
from rocm_build.common.packagedata import data_folder
from rocm_build.repo import git
from rocm_build.sources import journal

__all__ = [
    "HIPIFY_SUBJECT",
    "HIPIFY_TAG",
    "STAGES",
    "UPSTREAM_TAG",
    "PatchFile",
    "SaveResult",
    "apply_series",
    "check_save_root",
    "find_root",
    "installed_dir",
    "list_series",
    "recover",
    "save",
    "series_root",
    "shipped_dir",
]

log = logging.getLogger(__name__)

STAGES = ("base", "hipified")
UPSTREAM_TAG = "ROCM_BUILD_UPSTREAM"
HIPIFY_TAG = "ROCM_BUILD_HIPIFY"
HIPIFY_SUBJECT = "rocm-build: hipify result (generated; do not submit)"


@dataclass(frozen=True, order=True)
class PatchFile:
    repo: str  # "." for the project's own repository, else the submodule path
    stage: str
    path: Path
    sha256: str

    @property
    def rel(self) -> str:
        parts = [] if self.repo == "." else [self.repo]
        return "/".join([*parts, self.stage, self.path.name])

    def as_json(self) -> dict[str, str]:
        return {"repo": self.repo, "stage": self.stage, "file": self.rel, "sha256": self.sha256}


def series_root(patches_dir: Path, patchset: str, subfolder: str) -> Path:
    return patches_dir / patchset / subfolder


def installed_dir() -> Path:
    """The series rocm-build ships: package data of ``rocm_build.sources`` (its
    ``shipped_patches/`` folder, ``<train>/<project>/``), in a checkout, an editable install
    and a regular one alike. It belongs to rocm-build: save-patches never writes there."""
    return data_folder(
        "rocm_build.sources", "shipped_patches", "the shipped patch series", "git can apply from"
    )


def shipped_dir() -> Path | None:
    """The series rocm-build ships (:func:`installed_dir`); None when the folder is missing."""
    folder = installed_dir()
    return folder if folder.is_dir() else None


def find_root(
    patches_dir: Path, patchset: str, subfolder: str, *, shipped: Path | None = None
) -> Path:
    """The series folder a checkout applies: the user's own (``patches_dir``) when it has one
    for this patchset and project, else the one rocm-build ships (``shipped``, by default
    ``shipped_dir()``), else the user's (absent: no series)."""
    own = series_root(patches_dir, patchset, subfolder)
    if own.exists() or own.is_symlink():
        return own
    ship = shipped if shipped is not None else shipped_dir()
    if ship is not None and series_root(ship, patchset, subfolder).is_dir():
        return series_root(ship, patchset, subfolder)
    return own


def check_save_root(root: Path) -> None:
    """Refuse to save a series into the installed package's copy of the shipped series: it
    belongs to the installation (pip replaces it on upgrade), not to the user."""
    installed = installed_dir().resolve()
    target = root.resolve()
    if target == installed or installed in target.parents:
        msg = (
            f"save-patches would write into {installed}, the series installed with rocm-build; "
            "pass --patches-dir (or set patches_dir) to a folder of your own: its series "
            "replace the shipped ones for the same patchset and project"
        )
        raise FileAccessError(msg)


def list_series(root: Path) -> tuple[PatchFile, ...]:
    """Every patch under ``root``, in application order within each (repo, stage)."""
    if not root.is_dir():
        return ()
    found: list[PatchFile] = []
    for path in sorted(root.rglob("*.patch")):
        rel = path.relative_to(root)
        if any(part.startswith(".") for part in rel.parts):
            continue  # staging folders of an interrupted save
        stage = path.parent.name
        if stage not in STAGES:
            msg = (
                f"patch {path} is not in a base/ or hipified/ folder; move it to "
                f"{root}/[<submodule-path>/]base/ or .../hipified/"
            )
            raise ConfigError(msg)
        repo_rel = path.parent.parent.relative_to(root).as_posix()
        found.append(PatchFile(repo_rel or ".", stage, path, statefile.file_sha256(path)))
    return tuple(sorted(found, key=lambda p: (p.repo != ".", p.repo, p.stage, p.path.name)))


def by_repo(series: Sequence[PatchFile], stage: str) -> dict[str, list[PatchFile]]:
    out: dict[str, list[PatchFile]] = {}
    for patch in series:
        if patch.stage == stage:
            out.setdefault(patch.repo, []).append(patch)
    return out


def apply_series(src: Path, project: str, repo: str, patches: Sequence[PatchFile]) -> None:
    """Apply one repo's series as commits, or raise ``PatchConflict`` with the repo restored."""
    target = src if repo == "." else src / repo
    where = f"{project}" if repo == "." else f"submodule {repo} of {project}"
    if not git.is_repo(target):
        msg = (
            f"patches for {where} ({patches[0].path.parent}) but {target} is not a checked-out "
            "submodule; fix the folder name or remove the series"
        )
        raise ConfigError(msg)
    for p in patches:
        _mails_in(p, where)  # every file is a patch, before any is applied
    before = git.head(target)
    # One `git am` per file: a kill between two leaves whole commits, each a step to resume.
    for patch in patches:
        failure = git.am(target, [patch.path])
        if failure is not None:
            git.run(target, "reset", "-q", "--hard", before)
            raise git.conflict(patch.path, where, failure)
        faults.point("checkout.patch-applied")
    log.info("applied %d patch(es) to %s", len(patches), where)


# A diff git can apply starts with one of these (a git diff, a plain unified diff, a hunk).
_DIFF_START = re.compile(rb"^(?:diff --git |--- .*\r?\n\+\+\+ |@@ -|GIT binary patch)", re.M)
# The first line of each mail `git format-patch` writes; git am counts mails, not files.
_MAIL_START = re.compile(rb"^From [0-9a-f]{40} ", re.M)


def _mails_in(patch: PatchFile, where: str) -> int:
    """How many patches (mails) ``patch`` holds; ``PatchConflict`` naming the file if it is
    empty or holds no diff (git am would report it as another file, or give no reason)."""
    data = patch.path.read_bytes()
    if not data.strip():
        why = "is empty"
    elif not _DIFF_START.search(data):
        why = "is not a patch: it holds no diff (git am would find nothing to apply)"
    else:
        return max(1, len(_MAIL_START.findall(data)))
    msg = (
        f"patch {patch.path} {why}; nothing of its series was applied to {where}: "
        "remove the file, or restore it (`rocm-build save-patches` writes a whole series)"
    )
    raise PatchConflict(msg)


@dataclass(frozen=True)
class SaveResult:
    root: Path
    changed: bool
    counts: Mapping[str, int] = field(default_factory=dict)  # "<repo>/<stage>" -> patches
    removed: bool = False


def _ranges(repo: Path) -> list[tuple[str, str]]:
    """(stage, rev range) pairs to save for one repository."""
    upstream = git.tag_commit(repo, UPSTREAM_TAG)
    if upstream is None:
        return []
    hipify = git.tag_commit(repo, HIPIFY_TAG)
    if hipify is None:
        return [("base", f"{upstream}..HEAD")]
    if git.run(repo, "merge-base", "--is-ancestor", hipify, "HEAD", check=False).status != 0:
        msg = (
            f"{repo}: HEAD no longer contains the {HIPIFY_TAG} commit (rebased?); "
            "put your commits back on top of it, or check out again with --force"
        )
        raise RocmBuildError(msg)
    base_end = hipify
    if hipify != upstream and git.commit_subject(repo, hipify) == HIPIFY_SUBJECT:
        base_end = f"{hipify}~1"
    return [("base", f"{upstream}..{base_end}"), ("hipified", f"{hipify}..HEAD")]


def _read_tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not any(s.startswith(".") for s in p.relative_to(root).parts)
    }


def _is_series_file(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) >= 2 and parts[-2] in STAGES and parts[-1].endswith(".patch")


def save(src: Path, repos: Sequence[str], root: Path) -> SaveResult:
    """Write the series of ``src`` (``"."`` and each submodule path in ``repos``) to ``root``.

    The new series is built in a staging folder beside ``root``; if it equals what is there,
    nothing is touched; otherwise it is swapped in (``_swap_in``), so that at every instant
    ``root`` is the whole old series or the whole new one. The caller holds the patch folder's
    lock."""
    root.parent.mkdir(parents=True, exist_ok=True)
    recover(root)
    faults.point("save-patches.recovered")
    staging = root.parent / f".{root.name}.new-{os.getpid()}"
    try:
        counts: dict[str, int] = {}
        for repo in repos:
            target = src if repo == "." else src / repo
            ranges = _ranges(target)
            faults.point("save-patches.ranges")
            for stage, rev_range in ranges:
                _warn_pointer_changes(target, rev_range)
                out = staging if repo == "." else staging / repo
                faults.point("save-patches.before-format-patch")
                written = git.format_patch(target, rev_range, out / stage)
                faults.point("save-patches.after-format-patch")
                if written:
                    counts[f"{repo}/{stage}"] = len(written)
        new = _read_tree(staging)
        old = _read_tree(root)
        old_series = {k: v for k, v in old.items() if _is_series_file(k)}
        faults.point("save-patches.compared")
        if new == old_series:
            shutil.rmtree(staging, ignore_errors=True)
            return SaveResult(root, changed=False, counts=counts)
        # Keep the user's other files (notes, READMEs) and unchanged patches' timestamps.
        for rel, data in old.items():
            dest = staging / rel
            if not _is_series_file(rel) or new.get(rel) == data:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(root / rel, dest)
        faults.point("save-patches.kept-others")
        _prune_empty(staging)
        empty = not any(staging.rglob("*"))
        faults.point("save-patches.staged")
        _swap_in(staging, root, empty=empty)
        faults.point("save-patches.swapped")
        shutil.rmtree(staging, ignore_errors=True)
        return SaveResult(root, changed=True, counts=counts, removed=empty)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


_SWAP = "save-patches swap record"


def _swap_file(root: Path) -> Path:
    return root.parent / f".{root.name}.swap.json"


def _swap_in(staging: Path, root: Path, *, empty: bool) -> None:
    """Make ``staging`` the series at ``root`` in one atomic step, where the system allows.

    - no series yet: one rename; no series any more: one rename away, then removal;
    - else ``renameat2(RENAME_EXCHANGE)`` swaps the two folders at once and the old series,
      now under the staging name, is removed (a kill before that leaves a staging folder the
      next run removes);
    - where the exchange is not supported: two renames, with the intent written first, so
      that the next run (``recover``) completes a swap a kill cut in half."""
    old = root.parent / f".{root.name}.old-{os.getpid()}"
    if not root.exists():
        if not empty:
            staging.rename(root)
        return
    if empty:
        root.rename(old)
        faults.point("save-patches.removed")
        shutil.rmtree(old)
        return
    if journal.exchange(staging, root):
        faults.point("save-patches.exchanged")
        shutil.rmtree(staging)
        return
    record = {"root": root.name, "new": staging.name, "old": old.name}
    statefile.write_json(_swap_file(root), record, _SWAP)
    faults.point("save-patches.swap-journaled")
    root.rename(old)
    faults.point("save-patches.half-swapped")
    staging.rename(root)
    statefile.remove(_swap_file(root), _SWAP)
    faults.point("save-patches.swap-done")
    shutil.rmtree(old)


def recover(root: Path) -> None:
    """Finish what a killed save-patches left beside ``root``: complete a half-done two-rename
    swap, remove staging and old folders. The caller holds the patch folder's lock.

    The swap record is a state file (``statefile``: a link, a FIFO, a folder or another user's
    file in its place is refused, exit 14) and is acted on only when it is one this tool wrote:
    it names this series' own staging and old folders, beside it."""
    record = _swap_file(root)
    try:
        data = statefile.read_json(record, _SWAP)
    except FileNotFoundError:
        data = None
    except ValueError:
        data = {}  # there, but damaged: not acted on
    if data is not None:
        if not os.path.lexists(root):
            _finish_swap(root, record, _swap_names(root, data))
        statefile.remove(record, _SWAP)
    for prefix in (f".{root.name}.new-", f".{root.name}.old-"):
        tempfiles.remove_stale(root.parent, prefix)
    tempfiles.sweep(root.parent)  # the record's temporary file, if a kill cut its writing short


def _swap_names(root: Path, data: object) -> tuple[Path, Path] | None:
    """The new and the old series a swap record names, or None when it is not one that
    ``_swap_in`` wrote: the root's name, and two folder names of this series' own beside it."""
    if not isinstance(data, dict) or data.get("root") != root.name:
        return None
    names = (data.get("new"), data.get("old"))
    for name, kind in zip(names, ("new", "old"), strict=True):
        if not isinstance(name, str) or not name.startswith(f".{root.name}.{kind}-"):
            return None
        if "/" in name or "\0" in name:
            return None
    return root.parent / str(names[0]), root.parent / str(names[1])


def _own_folder(path: Path) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()


def _finish_swap(root: Path, record: Path, names: tuple[Path, Path] | None) -> None:
    """The old series was moved away: finish the swap with the new one if it is whole (it was
    complete before the intent was written), else put the old one back."""
    for folder in names or ():
        if _own_folder(folder):
            folder.rename(root)
            log.info("completed the swap of %s that an interrupted save-patches began", root)
            return
    left = sorted(
        p.name
        for p in root.parent.iterdir()
        if p.name.startswith((f".{root.name}.new-", f".{root.name}.old-"))
    )
    if names is None and left:
        msg = (
            f"the patch folder {root} is missing and {record} is not a swap record rocm-build "
            f"wrote, so which of {', '.join(left)} beside it holds the series is not known: "
            f"rename the one to keep to {root.name}, remove {record.name} and run again"
        )
        raise FileAccessError(msg)


def _warn_pointer_changes(repo: Path, rev_range: str) -> None:
    raw = git.run(repo, "log", "--format=", "--raw", "--no-renames", rev_range).stdout
    moved = sorted({ln.split("\t", 1)[1] for ln in raw.splitlines() if ln.startswith(":160000")})
    if moved:
        log.warning(
            "%s: commits in %s move submodule pointers (%s); pointers are not saved (the "
            "submodules' own commits are): commit with `git commit -a` or name the files",
            repo,
            rev_range,
            ", ".join(moved),
        )


def _prune_empty(top: Path) -> None:
    if not top.is_dir():
        return
    for path in sorted((p for p in top.rglob("*") if p.is_dir()), reverse=True):
        if not any(path.iterdir()):
            path.rmdir()
