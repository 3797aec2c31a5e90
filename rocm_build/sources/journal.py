"""Intent records, so a run killed at any instant is finished by the next run of the same command.

Before each step of a checkout, the step's name and the HEADs it starts from are written to
``<src-dir>/.rocm-build-journal/<project>.json`` (temp file, fsync, rename, fsync of the folder).
The next run that finds the record knows that a step of its own was interrupted there. The
record is a file anyone can write, so it proves nothing by itself: what may be discarded is
decided by content (``resume``), and a record that is not of the types this version writes
stops the run with one line (exit 6). It is read and written as a state file (``statefile``): a
link, a FIFO, a folder or another user's file in its place stops the run (exit 14).

``exchange`` swaps two folders in one step (``renameat2(RENAME_EXCHANGE)``, Linux), which is how
save-patches replaces a series so that the folder is always the old or the new series. Python's
standard library has no binding for it and no maintained package offers one, so it is called
through ctypes here.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import platform
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.common import statefile, tempfiles
from rocm_build.common.errors import DirtyCheckout, Locked
from rocm_build.repo import git

__all__ = [
    "JOURNAL_DIR",
    "CheckoutJournal",
    "exchange",
]

log = logging.getLogger(__name__)

JOURNAL_DIR = ".rocm-build-journal"
FORMAT = 1
_WHAT = "checkout journal"
_FOLDER = "checkout journal folder"


# --- renameat2 -----------------------------------------------------------------------------------

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_SYS_RENAMEAT2 = {"x86_64": 316, "aarch64": 276}


def _renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    func = getattr(libc, "renameat2", None)
    if func is not None:
        func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
        func.argtypes.append(ctypes.c_uint)
        func.restype = ctypes.c_int
        return func
    number = _SYS_RENAMEAT2.get(platform.machine())
    if number is None:
        return None
    syscall = libc.syscall
    syscall.restype = ctypes.c_long

    def call(olddirfd: int, old: bytes, newdirfd: int, new: bytes, flags: int) -> int:
        return int(
            syscall(
                ctypes.c_long(number),
                ctypes.c_int(olddirfd),
                ctypes.c_char_p(old),
                ctypes.c_int(newdirfd),
                ctypes.c_char_p(new),
                ctypes.c_uint(flags),
            )
        )

    return call


def exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` (both must exist) in one atomic step. False where the
    system or the file system cannot (not Linux, old kernel, EINVAL): the caller falls back."""
    # The fault suite's way to test the fallback on a system that has the exchange.
    func = None if os.environ.get("RB_FAULT_NO_EXCHANGE") else _renameat2()
    if func is None:
        return False
    res = func(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if res == 0:
        statefile.fsync_folder(a.parent)
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM):
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


# --- the checkout journal -------------------------------------------------------------------------


def _journal_problem(data: Any) -> str:
    """What makes ``data`` not a journal this version wrote ("" when nothing does)."""
    if not isinstance(data, dict):
        return "not an object"
    if data.get("format") != FORMAT:
        return f"format {data.get('format')!r}, not {FORMAT}"
    if not isinstance(data.get("created", False), bool):
        return "'created' is not true or false"
    target = data.get("target", "")
    if not isinstance(target, str) or (target and not git.SHA_RE.match(target)):
        return "'target' is not a commit id"
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        return "'steps' is not a list of steps"
    for step in steps:
        if not isinstance(step, dict) or not isinstance(step.get("step"), str):
            return "a step has no name"
        heads = step.get("heads", {})
        if not isinstance(heads, dict) or not all(
            isinstance(rel, str) and isinstance(c, str) and (not c or git.SHA_RE.match(c))
            for rel, c in heads.items()
        ):
            return f"the heads of step {step['step']!r} are not commit ids"
    return ""


def _bad_journal(path: Path, project: str, problem: str) -> DirtyCheckout:
    msg = (
        f"{path} is not a checkout journal rocm-build wrote ({problem}), so nothing in "
        f"{path.parent.parent / project} is taken for rocm-build's own unfinished work; "
        f"remove that file and run `rocm-build checkout {project}` again"
    )
    return DirtyCheckout(msg)


