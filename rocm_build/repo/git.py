"""Git operations on a local repository, on top of GitPython's command runner (the ones that
talk to a remote are in ``sources.remote``).

Every command runs with ``LC_ALL=C`` (GitPython sets it) so messages can be parsed, with
``protocol.file.allow=always`` so ``file://`` submodules work, and, for commands that make
commits, with rocm-build's own identity so a machine without ``user.name`` works.

Size: every local git operation behind one runner, one environment and one identity.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.common import faults, proc, statefile
from rocm_build.common.errors import (
    CommandFailed,
    FileAccessError,
    PatchConflict,
    ToolMissing,
    UnsafeInput,
)
from rocm_build.common.masking import mask_url
from rocm_build.repo.cmdargs import credentials, positional

__all__ = [
    "IDENTITY",
    "REFETCH_VERSION",
    "Ref",
    "Submodule",
    "add_forced",
    "am",
    "changed_paths",
    "checkout_detached",
    "commit_all",
    "exclude_build_outputs",
    "format_patch",
    "git_dir",
    "head",
    "ignored_files",
    "init",
    "is_repo",
    "log_range",
    "parse_version",
    "refetch_problem",
    "run",
    "set_tag",
    "submodule_name_problem",
    "submodule_path_problem",
    "submodules",
    "tag_commit",
    "tree_hash",
    "version",
]

log = logging.getLogger(__name__)

#: Identity for the commits rocm-build makes (hipify results; committer of applied patches).
IDENTITY = {
    "GIT_AUTHOR_NAME": "rocm-build",
    "GIT_AUTHOR_EMAIL": "rocm-build@localhost.invalid",
    "GIT_COMMITTER_NAME": "rocm-build",
    "GIT_COMMITTER_EMAIL": "rocm-build@localhost.invalid",
}
# Never wait for a password prompt: a fetch that needs credentials fails and is reported.
NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": ""}
BASE_OPTIONS = ("-c", "protocol.file.allow=always", "-c", "advice.detachedHead=false")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
#: ``git fetch --refetch``, with which a resumed checkout repairs an object store a killed fetch
#: left short, came with git 2.36.
REFETCH_VERSION = (2, 36)
_VERSION = re.compile(r"\bgit version (\d+)\.(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class GitResult:
    status: int
    stdout: str
    stderr: str


def run(
    repo: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    quiet: bool = True,
) -> GitResult:
    """``git ARGS`` in ``repo``; raises ``gitpython.GitCommandError`` on failure if ``check``."""
    import git as gitpython

    cmd = ["git", *BASE_OPTIONS, *args]
    (log.debug if quiet else log.info)("+ git %s  (in %s)", mask_url(shlex.join(args)), repo)
    try:
        status, out, err = gitpython.Git(str(repo)).execute(
            cmd,
            with_extended_output=True,
            with_exceptions=check,
            env=dict(env or {}),
            strip_newline_in_stdout=False,
            **proc.popen_options(),
        )
    except gitpython.GitCommandNotFound as exc:
        msg = "'git' was not found on PATH: install git (Debian: apt-get install git)"
        raise ToolMissing(msg) from exc
    except gitpython.GitCommandError as exc:
        lines = [mask_url(ln.strip()) for ln in str(exc.stderr or "").splitlines() if ln.strip()]
        last = lines[-1].strip("'") if lines else f"exit code {exc.status}"
        sub = next((a for a in args if not a.startswith("-") and "=" not in a), "")
        msg = f"git {sub} failed in {repo}: {last}"
        raise CommandFailed(
            msg,
            returncode=exc.status if isinstance(exc.status, int) else 1,
            tail=tuple(lines[-20:]),
        ) from exc
    return GitResult(int(status or 0), str(out), str(err))


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``git --version``'s output as (major, minor, patch): ``git version 2.39.3 (Apple Git-146)``,
    ``2.45.1.windows.1`` and ``2.36.0.rc1`` too; None when it is not git's."""
    match = _VERSION.search(text)
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def version(env: Mapping[str, str] | None = None) -> tuple[int, int, int] | None:
    """The version of the ``git`` on PATH; None when it cannot be told (or there is no git)."""
    try:
        result = proc.run(["git", "--version"], env=env, capture=True, check=False)
    except (OSError, ToolMissing):
        return None
    return parse_version(result.stdout or "")


