"""Git operations the stages need, on top of GitPython's command runner.

Every command runs with ``LC_ALL=C`` (GitPython sets it) so messages can be parsed, with
``protocol.file.allow=always`` so ``file://`` submodules work, and, for commands that make
commits, with rocm-build's own identity so a machine without ``user.name`` works.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import faults, proc
from .errors import CommandFailed, ConfigError, FetchError, PatchConflict, ToolMissing
from .masking import mask_url
from .progress import NO_PROGRESS, Progress

__all__ = [
    "IDENTITY",
    "Ref",
    "Submodule",
    "add_forced",
    "am",
    "changed_paths",
    "checkout_detached",
    "commit_all",
    "fetch",
    "format_patch",
    "git_dir",
    "head",
    "ignored_files",
    "init",
    "is_repo",
    "log_range",
    "resolve_ref",
    "run",
    "set_tag",
    "submodules",
    "tag_commit",
    "tree_hash",
    "update_submodules",
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
_NO_PROMPT = {"GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": ""}
_BASE_OPTIONS = ("-c", "protocol.file.allow=always", "-c", "advice.detachedHead=false")
SHA_RE = re.compile(r"^[0-9a-f]{40}$")


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

    cmd = ["git", *_BASE_OPTIONS, *args]
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


def _query(repo: Path, *args: str, check: bool = True) -> proc.Result:
    """A read-only ``git ARGS`` through proc. These are all an up-to-date re-run asks of git, and
    importing GitPython alone would be a third of that re-run's time."""
    return proc.run(
        ["git", *_BASE_OPTIONS, *args],
        cwd=repo,
        capture=True,
        check=check,
        what="git " + next((a for a in args if not a.startswith("-")), ""),
    )


def _run_streaming(
    repo: Path, args: Sequence[str], env: Mapping[str, str], on_stderr: Callable[[str], None]
) -> GitResult:
    """``git ARGS`` with each stderr line (split at CR or LF, as git's progress meters write
    them) handed to ``on_stderr`` as it arrives. Never raises on a non-zero exit."""
    import git as gitpython

    cmd = ["git", *_BASE_OPTIONS, *args]
    log.info("+ git %s  (in %s)", mask_url(shlex.join(args)), repo)
    try:
        process = gitpython.Git(str(repo)).execute(
            cmd, as_process=True, with_exceptions=False, env=dict(env), **proc.popen_options()
        )
    except gitpython.GitCommandNotFound as exc:
        msg = "'git' was not found on PATH: install git (Debian: apt-get install git)"
        raise ToolMissing(msg) from exc
    popen = process.proc
    assert popen is not None
    assert popen.stderr is not None
    assert popen.stdout is not None
    kept: list[str] = []
    pending = b""
    while chunk := os.read(popen.stderr.fileno(), 65536):
        pending += chunk
        *lines, pending = re.split(rb"[\r\n]", pending)
        for raw in lines:
            line = raw.decode("utf-8", "replace").strip()
            if line:
                kept.append(line)
                on_stderr(line)
    if pending.strip():
        kept.append(pending.decode("utf-8", "replace").strip())
        on_stderr(kept[-1])
    out = popen.stdout.read().decode("utf-8", "replace")  # fetch writes (almost) nothing here
    status = popen.wait()
    for stream in (popen.stdin, popen.stdout, popen.stderr):
        if stream is not None:
            stream.close()
    # Progress meters repeat one line many times; the error text needs only the others.
    return GitResult(status, out, "\n".join(ln for ln in kept if "%" not in ln))


class _FetchMeter:
    """Turns ``git fetch --progress`` lines into ``Progress`` calls for one task.

    Objects come from git's own meter for the objects it receives ("Receiving objects" when
    the pack is indexed, "Unpacking objects" when it is exploded into loose objects). Small
    fetches that show neither report the count the remote gave ("remote: Counting objects")
    once they finish."""

    _LOCAL = re.compile(r"^(?:Receiving|Unpacking) objects:\s+\d+% \((\d+)/(\d+)\)")
    _REMOTE = re.compile(r"^remote: (?:Counting|Enumerating) objects:\s+(?:\d+% \(\d+/)?(\d+)")

    def __init__(self, progress: Progress, task: str) -> None:
        self.progress, self.task = progress, task
        self.total: int | None = None
        self.seen = 0
        self.remote = 0

    def line(self, text: str) -> None:
        match = self._LOCAL.match(text)
        if match is None:
            remote = self._REMOTE.match(text)
            if remote is not None:
                self.remote = max(self.remote, int(remote.group(1)))
            return
        count, total = int(match.group(1)), int(match.group(2))
        if self.total is None:
            self.total = total
            self.progress.start(self.task, total)
        if count > self.seen:
            self.progress.advance(self.task, count - self.seen)
            self.seen = count

    def finish(self) -> None:
        if self.total is None:
            if not self.remote:
                return
            self.total = self.remote
            self.progress.start(self.task, self.total)
        if self.seen < self.total:
            self.progress.advance(self.task, self.total - self.seen)
            self.seen = self.total
        self.progress.done(self.task)


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
    return run(repo, "rev-parse", f"{rev}^{{tree}}").stdout.strip()