@dataclass
class CheckoutJournal:
    """The intent record of one project's checkout (see the module's docstring)."""

    path: Path
    data: dict[str, Any]

    @staticmethod
    def location(src_dir: Path, project: str) -> Path:
        return src_dir / JOURNAL_DIR / f"{project}.json"

    @classmethod
    def read(cls, src_dir: Path, project: str) -> CheckoutJournal | None:
        path = cls.location(src_dir, project)
        if statefile.check_folder(path.parent, _FOLDER) is None:
            return None
        tempfiles.sweep(path.parent)  # a killed write's temporary file
        try:
            data = statefile.read_json(path, _WHAT)
        except FileNotFoundError:
            return None
        except ValueError as exc:
            # Written atomically, so this is not ours half-written: someone else's, or damaged.
            raise _bad_journal(path, project, type(exc).__name__) from None
        problem = _journal_problem(data)
        if problem:
            raise _bad_journal(path, project, problem)
        return cls(path, data)

    @classmethod
    def begin(
        cls, src_dir: Path, project: str, *, created: bool, target: str, heads: Mapping[str, str]
    ) -> CheckoutJournal:
        journal = cls(
            cls.location(src_dir, project),
            {
                "format": FORMAT,
                "project": project,
                "created": created,
                "target": target,
                "pid": os.getpid(),
                "steps": [],
            },
        )
        journal.step("begin", heads)
        return journal

    def step(self, name: str, heads: Mapping[str, str] | None = None) -> None:
        """Record that step ``name`` is about to be taken (from ``heads``, rel -> commit)."""
        self.data["steps"].append({"step": name, "heads": dict(heads or {})})
        statefile.own_folder(self.path.parent, _FOLDER)
        statefile.write_json(self.path, self.data, _WHAT)

    def step_heads(self, index: int = -1) -> dict[str, str]:
        """The HEADs recorded with step ``index`` (the last one by default)."""
        steps = self.data.get("steps") or [{}]
        return {rel: c for rel, c in dict(steps[index].get("heads", {})).items() if c}

    @property
    def last_step(self) -> str:
        steps = self.data.get("steps") or [{}]
        return str(steps[-1].get("step", ""))

    def heads(self) -> tuple[dict[str, set[str]], dict[str, str]]:
        """Every HEAD recorded per repo, and the latest recorded one per repo."""
        seen: dict[str, set[str]] = {}
        last: dict[str, str] = {}
        for step in self.data.get("steps", []):
            for rel, commit in dict(step.get("heads", {})).items():
                if commit:
                    seen.setdefault(rel, set()).add(str(commit))
                    last[rel] = str(commit)
        if self.data.get("target"):
            seen.setdefault(".", set()).add(str(self.data["target"]))
        return seen, last

    def clear(self) -> None:
        if statefile.check_folder(self.path.parent, _FOLDER) is not None:
            statefile.remove(self.path, _WHAT)


def _git_dirs(repos: Sequence[tuple[str, Path]]) -> list[Path]:
    out: list[Path] = []
    for _rel, path in repos:
        dotgit = path / ".git"
        if dotgit.is_dir():
            out.append(dotgit)
        elif dotgit.is_file():
            text = dotgit.read_text(encoding="utf-8", errors="replace").strip()
            if text.startswith("gitdir:"):
                out.append((path / text[len("gitdir:") :].strip()).resolve())
    return out


def live_git(src: Path) -> list[int]:
    """Ids of git processes working in ``src`` (Linux ``/proc``; elsewhere none are seen)."""
    proc_root = Path("/proc")
    if not proc_root.is_dir():
        return []
    top = src.resolve()
    found: list[int] = []
    for entry in proc_root.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
            if not comm.startswith("git"):
                continue
            cwd = (entry / "cwd").readlink()
        except OSError:
            continue
        if cwd == top or top in cwd.parents:
            found.append(int(entry.name))
    return found


