"""One project's checkout as an object: is it up to date, is there a killed run's checkout to
resume (:mod:`.journal`, :mod:`.resume`), is there work in it that is not rocm-build's to refuse
to overwrite, and the run itself (the steps of :mod:`.steps`) under the checkout's and the patch
folder's locks."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocm_build.common import faults, locks, tempfiles
from rocm_build.common.errors import ConfigError, DirtyCheckout, RocmBuildError, ToolMissing
from rocm_build.common.masking import mask_url
from rocm_build.common.progress import Progress
from rocm_build.repo import git
from rocm_build.repo.manifest import (
    MANIFEST_NAME,
    ManifestEntry,
    all_repos,
    has_commit,
    heads_now,
    read_entry,
    stamp,
    state_heads,
    uncommitted,
    update_manifest,
)
from rocm_build.sources import journal, patches, remote, resume
from rocm_build.sources.plan import Plan, ProjectPlan
from rocm_build.sources.resume import Trust
from rocm_build.sources.steps import CheckoutSteps, Done, counts

__all__ = ["ProjectCheckout", "ProjectResult", "checkout_project"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProjectResult:
    name: str
    action: str  # "checked out", "updated", "up to date"
    origin: str
    ref: str
    commit: str
    head: str
    patches: Mapping[str, int] = field(default_factory=dict)  # "<repo>/<stage>" -> count
    hipify: bool = False
    submodules: int = 0
    uncommitted: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action": self.action,
            "origin": mask_url(self.origin),
            "ref": self.ref,
            "commit": self.commit,
            "head": self.head,
            "patches": dict(self.patches),
            "hipify": self.hipify,
            "submodules": self.submodules,
            "uncommitted": list(self.uncommitted),
        }


def checkout_project(
    p: ProjectPlan, settings: Plan, origin: str, ref: str, progress: Progress
) -> ProjectResult:
    """Check out ``p`` at ``origin`` and ``ref`` (its plan's, or what the pins made them)."""
    # Checkout before patch folder, as save-patches does: two runs never wait for each other.
    with (
        locks.hold(p.src, f"the checkout {p.src}", no_wait=settings.no_wait),
        locks.hold(p.patches_root, f"the patch folder {p.patches_root}", no_wait=settings.no_wait),
    ):
        faults.point("checkout.locked")
        # Another run may have changed this entry while we waited for the lock.
        entry = read_entry(settings.manifest_path, p.name)
        jr = journal.CheckoutJournal.read(settings.src_dir, p.name)
        tempfiles.remove_stale(settings.src_dir / journal.JOURNAL_DIR, f".{p.name}.json.")
        series = _series(p)
        target = _resolve(p, entry, settings, origin, ref)
        new_stamp = stamp(
            origin=origin,
            ref=ref,
            commit=target.commit,
            patchset=p.patchset,
            series=[(s.rel, s.sha256) for s in series],
            hipify=p.hipify,
            apply_patches=p.apply_patches,
        )
        checkout = ProjectCheckout(
            p, settings, origin, ref, target, series, new_stamp, entry, progress
        )
        return checkout.run(jr)


def _resolve(
    p: ProjectPlan, entry: ManifestEntry | None, settings: Plan, origin: str, ref: str
) -> git.Ref:
    if p.pin_commit:
        return git.Ref(ref, "commit", p.pin_commit, p.pin_commit)
    if not ref:
        msg = (
            f"no ref for project '{p.name}' in train and no related_commits pin; "
            f"pass --ref {p.name}=REF"
        )
        raise ConfigError(msg)
    if (
        entry is not None
        and entry.origin == mask_url(origin)
        and entry.ref == ref
        and entry.ref_kind in ("tag", "commit")
        and entry.commit
    ):
        # Tags and SHAs do not move: no network on a re-run.
        kind, commit = entry.ref_kind, entry.commit
        refspec = commit if kind == "commit" else f"+refs/tags/{ref}:refs/tags/{ref}"
        return git.Ref(ref, kind, commit, refspec)
    cwd = p.src if git.is_repo(p.src) else settings.src_dir
    cwd.mkdir(parents=True, exist_ok=True)
    return remote.resolve_ref(
        cwd, origin, ref, retries=settings.retries, delay=settings.retry_delay
    )


def _series(p: ProjectPlan) -> tuple[patches.PatchFile, ...]:
    if not p.apply_patches:
        return ()
    patches.recover(p.patches_root)
    series = patches.list_series(p.patches_root)
    if p.expect_patches is not None:
        have = tuple((s.rel, s.sha256) for s in series)
        if have != p.expect_patches:
            want = {f for f, _ in p.expect_patches}
            differ = sorted({f for f, _ in have} ^ want) or [
                f for (f, h), (_, g) in zip(have, p.expect_patches, strict=False) if h != g
            ]
            msg = (
                f"the patch series in {p.patches_root} differs from the manifest "
                f"({', '.join(differ[:3]) or 'order'}); restore the patches it was made with"
            )
            raise ConfigError(msg)
    return series


class ProjectCheckout(CheckoutSteps):
    """One project's checkout (its values: see ``CheckoutSteps``): ``run`` asks whether it is
    ``up_to_date``, ``resume``s a killed run's, ``refuse_unsafe``s another's work, then runs
    the steps under a journal."""

    def run(self, jr: journal.CheckoutJournal | None) -> ProjectResult:
        p = self.p
        done = self.up_to_date(jr)
        if done is not None:
            return done
        if jr is not None and not self.resume(jr):
            jr = None  # nothing of the interrupted run is left
        self.refuse_unsafe(resuming=jr is not None)
        existed = git.is_repo(p.src)
        created = not p.src.exists() or bool(jr and jr.data.get("created"))
        jr = journal.CheckoutJournal.begin(
            self.settings.src_dir,
            p.name,
            created=created,
            target=self.target.commit,
            heads=heads_now(p.src),
        )
        faults.point("checkout.journal-begun")
        try:
            result = self._checked_out(self.do_checkout(existed=existed, jr=jr), existed=existed)
        except RocmBuildError:
            self._record_failure(created=created)
            jr.clear()  # the failed step restored its repository: nothing of ours half done
            raise
        except BaseException:
            # Interrupted (Ctrl-C): the journal stays, so the next run finishes the job.
            self._record_failure(created=created)
            raise
        jr.clear()
        faults.point("checkout.journal-cleared")
        return replace(result, action="checked out") if created else result

    def up_to_date(self, jr: journal.CheckoutJournal | None) -> ProjectResult | None:
        """The result of a checkout whose stamp and HEADs are what the manifest recorded (a
        journal left at the manifest step is cleared: the checkout was complete, only not yet
        told); None when it is not."""
        p, entry = self.p, self.entry
        if (
            entry is None
            or not entry.complete
            or entry.stamp != self.stamp
            or not git.is_repo(p.src)
            or (jr is not None and jr.last_step != "manifest")
        ):
            return None
        heads = state_heads(p.src)
        if heads != entry.heads:
            return None
        if jr is not None:
            jr.clear()
        return ProjectResult(
            name=p.name,
            action="up to date",
            origin=self.origin,
            ref=self.ref,
            commit=self.target.commit,
            head=heads["."],
            patches=counts(self.series),
            hipify=entry.hipify,
            submodules=len(heads) - 1,
            uncommitted=tuple(uncommitted(p.src, list(heads))),
        )

    def refuse_unsafe(self, *, resuming: bool) -> None:
        """Refuse to overwrite what is not a checkout (even with --force), git state that is
        not ours, or work in an existing checkout (unless --force); a resumed checkout's work
        was checked by ``resume``."""
        p = self.p
        if p.src.exists() and any(p.src.iterdir()) and not git.is_repo(p.src):
            # Not even --force: this is not a checkout, it may be anything.
            msg = (
                f"{p.src} exists and is not a git checkout; move it away or choose another "
                "--src-dir"
            )
            raise DirtyCheckout(msg)
        if not resuming and git.is_repo(p.src):
            _refuse_stale_git(p, force=self.settings.force)
        if not self.settings.force and not resuming:
            _check_safe(p, self.entry)

    def resume(self, jr: journal.CheckoutJournal) -> bool:
        """An interrupted checkout of ours: repair what the killed git steps damaged, check
        that nothing in it is the user's (by content, not on the journal's word), then clear
        what the killed steps left. Returns False if there is nothing to resume."""
        p, src = self.p, self.p.src
        if jr.data.get("created") is True and _half_initialised(src):
            # `git init` killed before it wrote HEAD: no commit can exist, the work tree is empty
            log.info("%s: removing the repository a killed run left half initialised", p.name)
            shutil.rmtree(src)
        if not git.is_repo(src):
            if src.exists() and not any(src.iterdir()):
                src.rmdir()
            jr.clear()
            return False
        log.info("%s: finishing the checkout a killed run left at step '%s'", p.name, jr.last_step)
        trust = Trust(self.target.commit, self.entry.heads if self.entry else {})
        tempfiles.remove_stale(src.parent, resume.scratch_prefix(src.name))
        journal.clear_git_leftovers(src, [(".", src)], am=False)
        if jr.last_step in resume.GIT_WRITING_STEPS:
            journal.remove_object_temps([(".", src)])
            self._repair_store([(".", src)], trust)
        if has_commit(src):
            journal.drop_half_cloned(src)
        repos = all_repos(src) if has_commit(src) else [(".", src)]
        journal.clear_git_leftovers(src, repos, am=False)
        if jr.last_step in resume.GIT_WRITING_STEPS:
            journal.remove_object_temps(repos[1:])
            self._repair_store(repos[1:], trust)
        if not self.settings.force:
            foreign = resume.foreign_repos(src, repos, trust)
            if foreign:
                where = ", ".join(p.name if rel == "." else rel for rel in foreign)
                raise DirtyCheckout(resume.stale_commit_advice(src, p.name, where))
            resume.check_changes(
                src,
                p.name,
                repos,
                jr,
                trust=trust,
                hipify=p.hipify,
                log_file=self.settings.log_dir / f"checkout-{p.name}-hipify-check.log",
            )
        journal.clear_git_leftovers(src, repos)
        return True

    def _checked_out(self, done: Done, *, existed: bool) -> ProjectResult:
        heads = state_heads(self.p.src)
        return ProjectResult(
            name=self.p.name,
            action="updated" if existed else "checked out",
            origin=self.origin,
            ref=self.ref,
            commit=done.commit,
            head=heads["."],
            patches=counts(self.series),
            hipify=done.ran_hipify,
            submodules=len(heads) - 1,
        )

    def _record_failure(self, *, created: bool) -> None:
        src = self.p.src
        if created and (not git.is_repo(src) or not has_commit(src)):
            shutil.rmtree(src, ignore_errors=True)
        elif git.is_repo(src) and has_commit(src):
            # Record what is there now, so the next run may redo it without --force.
            try:
                entry = self.entry_now(complete=False)
                update_manifest(self.settings.manifest_path, self.p.name, entry.as_json())
            except RocmBuildError:
                log.debug("could not record the interrupted checkout of %s", self.p.name)

    def _repair_store(self, repos: list[tuple[str, Path]], trust: Trust) -> None:
        """A kill inside git's fetch can leave a commit without all its objects: fetch it
        again, as a fresh clone would (only the object store and the fetched ref change; no
        commit or file is touched). The project's own repository fetches the target (a tag
        gets its name), a submodule the commit its parent records. That takes ``git fetch
        --refetch``: an older git stops here with one line, not git's own usage text after
        every retry."""
        p, src = self.p, self.p.src
        damaged = resume.damaged(src, repos, trust)
        if damaged and (too_old := git.refetch_problem(git.version())):
            where = ", ".join(p.name if rel == "." else rel for rel, _ in damaged)
            msg = (
                f"{p.name}: the killed checkout in {src} lacks objects of {where} (a killed "
                f"fetch) that only a refetch brings back, and {too_old}, then run the same "
                "command again"
            )
            raise ToolMissing(msg)
        for rel, commit in damaged:
            path = src if rel == "." else src / rel
            url = self.origin if rel == "." else git.run(path, "remote", "get-url", "origin").stdout
            log.info(
                "%s: %s lacks objects of %s (a killed fetch): fetching again", p.name, rel, commit
            )
            faults.point("checkout.before-refetch")
            remote.fetch(
                path,
                url.strip(),
                self.target if rel == "." else git.Ref(commit, "commit", commit, commit),
                depth=p.depth,
                retry=remote.Retry(self.settings.retries, self.settings.retry_delay),
                refetch=True,
                auth=self.origin,
            )


def _check_safe(p: ProjectPlan, entry: ManifestEntry | None) -> None:
    """Refuse to overwrite work in an existing checkout (unless --force)."""
    src = p.src
    if not src.exists() or (src.is_dir() and not any(src.iterdir())):
        return
    save_hint = f"run `rocm-build save-patches {p.name}` to keep them, or pass --force to discard"
    if entry is None:
        msg = (
            f"{src} is a git checkout that rocm-build did not make (not in {MANIFEST_NAME}); "
            "move it away, or pass --force to reuse it and discard its changes"
        )
        raise DirtyCheckout(msg)
    dirty = uncommitted(src)
    if dirty:
        more = f" and {len(dirty) - 3} more" if len(dirty) > 3 else ""
        msg = (
            f"{src} has uncommitted changes ({', '.join(dirty[:3])}{more}); commit them and "
            + save_hint
        )
        raise DirtyCheckout(msg)
    recorded = entry.heads
    foreign: list[str] = []
    for rel, path in all_repos(src):
        want = recorded.get(rel)
        if want and git.head(path) != want:
            foreign.append(p.name if rel == "." else rel)
    if foreign:
        msg = (
            f"{src} has commits that are not from the patch series (in {', '.join(foreign)}); "
            + save_hint
        )
        raise DirtyCheckout(msg)


def _half_initialised(src: Path) -> bool:
    """``src`` holds only a ``.git`` folder without a HEAD (what a killed ``git init`` leaves):
    nothing of anyone's is in it."""
    dot_git = src / ".git"
    try:
        return (
            dot_git.is_dir()
            and not dot_git.is_symlink()
            and not (dot_git / "HEAD").exists()
            and [e.name for e in src.iterdir()] == [".git"]
        )
    except OSError:
        return False


def _refuse_stale_git(p: ProjectPlan, *, force: bool) -> None:
    """No journal: a lock file or an am in progress is not ours. --force drops an am in
    progress (the user asked to discard local work); a lock file may belong to a live git."""
    repos = all_repos(p.src) if has_commit(p.src) else [(".", p.src)]
    stale = journal.stale_git_state(repos)
    if stale:
        raise journal.refuse_stale(p.src, stale)
    if force:
        for _rel, path in repos:
            if (git.git_dir(path) / "rebase-apply").is_dir():
                git.run(path, "am", "--abort", check=False)
                shutil.rmtree(git.git_dir(path) / "rebase-apply", ignore_errors=True)