def refetch_problem(found: tuple[int, ...] | None) -> str:
    """Why this git cannot repair an object store with ``fetch --refetch``: "" when it can, or
    when its version is unknown (git itself then says what it lacks)."""
    if found is None or tuple(found[:2]) >= REFETCH_VERSION:
        return ""
    need = ".".join(map(str, REFETCH_VERSION))
    have = ".".join(map(str, found))
    return (
        f"git {have} is older than {need}, which `git fetch --refetch` needs: "
        f"install git {need} or newer"
    )


def _query(repo: Path, *args: str, check: bool = True) -> proc.Result:
    """A read-only ``git ARGS`` through proc. These are all an up-to-date re-run asks of git, and
    importing GitPython alone would be a third of that re-run's time."""
    return proc.run(
        ["git", *BASE_OPTIONS, *args],
        cwd=repo,
        capture=True,
        check=check,
        what="git " + next((a for a in args if not a.startswith("-")), ""),
    )


def is_repo(path: Path) -> bool:
    return (path / ".git").exists()


def git_dir(repo: Path) -> Path:
    out = run(repo, "rev-parse", "--absolute-git-dir").stdout.strip()
    return Path(out)


def head(repo: Path) -> str:
    """The commit checked out. A detached HEAD (how checkouts are left) is read from the file,
    which keeps a re-run's many questions free of processes; anything else asks git."""
    dotgit = repo / ".git"
    gitdir: Path | None = dotgit if dotgit.is_dir() else None
    if gitdir is None and dotgit.is_file():
        text = dotgit.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            gitdir = repo / text[len("gitdir:") :].strip()
    if gitdir is not None:
        try:
            value = (gitdir / "HEAD").read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            value = ""
        if SHA_RE.match(value):
            return value
    return run(repo, "rev-parse", "HEAD").stdout.strip()


def tree_hash(repo: Path, rev: str = "HEAD") -> str:
    return run(repo, "rev-parse", f"{positional(rev, 'revision')}^{{tree}}").stdout.strip()


def tag_commit(repo: Path, tag: str) -> str | None:
    res = run(repo, "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}", check=False)
    return res.stdout.strip() or None


def set_tag(repo: Path, tag: str, rev: str = "HEAD") -> None:
    # Lightweight tags: no identity needed, and they never reach a remote we do not push to.
    run(repo, "tag", "-f", "--", positional(tag, "tag"), positional(rev, "revision"))
    faults.point("git.tagged")


def init(repo: Path, origin: str) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    run(repo, "init", "-q")
    set_origin(repo, origin)


def set_origin(repo: Path, origin: str) -> None:
    """Point the remote ``origin`` at ``origin`` without its credential (``.git/config`` is
    read by git's helpers, whose command lines anyone sees; ``sources.remote`` gives the credential
    through the environment)."""
    origin = credentials(origin)[0]
    if run(repo, "remote", "get-url", "origin", check=False).status == 0:
        run(repo, "remote", "set-url", "--", "origin", origin)
    else:
        run(repo, "remote", "add", "--", "origin", origin)


@dataclass(frozen=True)
class Ref:
    """A ref resolved on the remote: ``kind`` is branch, tag or commit."""

    name: str
    kind: str
    commit: str
    refspec: str


def checkout_detached(repo: Path, commit: str, *, force: bool = False) -> None:
    commit = positional(commit, "commit")
    run(repo, "checkout", "-q", *(["-f"] if force else []), "--detach", commit)


def clean_untracked(repo: Path) -> None:
    """Remove untracked files that are not ignored (ignored ones are build caches: kept), and
    the folders of submodules the new commit does not have."""
    run(repo, "clean", "-q", "-ff", "-d")


@dataclass(frozen=True)
class Submodule:
    path: str  # relative to the project's root, '/'-separated
    commit: str


