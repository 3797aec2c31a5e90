"""Git operations that talk to a remote: resolve a ref, fetch, update submodules.

Each is retried with back-off and ends in a one-line ``FetchError`` (or ``ConfigError`` when the
remote says it has no such ref or commit); fetches report the objects received to a
``Progress``. Credentials in URLs are masked wherever a URL is shown.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.common import proc
from rocm_build.common.errors import ConfigError, FetchError, ToolMissing
from rocm_build.common.masking import mask_url
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.repo.cmdargs import credentials, positional
from rocm_build.repo.git import (
    BASE_OPTIONS,
    NO_PROMPT,
    SHA_RE,
    GitResult,
    Ref,
    ignore_submodule_pointers,
    run,
)

__all__ = ["FetchMeter", "Retry", "fetch", "meter", "resolve_ref", "update_submodules"]

log = logging.getLogger(__name__)


def _run_streaming(
    repo: Path, args: Sequence[str], env: Mapping[str, str], on_stderr: Callable[[str], None]
) -> GitResult:
    """``git ARGS`` with each stderr line (split at CR or LF, as git's progress meters write
    them) handed to ``on_stderr`` as it arrives. Never raises on a non-zero exit."""
    import git as gitpython

    cmd = ["git", *BASE_OPTIONS, *args]
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


@dataclass(frozen=True)
class Retry:
    """How often a command that talks to a remote is tried, and the first wait (doubled after
    each failure)."""

    times: int = 3
    delay: float = 2.0


def meter(progress: Progress, task: str) -> FetchMeter | None:
    """What reports a fetch's objects to ``progress`` as ``task`` (None: no one is told)."""
    return None if progress is NO_PROGRESS else FetchMeter(progress, task)


class FetchMeter:
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


# What a server answers when it has no such commit or ref: asking again cannot help, so these
# are not retried (a SHA that is not upstream is a wrong --ref, not a flaky network).
_NOT_FOUND = re.compile(
    r"not our ref|couldn't find remote ref|does not allow request for unadvertised object"
    r"|no such remote ref|did not contain [0-9a-f]{40}",
    re.IGNORECASE,
)


# git (2.35.2 and newer) refuses a local repository another user owns (CVE-2022-24765): not
# retried, and said as it is, not as "Could not read from remote repository".
_DUBIOUS = re.compile(r"detected dubious ownership in repository at '([^'\n]*)'")


def _dubious_message(what: str, url: str, path: str) -> str:
    return (
        f"{what} from {mask_url(url)} failed: git refuses the repository {path}, which another "
        f'user owns ("detected dubious ownership"); if you trust it, run '
        f"'git config --global --add safe.directory {path}' as the user who runs rocm-build, "
        "or own the repository (chown) or clone it as your own user"
    )


def _network(
    repo: Path,
    args: Sequence[str],
    *,
    url: str,
    what: str,
    retry: Retry,
    meter: FetchMeter | None = None,
    missing: str = "",
    auth: str = "",
) -> GitResult:
    """A git command that talks to a remote: retried with back-off, then one-line FetchError.
    If the remote says it has no such object (see ``_NOT_FOUND``), it is not retried: with
    ``missing`` (what to tell the user) that is a ``ConfigError``. The credential of ``auth``
    (``url`` when not given) reaches git through its environment (``cmdargs.credentials``)."""
    env = {**NO_PROMPT, **credentials(auth or url)[1]}
    attempts = max(1, retry.times)
    last = ""
    for attempt in range(1, attempts + 1):
        if meter is None:
            res = run(repo, *args, env=env, check=False, quiet=False)
        else:
            res = _run_streaming(repo, args, env, meter.line)
        if res.status == 0:
            if meter is not None:
                meter.finish()
            return res
        lines = [ln.strip() for ln in res.stderr.splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith(("fatal:", "error:"))]
        last = (errors or lines or [f"exit code {res.status}"])[-1]
        if missing and _NOT_FOUND.search(res.stderr):
            raise ConfigError(f"{missing} (git: {mask_url(last)})")
        if dubious := _DUBIOUS.search(res.stderr):
            raise FetchError(_dubious_message(what, url, dubious.group(1)))
        if attempt < attempts:
            wait = retry.delay * 2 ** (attempt - 1)
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
    positional(ref, "ref")
    candidates = [ref] if ref.startswith("refs/") else [f"refs/tags/{ref}", f"refs/heads/{ref}"]
    res = _network(
        repo,
        ["ls-remote", "--", credentials(url)[0], *candidates, *(c + "^{}" for c in candidates)],
        url=url,
        what=f"listing ref '{ref}'",
        retry=Retry(retries, delay),
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
    retry: Retry = Retry(),
    meter: FetchMeter | None = None,
    refetch: bool = False,
    auth: str = "",
) -> str:
    """Fetch exactly ``ref`` (and no other branches or tags); return its commit.

    A tag or SHA whose commit is already here (a tag: under the tag's name) is not fetched
    again, unless ``refetch`` (the store lacks some of its objects: everything is fetched as a
    fresh clone would). Objects received are reported to ``meter`` (see ``FetchMeter``).
    ``auth``: the URL whose credential to send (``url``'s by default)."""
    have = run(repo, "cat-file", "-e", f"{ref.commit}^{{commit}}", check=False).status == 0
    if have and ref.kind == "tag":
        # A fetch killed after its objects but before its refs left the commit without the tag.
        local = ref.refspec.rpartition(":")[2]
        found = run(repo, "rev-parse", "-q", "--verify", f"{local}^{{commit}}", check=False)
        have = found.stdout.strip() == ref.commit
    if have and ref.kind in ("tag", "commit") and not refetch:
        return ref.commit
    args = [
        "fetch",
        "--no-tags",
        "--no-write-fetch-head",
        "--quiet" if meter is None else "--progress",
    ]
    if depth > 0:
        args.append(f"--depth={depth}")
    if refetch:
        args.append("--refetch")
    args += ["--", "origin", ref.refspec]
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
        retry=retry,
        meter=meter,
        missing=missing,
        auth=auth,
    )
    return run(repo, "rev-parse", f"{ref.commit}^{{commit}}").stdout.strip()


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
        retry=Retry(retries, delay),
        missing=missing,
    )
    ignore_submodule_pointers(repo)