def clear_git_leftovers(
    src: Path, repos: Sequence[tuple[str, Path]], *, wait: float = 5.0, am: bool = True
) -> None:
    """Remove what a killed git step of ours left: lock files and an ``am`` in progress.

    ``am``: the ``am`` in progress too (kept until its patch was read: it proves what the killed
    ``git am`` was writing). Only called when the journal says our own git step was running;
    the checkout lock means no
    other rocm-build runs here, and no git process may still work in the checkout (a child of
    the killed run that has not died yet is given ``wait`` seconds)."""
    deadline = time.monotonic() + wait
    while pids := live_git(src):
        if time.monotonic() > deadline:
            msg = (
                f"git (pid {', '.join(map(str, pids))}) is still working in {src}; "
                "wait for it to end (or stop it) and run again"
            )
            raise Locked(msg)
        time.sleep(0.1)
    for gdir in _git_dirs(repos):
        for lock in [*gdir.glob("*.lock"), *gdir.glob("refs/**/*.lock")]:
            log.info("removing %s (left by an interrupted rocm-build git step)", lock)
            lock.unlink(missing_ok=True)
        for leftover in ("rebase-apply", "rebase-merge") if am else ():
            if (gdir / leftover).is_dir():
                log.info("removing %s (an interrupted git am of rocm-build)", gdir / leftover)
                shutil.rmtree(gdir / leftover, ignore_errors=True)


def remove_object_temps(repos: Sequence[tuple[str, Path]]) -> None:
    """Remove the half-written files a killed fetch left in the object stores of ``repos``: a
    pack ``index-pack`` was receiving (``objects/pack/tmp_*``; as large as the fetch got) and
    loose objects being written (``tmp_obj_*``). git itself removes them only in a gc two weeks
    later. Only called when the journal says our own git step was interrupted, after
    ``clear_git_leftovers`` saw no git process working in the checkout."""
    for gdir in _git_dirs(repos):
        objects = gdir / "objects"
        for tmp in [*objects.glob("pack/tmp_*"), *objects.glob("??/tmp_obj_*")]:
            log.info("removing %s (left by an interrupted rocm-build fetch)", tmp)
            tmp.unlink(missing_ok=True)


def drop_half_cloned(repo: Path) -> None:
    """Submodules a killed ``git submodule update`` left half cloned (no HEAD commit, or a
    module folder without its work tree): removed, so the resumed update clones them again.
    Only called when the journal says our own checkout was interrupted."""
    gitdirs = _git_dirs([(".", repo)])
    for name, rel in git.gitmodules(repo):  # names and paths git would refuse are refused there
        path = _inside(repo, rel)
        modules = _inside(gitdirs[0] / "modules", name) if gitdirs else None
        has_git = path is not None and (path / ".git").exists()
        verify = ["rev-parse", "-q", "--verify", "HEAD^{commit}"]
        if path is not None and has_git and git.run(path, *verify, check=False).status == 0:
            drop_half_cloned(path)
            continue
        if has_git or (modules is not None and modules.exists()):
            log.info("removing the half-cloned submodule %s (an interrupted update)", repo / rel)
            if path is not None and has_git:
                shutil.rmtree(path, ignore_errors=True)
            if modules is not None:
                shutil.rmtree(modules, ignore_errors=True)


def _inside(top: Path, rel: str) -> Path | None:
    """``top/rel`` if it provably lies inside ``top``: no component on the way is a link and the
    resolved path is below ``top``'s; else None (nothing there is deleted)."""
    if top.is_symlink():
        return None
    here = top
    for part in rel.split("/"):
        if part in ("", ".", ".."):
            return None
        here = here / part
        if here.is_symlink():
            return None
    try:
        here.resolve().relative_to(top.resolve())
    except (ValueError, OSError):
        return None
    return here if here != top else None


def stale_git_state(repos: Sequence[tuple[str, Path]]) -> str:
    """A lock file or an ``am`` in progress that is not ours to remove (no journal): named."""
    for gdir in _git_dirs(repos):
        for name in ("index.lock", "HEAD.lock"):
            if (gdir / name).exists():
                return str(gdir / name)
    return ""


def refuse_stale(where: Path, what: str) -> DirtyCheckout:
    msg = (
        f"{what} exists in {where}: a git command is running there or was killed; if none "
        "runs, remove that file and run again"
    )
    return DirtyCheckout(msg)