def submodules(repo: Path) -> tuple[Submodule, ...]:
    """Every checked-out submodule, recursively, parents before children; ``commit`` is its
    HEAD. Read from each ``.gitmodules`` (cheaper than ``git submodule status --recursive``)."""
    subs: list[Submodule] = []

    def walk(parent: Path, prefix: str) -> None:
        for rel in direct_submodule_paths(parent):
            path = parent / rel
            if not is_repo(path):
                continue  # not initialised
            full = f"{prefix}{rel}"
            subs.append(Submodule(full, head(path)))
            walk(path, full + "/")

    walk(repo, "")
    return tuple(subs)


def ignore_submodule_pointers(repo: Path) -> None:
    """Make ``status``/``commit -a``/``diff`` in each repo ignore its submodules' pointers.

    Patches and hipify commits move submodule HEADs away from the commit the parent records;
    that is expected and must not look like a change of the parent (nor be committed into it).
    """
    for sub_repo in [repo, *(repo / s.path for s in submodules(repo))]:
        for name, _ in gitmodules(sub_repo):
            run(sub_repo, "config", f"submodule.{name}.ignore", "all")


def submodule_name_problem(name: str) -> str:
    """Why git would refuse ``name`` as a submodule's name ("" when it would not): git's
    ``check_submodule_name`` (empty, or a ``..`` component, with ``/`` and ``\\`` both taken
    as separators), and an absolute name, which would put ``.git/modules/<name>`` anywhere."""
    parts = re.split(r"[/\\]", name)
    if not name:
        return "it is empty"
    if ".." in parts:
        return "it has a '..' component"
    if name.startswith(("/", "\\")):
        return "it is absolute"
    if _CONTROL.search(name):
        return "it holds a control character"
    return ""


def submodule_path_problem(path: str) -> str:
    """Why ``path`` cannot be a submodule's place in its work tree ("" when it can): git's own
    rule for paths in a tree (no empty, ``.``, ``..`` or ``.git`` component, not absolute)."""
    parts = re.split(r"[/\\]", path)
    if not path or path.startswith(("/", "\\")):
        return "it is empty or absolute"
    if any(part in ("", ".", "..") or part.lower() == ".git" for part in parts):
        return "it has an empty, '.', '..' or '.git' component"
    if _CONTROL.search(path):
        return "it holds a control character"
    return ""


def gitmodules(repo: Path) -> list[tuple[str, str]]:
    """``(name, path)`` of each submodule ``repo``'s ``.gitmodules`` declares (not recursive).

    The file comes from upstream, so a name or path git would refuse (one that leads out of
    ``.git/modules`` or out of the work tree) stops the run with one line (``UnsafeInput``)
    before anything uses it to name a folder."""
    if not (repo / ".gitmodules").is_file():
        return []
    res = _query(
        repo,
        "config",
        "-z",
        "-f",
        ".gitmodules",
        "--get-regexp",
        r"^submodule\..*\.path$",
        check=False,
    )
    out = []
    for record in res.stdout.split("\0"):
        key, sep, path = record.partition("\n")
        if not sep:
            continue
        name = key[len("submodule.") : -len(".path")]
        problem = submodule_name_problem(name) or submodule_path_problem(path)
        if problem:
            shown = f"{name!r} (path {path!r})"[:200]
            msg = (
                f"{repo / '.gitmodules'} declares the submodule {shown}, which git refuses "
                f"({problem}): the upstream repository is unsafe to check out; use another "
                "origin or ref"
            )
            raise UnsafeInput(msg)
        out.append((name, path))
    return out


def direct_submodule_paths(repo: Path) -> list[str]:
    return [path for _, path in gitmodules(repo)]


def changed_paths(repo: Path) -> list[str]:
    """Uncommitted changes (staged, unstaged, untracked; not ignored), submodules excluded."""
    # No optional locks: a read-only question must not rewrite the index (re-runs touch nothing).
    res = _query(
        repo,
        "--no-optional-locks",
        "status",
        "--porcelain",
        "--ignore-submodules=all",
        "--untracked-files=all",
    )
    return [line[3:] for line in res.stdout.splitlines() if line.strip()]


#: (size, mtime_ns, inode) of a file: enough to tell that a step wrote it.
FileStamp = tuple[int, int, int]


