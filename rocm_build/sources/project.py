"""One project's checkout: refuse to overwrite work that is not rocm-build's, tell an up-to-date
checkout, resume one a killed run left (:mod:`.journal`, :mod:`.resume`), and run the steps of
:mod:`.steps` under the checkout's and the patch folder's locks."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocm_build import faults, locks, tempfiles
from rocm_build.errors import ConfigError, DirtyCheckout, RocmBuildError, ToolMissing
from rocm_build.masking import mask_url
from rocm_build.progress import Progress
from rocm_build.repo import git
from rocm_build.repo.manifest import (
    MANIFEST_NAME,
    all_repos,
    has_commit,
    heads_now,
    read_manifest,
    recorded_heads,
    stamp,
    state_heads,
    uncommitted,
    update_manifest,
)
from rocm_build.sources import journal, patches, remote, resume, steps
from rocm_build.sources.plan import CheckoutPlan, ProjectPlan

__all__ = ["ProjectResult", "checkout_project"]

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


def _check_safe(p: ProjectPlan, entry: Mapping[str, Any] | None) -> None:
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
    recorded = recorded_heads(entry)
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


def _resolve(p: ProjectPlan, entry: Mapping[str, Any] | None, plan_: CheckoutPlan) -> git.Ref:
    if p.pin_commit:
        return git.Ref(p.ref, "commit", p.pin_commit, p.pin_commit)
    if not p.ref:
        msg = (
            f"no ref for project '{p.name}' in train and no related_commits pin; "
            f"pass --ref {p.name}=REF"
        )
        raise ConfigError(msg)
    if (
        entry is not None
        and entry.get("origin") == mask_url(p.origin)
        and entry.get("ref") == p.ref
        and entry.get("ref_kind") in ("tag", "commit")
        and entry.get("commit")
    ):
        # Tags and SHAs do not move: no network on a re-run.
        kind = str(entry["ref_kind"])
        commit = str(entry["commit"])
        refspec = commit if kind == "commit" else f"+refs/tags/{p.ref}:refs/tags/{p.ref}"
        return git.Ref(p.ref, kind, commit, refspec)
    cwd = p.src if git.is_repo(p.src) else plan_.src_dir
    cwd.mkdir(parents=True, exist_ok=True)
    return remote.resolve_ref(cwd, p.origin, p.ref, retries=plan_.retries, delay=plan_.retry_delay)


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


def checkout_project(
    p: ProjectPlan, plan_: CheckoutPlan, entries: dict[str, Any], progress: Progress
) -> ProjectResult:
    # Checkout before patch folder, as save-patches does: two runs never wait for each other.
    with (
        locks.hold(p.src, f"the checkout {p.src}", no_wait=plan_.no_wait),
        locks.hold(p.patches_root, f"the patch folder {p.patches_root}", no_wait=plan_.no_wait),
    ):
        faults.point("checkout.locked")
        # Another run may have changed this entry while we waited for the lock.
        entry = read_manifest(plan_.manifest_path)["projects"].get(p.name)
        if entry is None:
            entries.pop(p.name, None)
        else:
            entries[p.name] = entry
        return _checkout_locked(p, plan_, entries, progress)


def _checkout_locked(
    p: ProjectPlan, plan_: CheckoutPlan, entries: dict[str, Any], progress: Progress
) -> ProjectResult:
    entry = entries.get(p.name)
    depth = plan_.depth if p.depth is None else p.depth  # a replay's may differ per project
    p, plan_ = replace(p, depth=depth), replace(plan_, depth=depth)
    jr = journal.CheckoutJournal.read(plan_.src_dir, p.name)
    tempfiles.remove_stale(plan_.src_dir / journal.JOURNAL_DIR, f".{p.name}.json.")
    series = _series(p)
    ref = _resolve(p, entry, plan_)
    hipify_template = p.hipify
    new_stamp = stamp(
        origin=p.origin,
        ref=p.ref,
        commit=ref.commit,
        patchset=p.patchset,
        series=[(s.rel, s.sha256) for s in series],
        hipify=hipify_template,
        apply_patches=p.apply_patches,
    )
    if (
        entry is not None
        and entry.get("complete")
        and entry.get("stamp") == new_stamp
        and git.is_repo(p.src)
        # A journal left at the manifest step: the checkout was complete, only not yet told.
        and (jr is None or jr.last_step == "manifest")
    ):
        heads = state_heads(p.src)
        if heads == recorded_heads(entry):
            if jr is not None:
                jr.clear()
            return ProjectResult(
                name=p.name,
                action="up to date",
                origin=p.origin,
                ref=p.ref,
                commit=ref.commit,
                head=heads["."],
                patches=steps.counts(series),
                hipify=bool(entry.get("hipify")),
                submodules=len(heads) - 1,
                uncommitted=tuple(uncommitted(p.src, list(heads))),
            )
    if jr is not None and not _resume(p, plan_, jr, ref, entry):
        jr = None  # nothing of the interrupted run is left
    if p.src.exists() and any(p.src.iterdir()) and not git.is_repo(p.src):
        # Not even --force: this is not a checkout, it may be anything.
        msg = f"{p.src} exists and is not a git checkout; move it away or choose another --src-dir"
        raise DirtyCheckout(msg)
    if jr is None and git.is_repo(p.src):
        _refuse_stale_git(p, force=plan_.force)
    if not plan_.force and jr is None:
        _check_safe(p, entry)
    existed = git.is_repo(p.src)
    created = not p.src.exists() or bool(jr and jr.data.get("created"))
    jr = journal.CheckoutJournal.begin(
        plan_.src_dir, p.name, created=created, target=ref.commit, heads=heads_now(p.src)
    )
    faults.point("checkout.journal-begun")
    try:
        done = steps.do_checkout(
            p, plan_, entries, ref, series, new_stamp, existed=existed, progress=progress, jr=jr
        )
        result = _checked_out(p, done, series, existed=existed)
    except RocmBuildError:
        _record_failure(p, plan_, entries, ref, created=created)
        jr.clear()  # the failed step restored its repository: nothing of ours half done
        raise
    except BaseException:
        # Interrupted (Ctrl-C): the journal stays, so the next run finishes the job.
        _record_failure(p, plan_, entries, ref, created=created)
        raise
    jr.clear()
    faults.point("checkout.journal-cleared")
    return replace(result, action="checked out") if created else result


def _checked_out(
    p: ProjectPlan, done: steps.Done, series: tuple[patches.PatchFile, ...], *, existed: bool
) -> ProjectResult:
    heads = state_heads(p.src)
    return ProjectResult(
        name=p.name,
        action="updated" if existed else "checked out",
        origin=p.origin,
        ref=p.ref,
        commit=done.commit,
        head=heads["."],
        patches=steps.counts(series),
        hipify=done.ran_hipify,
        submodules=len(heads) - 1,
    )


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


def _record_failure(
    p: ProjectPlan, plan_: CheckoutPlan, entries: dict[str, Any], ref: git.Ref, *, created: bool
) -> None:
    if created and (not git.is_repo(p.src) or not has_commit(p.src)):
        shutil.rmtree(p.src, ignore_errors=True)
    elif git.is_repo(p.src) and has_commit(p.src):
        # Record what is there now, so the next run may redo it without --force.
        try:
            entries[p.name] = steps.entry(p, ref, series=(), stamp_="", complete=False)
            update_manifest(plan_.manifest_path, p.name, entries[p.name])
        except RocmBuildError:
            log.debug("could not record the interrupted checkout of %s", p.name)


def _resume(
    p: ProjectPlan,
    plan_: CheckoutPlan,
    jr: journal.CheckoutJournal,
    ref: git.Ref,
    entry: Mapping[str, Any] | None,
) -> bool:
    """An interrupted checkout of ours: repair what the killed git steps damaged, check that
    nothing in it is the user's (by content, not on the journal's word), then clear what the
    killed steps left. Returns False if there is nothing to resume."""
    if jr.data.get("created") is True and _half_initialised(p.src):
        # `git init` killed before it wrote HEAD: no commit can exist, the work tree is empty
        log.info("%s: removing the repository a killed run left half initialised", p.name)
        shutil.rmtree(p.src)
    if not git.is_repo(p.src):
        if p.src.exists() and not any(p.src.iterdir()):
            p.src.rmdir()
        jr.clear()
        return False
    log.info("%s: finishing the checkout a killed run left at step '%s'", p.name, jr.last_step)
    trust = resume.Trust(ref.commit, recorded_heads(entry) if entry is not None else {})
    tempfiles.remove_stale(p.src.parent, resume.scratch_prefix(p.src.name))
    journal.clear_git_leftovers(p.src, [(".", p.src)], am=False)
    if jr.last_step in resume.GIT_WRITING_STEPS:
        journal.remove_object_temps([(".", p.src)])
        _repair_store(p, plan_, [(".", p.src)], trust, ref)
    if has_commit(p.src):
        journal.drop_half_cloned(p.src)
    repos = all_repos(p.src) if has_commit(p.src) else [(".", p.src)]
    journal.clear_git_leftovers(p.src, repos, am=False)
    if jr.last_step in resume.GIT_WRITING_STEPS:
        journal.remove_object_temps(repos[1:])
        _repair_store(p, plan_, repos[1:], trust, ref)
    if not plan_.force:
        foreign = resume.foreign_repos(p.src, repos, trust)
        if foreign:
            where = ", ".join(p.name if rel == "." else rel for rel in foreign)
            raise DirtyCheckout(resume.stale_commit_advice(p.src, p.name, where))
        resume.check_changes(
            p.src,
            p.name,
            repos,
            step=jr.last_step,
            heads=jr.heads()[0],
            begin_heads=jr.step_heads(0),
            step_heads=jr.step_heads(),
            trust=trust,
            hipify=p.hipify,
            log_file=plan_.log_dir / f"checkout-{p.name}-hipify-check.log",
        )
    journal.clear_git_leftovers(p.src, repos)
    return True


def _repair_store(
    p: ProjectPlan,
    plan_: CheckoutPlan,
    repos: list[tuple[str, Path]],
    trust: resume.Trust,
    ref: git.Ref,
) -> None:
    """A kill inside git's fetch can leave a commit without all its objects: fetch it again,
    as a fresh clone would (only the object store and the fetched ref change; no commit or
    file is touched). The project's own repository fetches ``ref`` (a tag gets its name), a
    submodule the commit its parent records. That takes ``git fetch --refetch``: an older git
    stops here with one line, not git's own usage text after every retry."""
    damaged = resume.damaged(p.src, repos, trust)
    if damaged and (too_old := git.refetch_problem(git.version())):
        where = ", ".join(p.name if rel == "." else rel for rel, _ in damaged)
        msg = (
            f"{p.name}: the killed checkout in {p.src} lacks objects of {where} (a killed "
            f"fetch) that only a refetch brings back, and {too_old}, then run the same command "
            "again"
        )
        raise ToolMissing(msg)
    for rel, commit in damaged:
        path = p.src if rel == "." else p.src / rel
        url = p.origin if rel == "." else git.run(path, "remote", "get-url", "origin").stdout
        log.info("%s: %s lacks objects of %s (a killed fetch): fetching again", p.name, rel, commit)
        faults.point("checkout.before-refetch")
        remote.fetch(
            path,
            url.strip(),
            ref if rel == "." else git.Ref(commit, "commit", commit, commit),
            depth=plan_.depth,
            retries=plan_.retries,
            delay=plan_.retry_delay,
            refetch=True,
            auth=p.origin,
        )


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