def tag_commit(repo: Path, tag: str) -> str | None:
    res = run(repo, "rev-parse", "-q", "--verify", f"refs/tags/{tag}^{{commit}}", check=False)
    return res.stdout.strip() or None


def set_tag(repo: Path, tag: str, rev: str = "HEAD") -> None:
    # Lightweight tags: no identity needed, and they never reach a remote we do not push to.
    run(repo, "tag", "-f", tag, rev)
    faults.point("git.tagged")


def init(repo: Path, origin: str) -> None:
    repo.mkdir(parents=True, exist_ok=True)
    run(repo, "init", "-q")
    set_origin(repo, origin)


def set_origin(repo: Path, origin: str) -> None:
    if run(repo, "remote", "get-url", "origin", check=False).status == 0:
        run(repo, "remote", "set-url", "origin", origin)
    else:
        run(repo, "remote", "add", "origin", origin)


@dataclass(frozen=True)
class Ref:
    """A ref resolved on the remote: ``kind`` is branch, tag or commit."""

    name: str
    kind: str
    commit: str
    refspec: str


# What a server answers when it has no such commit or ref: asking again cannot help, so these
# are not retried (a SHA that is not upstream is a wrong --ref, not a flaky network).
_NOT_FOUND = re.compile(
    r"not our ref|couldn't find remote ref|does not allow request for unadvertised object"
    r"|no such remote ref|did not contain [0-9a-f]{40}",
    re.IGNORECASE,
)