def ignored_files(repo: Path) -> dict[str, FileStamp]:
    """Every untracked file that ``repo``'s ignore rules hide (inside ignored folders too), with
    its ``FileStamp``: taken before and after a step, it tells which ignored files the step
    wrote. Submodules are not entered."""
    res = _query(
        repo, "--no-optional-locks", "ls-files", "-z", "--others", "--ignored", "--exclude-standard"
    )
    out: dict[str, FileStamp] = {}
    for rel in res.stdout.split("\0"):
        if not rel or rel.endswith("/"):
            continue  # a nested repository that is not a submodule: not ours to take
        try:
            st = (repo / rel).lstat()
        except OSError:
            continue
        out[rel] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def add_forced(repo: Path, paths: Sequence[str]) -> None:
    """Stage ``paths`` even though the ignore rules hide them (``git add -f``)."""
    if not paths:
        return
    listing = git_dir(repo) / "rocm-build-add-paths"
    listing.write_bytes(b"".join(p.encode() + b"\0" for p in paths))
    try:
        run(repo, "add", "-f", f"--pathspec-from-file={listing}", "--pathspec-file-nul")
    finally:
        listing.unlink(missing_ok=True)


def log_range(repo: Path, rev_range: str) -> list[str]:
    out = run(repo, "rev-list", "--reverse", positional(rev_range, "revision range")).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def commit_subject(repo: Path, rev: str) -> str:
    return run(repo, "log", "-1", "--format=%s", positional(rev, "revision")).stdout.strip()


