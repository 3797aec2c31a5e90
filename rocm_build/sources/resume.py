"""What an interrupted checkout may discard, proven by content, and repairs of what it damaged.

A checkout journal says which step of rocm-build was interrupted; it is a file anyone can edit,
so it is never taken as proof on its own. Before a resumed run discards anything:

- a HEAD is rocm-build's only if it is the upstream commit (the ref resolved now, or the
  submodule commit its parent records) plus commits rocm-build made (its committer identity),
  or the HEAD the source manifest recorded when rocm-build last left the checkout; in a
  submodule, also a HEAD whose every commit is on its origin's branches (what ``git clone``
  leaves before ``git submodule update`` checks out the recorded commit: moving it loses none);
- an uncommitted change is rocm-build's only if its content is what a step of the interrupted
  run wrote or was writing: the file as it is in one of those commits (a checkout killed half
  way), in the result of the patch a killed ``git am`` was applying, in what the interrupted
  hipify writes (run again in a scratch copy to know it), absent where those commits differ (a
  killed ``git checkout`` or ``git am`` removes a file before it writes the new version), or
  absent in a repository that run was creating. Anything else is the user's: the run stops
  (exit 6), having set aside only what it proved its own, so the advice it gives (stash,
  finish, pop) works.

A kill inside a git process that writes objects (a fetch unpacks them one by one) can leave a
commit whose trees or blobs are missing; a run that finds its own fetch, checkout or submodule
step interrupted checks that the commit it needs is complete and fetches it again if not.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.common import faults, proc
from rocm_build.common.errors import CommandFailed, DirtyCheckout
from rocm_build.repo import git
from rocm_build.sources.journal import CheckoutJournal

__all__ = [
    "Trust",
    "check_changes",
    "damaged",
    "foreign_repos",
    "is_complete",
    "stale_commit_advice",
]

log = logging.getLogger(__name__)

# Steps whose git processes write objects, refs or the index of a checkout being made.
GIT_WRITING_STEPS = ("begin", "fetch", "checkout", "submodules")


@dataclass(frozen=True)
class Trust:
    """What a resumed run knows for sure, whatever the journal says."""

    target: str  # the upstream commit of the project's own repository, resolved now
    recorded: Mapping[str, str]  # rel -> HEAD the source manifest recorded


def _tool_commits_only(repo: Path, base: str, head: str) -> bool:
    if not base:
        return False
    if git.run(repo, "merge-base", "--is-ancestor", base, head, check=False).status != 0:
        return False
    res = git.run(repo, "log", "--format=%ce", f"{base}..{head}", check=False)
    if res.status != 0:
        return False
    mine = git.IDENTITY["GIT_COMMITTER_EMAIL"]
    return all(line.strip() == mine for line in res.stdout.splitlines() if line.strip())


def upstream_of(src: Path, rel: str, trust: Trust) -> str:
    """The commit ``rel`` is checked out at before any patch: the target for the project's
    own repository, the commit its parent repository records for a submodule."""
    if rel == ".":
        return trust.target
    for parent in _submodule_parents(rel):
        repo = src / parent if parent else src
        if parent and not (repo / ".git").exists():
            continue
        inner = rel[len(parent) + 1 :] if parent else rel
        out = git.run(repo, "ls-tree", "HEAD", "--", inner, check=False).stdout.split()
        return out[2] if len(out) >= 3 and out[1] == "commit" else ""
    return ""


def _submodule_parents(rel: str) -> list[str]:
    """Folders above ``rel`` that may be its parent repository, nearest first."""
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)] + [""]


def trusted(src: Path, rel: str, path: Path, commit: str, trust: Trust) -> bool:
    """``commit`` in repository ``rel`` is one rocm-build made or checked out (see module)."""
    if commit == trust.recorded.get(rel):
        return True
    return _tool_commits_only(path, upstream_of(src, rel, trust), commit)


def is_complete(repo: Path, commit: str) -> bool:
    """``commit`` and everything it reaches are in the object store (a killed fetch may have
    written the commit and only part of its trees and blobs)."""
    return git.run(repo, "rev-list", "--objects", "--quiet", commit, check=False).status == 0


# --- uncommitted changes --------------------------------------------------------------------


def _dirty(repo: Path) -> list[str]:
    res = git.run(
        repo,
        "--no-optional-locks",
        "status",
        "--porcelain",
        "-z",
        "--untracked-files=all",
        "--ignore-submodules=all",
    )
    out: list[str] = []
    entries = iter(res.stdout.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        out.append(entry[3:])
        if "R" in entry[:2] or "C" in entry[:2]:
            out.append(next(entries, ""))  # the old name of a rename
    return [p for p in out if p]


def _blob_id(path: Path) -> str | None:
    """The git blob id of what is at ``path`` now; None when nothing is; "" for a folder."""
    try:
        if path.is_symlink():
            data = os.fsencode(path.readlink())
        elif path.is_dir():
            return ""
        else:
            data = path.read_bytes()
    except FileNotFoundError:
        return None
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def _tree(repo: Path, commit: str) -> dict[str, str]:
    try:
        out = git.run(repo, "ls-tree", "-r", "-z", "--full-tree", commit).stdout
    except CommandFailed:
        return {}
    files: dict[str, str] = {}
    for entry in out.split("\0"):
        meta, _, name = entry.partition("\t")
        fields = meta.split()
        if len(fields) == 3 and fields[1] == "blob":
            files[name] = fields[2]
    return files


def _am_result(repo: Path) -> str:
    """The commit-to-be of the patch a killed ``git am`` was applying, as a tree id."""
    try:
        gdir = git.git_dir(repo)
    except CommandFailed:
        return ""
    patch = gdir / "rebase-apply" / "patch"
    if not patch.is_file():
        return ""
    with tempfile.TemporaryDirectory(prefix="rocm-build-am-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if git.run(repo, "read-tree", "HEAD", env=env, check=False).status != 0:
            return ""
        if git.run(repo, "apply", "--cached", str(patch), env=env, check=False).status != 0:
            return ""
        return git.run(repo, "write-tree", env=env, check=False).stdout.strip()


def scratch_prefix(name: str) -> str:
    """The name start of the scratch copies hipify is checked in (beside the checkout; under
    the checkout's lock, so any the next run finds are left by a killed run)."""
    return f".rocm-build-hipify-check-{name}-"


def _hipify_output(
    src: Path, starts: Mapping[str, str], cmd: Sequence[str], log_file: Path
) -> Path | None:
    """Run the hipify command in a scratch copy of the commits it started from; the folder
    (the caller removes it), or None if that cannot be done."""
    scratch = Path(tempfile.mkdtemp(prefix=scratch_prefix(src.name), dir=src.parent))
    try:
        for rel, commit in starts.items():
            repo = src / rel
            dest = scratch / rel
            dest.mkdir(parents=True, exist_ok=True)
            env = {"GIT_INDEX_FILE": str(scratch / f".index-{len(rel)}-{commit}")}
            git.run(repo, "read-tree", commit, env=env)
            git.run(repo, "checkout-index", "-a", "-f", f"--prefix={dest}/", env=env)
            Path(env["GIT_INDEX_FILE"]).unlink()
        argv = [a.replace("{python}", sys.executable) for a in cmd]
        env_run = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        faults.point("checkout.hipify-check")
        proc.run(argv, cwd=scratch, env=env_run, log_file=log_file, what="hipify (check)")
    except CommandFailed as exc:
        log.warning("could not run hipify again to check the interrupted one's output: %s", exc)
        shutil.rmtree(scratch, ignore_errors=True)
        return None
    return scratch


@dataclass
class _Repo:
    rel: str
    path: Path
    dirty: list[str]
    known: list[dict[str, str]]
    absent_ok: bool
    ours: list[str]
    theirs: list[str]


def _classify(r: _Repo) -> None:
    for name in r.dirty:
        now = _blob_id(r.path / name)
        if now is None:
            # Missing where our commits differ (in presence or content): a step of ours was
            # replacing it (git checkout and git am unlink a file before they write the new one).
            ours = r.absent_ok or len({t.get(name) for t in r.known}) > 1
            ours = ours or any(name not in t for t in r.known)
        else:
            ours = bool(now) and any(t.get(name) == now for t in r.known)
        (r.ours if ours else r.theirs).append(name)


def check_changes(
    src: Path,
    name: str,
    repos: Sequence[tuple[str, Path]],
    jr: CheckoutJournal,
    *,
    trust: Trust,
    hipify: Sequence[str],
    log_file: Path,
) -> None:
    """Refuse (exit 6) when an uncommitted change in the checkout is not proven rocm-build's
    (see the module); before that, set aside the changes that are, so that the user can stash
    theirs and finish the checkout. From the journal ``jr``: every HEAD it recorded per repo,
    those the run started from (a repository not there was being made) and those at the
    start of the interrupted step."""
    step, heads = jr.last_step, jr.heads()[0]
    begin_heads, step_heads = jr.step_heads(0), jr.step_heads()
    found: list[_Repo] = []
    for rel, path in repos:
        dirty = _dirty(path)
        if not dirty:
            continue
        commits = {c for c in heads.get(rel, set()) if trusted(src, rel, path, c, trust)}
        commits.add(upstream_of(src, rel, trust))
        known = [_tree(path, c) for c in sorted(commits) if c]
        if am := _am_result(path):
            known.append(_tree(path, am))
        r = _Repo(rel, path, dirty, known, rel not in begin_heads, [], [])
        _classify(r)
        found.append(r)
    if step == "hipify" and hipify and any(r.theirs for r in found):
        _check_against_hipify(src, found, step_heads, trust, hipify, log_file)
    theirs = [r for r in found if r.theirs]
    if not theirs:
        return
    for r in found:
        _set_aside(r)
    listed = [p if r.rel == "." else f"{r.rel}/{p}" for r in theirs for p in r.theirs]
    more = f" and {len(listed) - 3} more" if len(listed) > 3 else ""
    stash = " and ".join(f"`git -C {r.path} stash -u`" for r in theirs)
    msg = (
        f"{src} has changes rocm-build did not make since its interrupted checkout "
        f"({', '.join(listed[:3])}{more}); keep them with {stash}, run `rocm-build checkout "
        f"{name}` to finish, then `stash pop` them (or pass --force to discard them)"
    )
    raise DirtyCheckout(msg)


def _check_against_hipify(
    src: Path,
    found: list[_Repo],
    step_heads: Mapping[str, str],
    trust: Trust,
    hipify: Sequence[str],
    log_file: Path,
) -> None:
    starts = {
        rel: c for rel, c in step_heads.items() if c and trusted(src, rel, src / rel, c, trust)
    }
    if "." not in starts:
        return
    scratch = _hipify_output(src, starts, hipify, log_file)
    if scratch is None:
        return
    try:
        for r in found:
            still: list[str] = []
            for name in r.theirs:
                if _blob_id(r.path / name) == _blob_id(scratch / r.rel / name):
                    r.ours.append(name)
                else:
                    still.append(name)
            r.theirs = still
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _set_aside(r: _Repo) -> None:
    """Undo the changes proven rocm-build's (back to HEAD), leave the user's as they are."""
    head = _tree(r.path, "HEAD")
    tracked = [n for n in r.ours if n in head]
    for name in r.ours:
        if name not in head:
            target = r.path / name
            if target.is_file() or target.is_symlink():
                target.unlink()
    for i in range(0, len(tracked), 200):
        git.run(r.path, "checkout", "-q", "HEAD", "--", *tracked[i : i + 200])


def stale_commit_advice(src: Path, name: str, where: str) -> str:
    """The message for commits that are not rocm-build's in an interrupted checkout: advice
    that works (save-patches refuses an unfinished checkout, so it cannot be that)."""
    return (
        f"{src} has commits that rocm-build did not make since its interrupted checkout "
        f"(in {where}); keep them on a branch (`git -C REPO branch my-work` in each), then run "
        f"`rocm-build checkout {name} --force` to finish the checkout (the branch keeps them)"
    )


def _origin_only(repo: Path) -> bool:
    """Every commit of HEAD is on the origin's branches as this repository last fetched them:
    no commit of HEAD is local. What ``git clone`` leaves before ``git submodule update``
    checks out the recorded commit (a kill in between leaves HEAD at the origin's default
    branch); checking out another commit there loses no commit (the refs keep them all)."""
    res = git.run(repo, "rev-list", "-n1", "HEAD", "--not", "--remotes=origin", check=False)
    return res.status == 0 and not res.stdout.strip()


def foreign_repos(src: Path, repos: Sequence[tuple[str, Path]], trust: Trust) -> list[str]:
    """The repositories of ``src`` whose HEAD is not proven rocm-build's: the user's. A
    submodule whose HEAD is all its origin's (see ``_origin_only``) is not."""
    out: list[str] = []
    for rel, path in repos:
        if git.run(path, "rev-parse", "-q", "--verify", "HEAD", check=False).status != 0:
            continue  # no commit yet: an interrupted first checkout
        if trusted(src, rel, path, git.head(path), trust):
            continue
        if rel == "." or not _origin_only(path):
            out.append(rel)
    return out


def damaged(src: Path, repos: Sequence[tuple[str, Path]], trust: Trust) -> list[tuple[str, str]]:
    """``(rel, commit)`` of each repository whose upstream commit is in its object store but
    incomplete (trees or blobs missing): what a kill inside ``git fetch`` leaves."""
    out: list[tuple[str, str]] = []
    for rel, path in repos:
        commit = upstream_of(src, rel, trust)
        if not commit:
            continue
        have = git.run(path, "cat-file", "-e", f"{commit}^{{commit}}", check=False).status == 0
        if have and not is_complete(path, commit):
            out.append((rel, commit))
    return out