def _network(
    repo: Path,
    args: Sequence[str],
    *,
    url: str,
    what: str,
    retries: int,
    delay: float,
    meter: _FetchMeter | None = None,
    missing: str = "",
) -> GitResult:
    """A git command that talks to a remote: retried with back-off, then one-line FetchError.
    If the remote says it has no such object (see ``_NOT_FOUND``), it is not retried: with
    ``missing`` (what to tell the user) that is a ``ConfigError``."""
    attempts = max(1, retries)
    last = ""
    for attempt in range(1, attempts + 1):
        if meter is None:
            res = run(repo, *args, env=_NO_PROMPT, check=False, quiet=False)
        else:
            res = _run_streaming(repo, args, _NO_PROMPT, meter.line)
        if res.status == 0:
            if meter is not None:
                meter.finish()
            return res
        lines = [ln.strip() for ln in res.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
        last = (errors or lines or [f"exit code {res.status}"])[-1]
        if missing and _NOT_FOUND.search(res.stderr):
            raise ConfigError(f"{missing} (git: {mask_url(last)})")
        if attempt < attempts:
            wait = delay * 2 ** (attempt - 1)
            log.warning("%s failed (%s); retry %d/%d in %.0fs", what, last, attempt, attempts, wait)
            time.sleep(wait)
    msg = (
        f"{what} from {mask_url(url)} failed after {attempts} attempt(s): {mask_url(last)}; "
        "check the URL and network"
    )
    raise FetchError(msg)


def resolve_ref(repo: Path, url: str, ref: str, *, retries: int = 3, delay: float = 2.0) -> Ref:
    """Find ``ref`` on the remote ``origin`` of ``repo``: a full SHA, a tag, or a branch."""
    if SHA_RE.match(ref):
        return Ref(ref, "commit", ref, ref)
    candidates = [ref] if ref.startswith("refs/") else [f"refs/tags/{ref}", f"refs/heads/{ref}"]
    res = _network(
        repo,
        ["ls-remote", url, *candidates, *(c + "^{}" for c in candidates)],
        url=url,
        what=f"listing ref '{ref}'",
        retries=retries,
        delay=delay,
    )
    found: dict[str, str] = {}
    for line in res.stdout.splitlines():
        sha, _, name = line.partition("\t")
        found[name.strip()] = sha.strip()
    for cand in candidates:
        peeled = found.get(cand + "^{}") or found.get(cand)
        if peeled:
            kind = "tag" if cand.startswith("refs/tags/") else "branch"
            return Ref(ref, kind, peeled, f"+{cand}:{cand}" if kind == "tag" else cand)
    msg = (
        f"ref '{ref}' is not a branch, tag or full commit SHA on {mask_url(url)}; "
        "check --ref (abbreviated SHAs are not accepted)"
    )
    raise ConfigError(msg)


def fetch(
    repo: Path,
    url: str,
    ref: Ref,
    *,
    depth: int = 0,
    retries: int = 3,
    delay: float = 2.0,
    progress: Progress = NO_PROGRESS,
    task: str = "fetch objects",
) -> str:
    """Fetch exactly ``ref`` (and no other branches or tags); return its commit.

    A tag or SHA whose commit is already here is not fetched again. Objects received are
    reported to ``progress`` as ``task`` (see ``_FetchMeter``)."""
    have = run(repo, "cat-file", "-e", f"{ref.commit}^{{commit}}", check=False).status == 0
    if have and ref.kind in ("tag", "commit"):
        return ref.commit
    meter = None if progress is NO_PROGRESS else _FetchMeter(progress, task)
    args = [
        "fetch",
        "--no-tags",
        "--no-write-fetch-head",
        "--quiet" if meter is None else "--progress",
    ]
    if depth > 0:
        args.append(f"--depth={depth}")
    args += ["origin", ref.refspec]
    if ref.kind == "branch":
        args[-1] = f"+{ref.refspec}:refs/remotes/origin/{ref.refspec.removeprefix('refs/heads/')}"
    if ref.kind == "commit":
        # A SHA has nowhere to be stored; keep it reachable by a private ref.
        args[-1] = f"{ref.commit}:refs/rocm-build/fetched"
    if ref.kind == "commit":
        missing = (
            f"commit {ref.commit} is not on {mask_url(url)}; check --ref (a full SHA of a "
            "commit the origin has, reachable from one of its branches or tags)"
        )
    else:
        missing = (
            f"{ref.kind} '{ref.name}' ({ref.commit[:12]}) is no longer on {mask_url(url)}; "
            "run again, or check --ref"
        )
    _network(
        repo,
        args,
        url=url,
        what=f"fetching {ref.name}",
        retries=retries,
        delay=delay,
        meter=meter,
        missing=missing,
    )
    return run(repo, "rev-parse", f"{ref.commit}^{{commit}}").stdout.strip()


def checkout_detached(repo: Path, commit: str, *, force: bool = False) -> None:
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


def update_submodules(
    repo: Path,
    url: str,
    *,
    depth: int = 0,
    jobs: int = 8,
    retries: int = 3,
    delay: float = 2.0,
) -> None:
    """Init, sync and update every submodule recursively (in parallel), forcing the recorded
    commit so earlier local commits in a submodule are dropped."""
    if not (repo / ".gitmodules").exists():
        return
    run(repo, "submodule", "sync", "--quiet", "--recursive")
    args = ["submodule", "update", "--init", "--recursive", "--force", "--quiet"]
    args.append(f"--jobs={max(1, jobs)}")
    if depth > 0:
        args.append(f"--depth={depth}")
    missing = (
        f"a submodule commit that {mask_url(url)} records is not on the submodule's origin; "
        "check the submodule URLs in .gitmodules and --ref"
    )
    _network(
        repo,
        args,
        url=url,
        what="updating submodules",
        retries=retries,
        delay=delay,
        missing=missing,
    )
    ignore_submodule_pointers(repo)


def ignore_submodule_pointers(repo: Path) -> None:
    """Make ``status``/``commit -a``/``diff`` in each repo ignore its submodules' pointers.

    Patches and hipify commits move submodule HEADs away from the commit the parent records;
    that is expected and must not look like a change of the parent (nor be committed into it).
    """
    for sub_repo in [repo, *(repo / s.path for s in submodules(repo))]:
        for name, _ in gitmodules(sub_repo):
            run(sub_repo, "config", f"submodule.{name}.ignore", "all")


def gitmodules(repo: Path) -> list[tuple[str, str]]:
    """``(name, path)`` of each submodule ``repo``'s ``.gitmodules`` declares (not recursive)."""
    if not (repo / ".gitmodules").is_file():
        return []
    res = _query(
        repo, "config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$", check=False
    )
    out = []
    for line in res.stdout.splitlines():
        key, sep, path = line.partition(" ")
        if sep:
            out.append((key[len("submodule.") : -len(".path")], path.strip()))
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
    out = run(repo, "rev-list", "--reverse", rev_range).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def commit_subject(repo: Path, rev: str) -> str:
    return run(repo, "log", "-1", "--format=%s", rev).stdout.strip()


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
    return run(repo, "log", "-1", "--format=%cI", rev).stdout.strip()


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
        *(str(p) for p in patches),
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
        "--no-cover-letter", "--no-thread", "--output-directory", str(out_dir), rev_range,
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