def commit_all(repo: Path, message: str, *, date: str) -> bool:
    """Commit every change in ``repo`` (not its submodule pointers) as rocm-build; ``date`` makes
    the commit reproducible. Returns whether there was anything to commit."""
    run(repo, "add", "-A")
    subs = direct_submodule_paths(repo)
    if subs:
        run(repo, "reset", "-q", "--", *subs)
    if run(repo, "diff", "--cached", "--quiet", check=False).status == 0:
        return False
    env = {**IDENTITY, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    faults.point("git.before-commit")
    run(repo, "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", message, env=env)
    faults.point("git.committed")
    return True


def commit_date(repo: Path, rev: str = "HEAD") -> str:
    return run(repo, "log", "-1", "--format=%cI", positional(rev, "revision")).stdout.strip()


_FAILED_PATH_RES = tuple(
    re.compile(p, re.MULTILINE)
    for p in (
        r"^error: patch failed: (.+?):\d+$",
        r"^error: (.+?): does not exist in index$",
        r"^error: (.+?): patch does not apply$",
        r"sha1 information is lacking or useless \((.+?)\)",
        r"^CONFLICT \([^)]*\): .*? in (\S+)$",
    )
)


@dataclass(frozen=True)
class AmFailure:
    index: int  # 0-based position in the series of the patch that failed
    paths: tuple[str, ...]
    detail: str


def am(repo: Path, patches: Sequence[Path]) -> AmFailure | None:
    """Apply ``patches`` as commits (``git am --3way``). On failure the series is aborted and
    the repo reset to where it was; the failure says which patch and which paths."""
    if not patches:
        return None
    before = head(repo)
    gdir = git_dir(repo)
    env = {**IDENTITY}
    for key in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL"):
        env.pop(key)  # the author comes from the patch
    res = run(
        repo,
        "-c", "commit.gpgsign=false",
        "-c", "am.keepcr=false",
        "-c", "am.threeWay=true",
        "am", "--3way", "--quiet", "--committer-date-is-author-date", "--no-gpg-sign",
        "--", *(str(p) for p in patches),
        env=env,
        check=False,
    )  # fmt: skip
    if res.status == 0:
        return None
    index = 0
    next_file = gdir / "rebase-apply" / "next"
    if next_file.is_file():
        index = int(next_file.read_text().strip() or "1") - 1
    unmerged = run(repo, "diff", "--name-only", "--diff-filter=U", check=False).stdout.split()
    found = [m for pattern in _FAILED_PATH_RES for m in pattern.findall(res.stderr)]
    paths = tuple(dict.fromkeys([*unmerged, *found]))
    run(repo, "am", "--abort", check=False)
    run(repo, "reset", "-q", "--hard", before)
    if (gdir / "rebase-apply").exists():
        shutil.rmtree(gdir / "rebase-apply")
    return AmFailure(index, paths, _am_reason(res))


# git am's advice on how to go on, which is not a reason (rocm-build aborts the series anyway).
_AM_ADVICE = ("When you have", "If you prefer", "To record", "To restore", "hint:", "Applying:")


def _am_reason(res: GitResult) -> str:
    """git am's first error line (git writes some to stdout, some without a prefix)."""
    lines = [ln.strip() for ln in (res.stderr + "\n" + res.stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("error:", "fatal:"))]
    other = [ln for ln in lines if not ln.startswith(_AM_ADVICE)]
    reason = (errors or other or [f"git am exited with code {res.status} and gave no reason"])[0]
    return mask_url(reason[:200])


def format_patch(repo: Path, rev_range: str, out_dir: Path) -> list[Path]:
    """Write the commits of ``rev_range`` as ``NNNN-*.patch`` into ``out_dir``: byte-identical
    for the same commits (no git version, no commit ids, no user config, full blob ids)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if not log_range(repo, rev_range):
        return []
    env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    res = run(
        repo,
        "format-patch", "--quiet", "--no-signature", "--zero-commit", "--full-index",
        "--no-numbered", "--binary", "--ignore-submodules=all", "--no-stat", "--start-number=1",
        "--no-cover-letter", "--no-thread", "--output-directory", str(out_dir),
        positional(rev_range, "revision range"),
        env=env,
    )  # fmt: skip
    del res
    return sorted(out_dir.glob("*.patch"))


def conflict(patch: Path, where: str, failure: AmFailure) -> PatchConflict:
    reason = (
        f"conflicts in {', '.join(failure.paths)}"
        if failure.paths
        else f"git says: {failure.detail}"
    )
    msg = (
        f"patch {patch} does not apply to {where}: {reason}; "
        "the repository was left as before the series: refresh the patch "
        "(check out with --no-patches, apply by hand, commit, save-patches)"
    )
    return PatchConflict(msg)


#: What a project's own build writes into its source tree (setuptools, pip, CMake under
#: setup.py): never the user's work. ``exclude_build_outputs`` lists them in the checkout's
#: ``info/exclude``, so git (``status``, so the checkout's "uncommitted changes") ignores them.
BUILD_OUTPUTS = ("/build/", "/dist/", "/.eggs/", "/*.egg-info/", "__pycache__/")
_EXCLUDE_HEADER = "# rocm-build: what the project's build writes (rocm-build build)"


def exclude_build_outputs(repo: Path) -> None:
    """Add ``BUILD_OUTPUTS`` to ``repo``'s ``info/exclude`` (once). An exclude file that is no
    regular file of this user's (a link, a FIFO) is left alone, with a warning: the build does
    not need it, only a later checkout's dirty check does."""
    if not (repo / ".git").exists():
        return
    path = repo / ".git" / "info" / "exclude"
    what = "git exclude file"
    try:
        # --git-path: a linked worktree's exclude file is its main repository's.
        path = repo / run(repo, "rev-parse", "--git-path", "info/exclude").stdout.strip()
        try:
            old = statefile.read_bytes(path, what, limit=1 << 20).decode("utf-8", "replace")
        except FileNotFoundError:
            old = ""
        have = {line.strip() for line in old.splitlines()}
        missing = [p for p in BUILD_OUTPUTS if p not in have]
        if not missing:
            return
        head = "" if _EXCLUDE_HEADER in have else _EXCLUDE_HEADER + "\n"
        sep = "" if not old or old.endswith("\n") else "\n"
        text = old + sep + head + "".join(p + "\n" for p in missing)
        statefile.write_bytes(path, text.encode("utf-8"), what)
    except (FileAccessError, ValueError, CommandFailed, ToolMissing) as exc:
        log.warning(
            "not listing the build's outputs in %s (%s): a later checkout may call them "
            "uncommitted changes",
            path,
            exc,
        )
