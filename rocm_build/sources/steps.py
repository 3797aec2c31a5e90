"""The steps of one project's checkout: fetch, check out, submodules, tag, patch, hipify.

Each step is announced to the checkout journal before it starts (a killed run is recognised as
that step of ours and finished by the next run) and has a fault point around it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.common import faults, proc
from rocm_build.common.errors import ConfigError, RocmBuildError
from rocm_build.common.masking import mask_url
from rocm_build.common.progress import Progress
from rocm_build.repo import git, manifest
from rocm_build.sources import journal, patches, remote
from rocm_build.sources.plan import Plan, ProjectPlan

__all__ = ["CheckoutSteps", "Done", "counts"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Done:
    """What the steps did: the upstream commit checked out, and whether hipify ran."""

    commit: str
    ran_hipify: bool


def counts(series: Sequence[patches.PatchFile]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in series:
        key = f"{s.repo}/{s.stage}"
        out[key] = out.get(key, 0) + 1
    return out


@dataclass(frozen=True)
class CheckoutSteps:
    """One project's checkout, as its steps see it: the project's plan, the stage's settings,
    the origin and ref it goes to (its plan's, or the pins' when the plan lets them decide),
    what the ref resolved to, the series, the stamp of all that, and the manifest's entry as
    the run found it."""

    p: ProjectPlan
    settings: Plan
    origin: str
    ref: str
    target: git.Ref
    series: tuple[patches.PatchFile, ...]
    stamp: str
    entry: manifest.ManifestEntry | None
    progress: Progress

    def do_checkout(self, *, existed: bool, jr: journal.CheckoutJournal) -> Done:
        """The steps, each announced to ``jr`` first; the manifest's entry is written last."""
        p, src = self.p, self.p.src

        def step(name: str) -> None:
            # The intent first: a kill from here on is recognised as this step of ours.
            jr.step(name, manifest.heads_now(src))
            faults.point(f"checkout.before-{name}")

        commit = self._fetch_and_check_out(existed=existed, step=step)
        repos = manifest.all_repos(src)
        known = {rel for rel, _ in repos}
        stray = sorted({s.repo for s in self.series} - known)
        if stray:
            msg = (
                f"{p.patches_root} has patches for {', '.join(stray)}, which {p.name} at "
                f"{self.target.name} has no submodule for; rename the folder to the submodule's "
                "path or remove it"
            )
            raise ConfigError(msg)
        step("tag")
        for _rel, path in repos:
            git.set_tag(path, patches.UPSTREAM_TAG)
            if existed:
                git.clean_untracked(path)
        step("base-patches")
        for repo_rel, files in patches.by_repo(self.series, "base").items():
            patches.apply_series(src, p.name, repo_rel, files)
        ran_hipify = False
        if p.hipify:
            step("hipify")
            self._hipify(commit)
            faults.point("checkout.after-hipify")
            ran_hipify = True
        step("hipified-patches")
        for repo_rel, files in patches.by_repo(self.series, "hipified").items():
            patches.apply_series(src, p.name, repo_rel, files)
        done = self.entry_now(complete=True, ran_hipify=ran_hipify)
        step("manifest")
        manifest.update_manifest(self.settings.manifest_path, p.name, done.as_json())
        faults.point("checkout.after-manifest")
        return Done(commit, ran_hipify)

    def _fetch_and_check_out(self, *, existed: bool, step: Callable[[str], None]) -> str:
        """The steps up to the upstream state: fetch, check out the commit, its submodules."""
        p, src, ref, settings = self.p, self.p.src, self.target, self.settings
        step("fetch")
        if not existed:
            git.init(src, self.origin)
        else:
            git.set_origin(src, self.origin)
        log.info("%s: fetching %s %s from %s", p.name, ref.kind, ref.name, self.origin)
        commit = remote.fetch(
            src,
            self.origin,
            ref,
            depth=p.depth,
            retry=remote.Retry(settings.retries, settings.retry_delay),
            meter=remote.meter(self.progress, f"{p.name}: objects fetched"),
        )
        faults.point("checkout.after-fetch")
        step("checkout")
        for _rel, path in (
            reversed(manifest.all_repos(src)) if existed and manifest.has_commit(src) else []
        ):
            git.run(path, "tag", "-d", patches.HIPIFY_TAG, check=False)
        git.checkout_detached(src, commit, force=existed)
        faults.point("checkout.after-checkout")
        if existed:
            git.clean_untracked(src)
        step("submodules")
        remote.update_submodules(
            src,
            self.origin,
            depth=p.depth,
            jobs=settings.jobs,
            retries=settings.retries,
            delay=settings.retry_delay,
        )
        return commit

    def entry_now(self, *, complete: bool, ran_hipify: bool = False) -> manifest.ManifestEntry:
        """The manifest's entry for the checkout as it is now (an unfinished one: no series
        and no stamp, so that the next run redoes it)."""
        p, src = self.p, self.p.src
        return manifest.ManifestEntry(
            origin=mask_url(self.origin),  # git's remote config keeps the real one
            ref=self.ref,
            ref_kind=self.target.kind,
            commit=git.tag_commit(src, patches.UPSTREAM_TAG) or self.target.commit,
            head=git.head(src),
            submodules=tuple(
                manifest.SubmoduleEntry(
                    s.path,
                    git.tag_commit(src / s.path, patches.UPSTREAM_TAG) or s.commit,
                    git.head(src / s.path),
                )
                for s in git.submodules(src)
            ),
            patchset=p.patchset,
            patches_dir=str(p.patches_root),
            patches=tuple(s.as_json() for s in self.series) if complete else (),
            apply_patches=p.apply_patches,
            hipify=ran_hipify,
            hipify_command=p.hipify,
            depth=p.depth,
            stamp=self.stamp if complete else "",
            complete=complete,
        )

    def _hipify(self, upstream: str) -> None:
        """Run the project's hipify command and commit its result in every repo.

        A hipify command has no common progress stream, so the number of files it changed is
        counted afterwards (``git status`` of every repo) and reported as one step of
        "<project>: files hipified". Files it writes that the project's ``.gitignore`` hides
        (``*.hip``, ``hip/``) are its output too: they are committed (and so tracked, protected
        and saved by save-patches like any other file)."""
        p, src, progress = self.p, self.p.src, self.progress
        cmd = [a.replace("{python}", sys.executable) for a in p.hipify]
        log_file = self.settings.log_dir / f"checkout-{p.name}-hipify.log"
        log.info("%s: hipify: %s (log: %s)", p.name, " ".join(cmd), log_file)
        task = f"{p.name}: files hipified"
        progress.start(task, None)
        repos = manifest.all_repos(src)
        ignored_before = {rel: git.ignored_files(path) for rel, path in repos}
        # No bytecode: a Python hipify's __pycache__ would look like ignored output.
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            proc.run(cmd, cwd=src, env=env, log_file=log_file, what=f"hipify of {p.name}")
        except RocmBuildError:
            progress.done(task)
            # Leave no half-hipified files: the tree stays as the base series left it.
            for rel, path in repos:
                git.run(path, "reset", "-q", "--hard", "HEAD")
                git.clean_untracked(path)
                for name in _written_ignored(path, ignored_before[rel]):
                    if name not in ignored_before[rel]:
                        (path / name).unlink(missing_ok=True)
            raise
        written = {rel: _written_ignored(path, ignored_before[rel]) for rel, path in repos}
        changed = sum(len(git.changed_paths(path)) + len(written[rel]) for rel, path in repos)
        log.info(
            "%s: hipify changed %d file(s)%s",
            p.name,
            changed,
            f" ({sum(map(len, written.values()))} of them ignored by .gitignore, committed anyway)"
            if any(written.values())
            else "",
        )
        if not changed:
            log.warning(
                "%s: hipify changed no files; check the project's hipify command (%s)",
                p.name,
                " ".join(p.hipify),
            )
        progress.start(task, changed)
        progress.advance(task, changed)
        progress.done(task)
        date = git.commit_date(src, upstream)
        # Children first: a parent's commit never includes submodule pointers anyway.
        for rel, path in reversed(repos):
            git.add_forced(path, written[rel])
            git.commit_all(path, patches.HIPIFY_SUBJECT, date=date)
            git.set_tag(path, patches.HIPIFY_TAG)


def _written_ignored(repo: Path, before: Mapping[str, git.FileStamp]) -> list[str]:
    """Ignored files in ``repo`` that are new or changed since ``before`` (bytecode caches
    aside): what a step such as hipify wrote where the project's ignore rules hide it."""
    return sorted(
        rel
        for rel, stamp_ in git.ignored_files(repo).items()
        if before.get(rel) != stamp_
        and "__pycache__" not in rel.split("/")
        and not rel.endswith((".pyc", ".pyo"))
    )
