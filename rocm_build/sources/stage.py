"""The checkout stage: fetch, pin, tag, patch, hipify.

``sourceplan.plan`` turns the settings (and an optional manifest to replay) into a frozen
``CheckoutPlan``; ``execute`` walks it, one project at a time under its locks, with the steps of
``checkoutsteps``. Each project's inputs (origin, ref -> commit, patch hashes, hipify command,
flags) are hashed into a stamp kept in ``<src-dir>/rocm-build-sources.json``; a re-run whose stamp
and checkout state match does nothing.

Moving branches: a tag or full SHA is taken as immutable, so a re-run needs no network. A branch
is re-checked with one ``git ls-remote`` (no objects are fetched): if it moved, the project is
checked out again at the new commit; if not, it is up to date.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rocm_build import faults, locks, tempfiles
from rocm_build.errors import ConfigError, DirtyCheckout, RocmBuildError, ToolMissing
from rocm_build.masking import mask_url
from rocm_build.progress import NO_PROGRESS, Progress
from rocm_build.repo import checkoutfile, git, tritonpin
from rocm_build.repo.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    RELATED_COMMITS,
    RelatedCommit,
    all_repos,
    has_commit,
    heads_now,
    parse_related_commits,
    read_manifest,
    recorded_heads,
    stamp,
    state_heads,
    uncommitted,
    update_manifest,
    write_manifest,
)
from rocm_build.sources import checkoutsteps, gitremote, journal, patches, resumecheck
from rocm_build.sources.sourceplan import (
    CheckoutPlan,
    CheckoutResult,
    ProjectPlan,
    ProjectResult,
)

__all__ = [
    "MANIFEST_NAME",
    "CheckoutPlan",
    "CheckoutResult",
    "ProjectPlan",
    "ProjectResult",
    "RelatedCommit",
    "execute",
    "parse_related_commits",
    "read_manifest",
    "stamp",
    "write_manifest",
]

log = logging.getLogger(__name__)


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
    return gitremote.resolve_ref(
        cwd, p.origin, p.ref, retries=plan_.retries, delay=plan_.retry_delay
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


def execute(plan_: CheckoutPlan, progress: Progress = NO_PROGRESS) -> CheckoutResult:
    """Check out every project of the plan; per project, objects fetched and files hipified
    are reported to ``progress``."""
    manifest = read_manifest(plan_.manifest_path)
    entries: dict[str, Any] = manifest.setdefault("projects", {})
    manifest["format"] = MANIFEST_FORMAT
    pins: dict[str, RelatedCommit] = {}
    selected = {p.name for p in plan_.projects}
    for name in entries:
        if name not in selected:
            pins.update(_related(plan_.src_dir / name))
    results: list[ProjectResult] = []
    for p in plan_.projects:
        pin = pins.get(p.name)
        if pin is not None and not p.ref_given and not p.pin_commit:
            log.info("%s: pinned to %s by related_commits", p.name, pin.commit[:12])
            p = replace(p, ref=pin.commit, origin=p.origin if p.origin_given else pin.origin)
        if p.pinned_by and not p.ref_given and not p.pin_commit:
            results.append(_checkout_pinned(p, plan_, entries, progress))
        else:
            results.append(_checkout_project(p, plan_, entries, progress))
        pins.update(_related(p.src))
    return CheckoutResult(plan_.manifest_path, tuple(results))


def _checkout_pinned(
    p: ProjectPlan, plan_: CheckoutPlan, entries: dict[str, Any], progress: Progress
) -> ProjectResult:
    """A project whose ref the checkout of ``p.pinned_by`` pins (triton: torch's pin files)."""
    pin = tritonpin.read_pin(plan_.src_dir / p.pinned_by, release=p.pin_release, pinner=p.pinned_by)
    log.info("%s: %s pinned by %s", p.name, pin.ref, pin.source)
    try:
        return _checkout_project(replace(p, ref=pin.ref), plan_, entries, progress)
    except ConfigError as exc:
        msg = f"{exc} (the ref comes from {pin.source}; pass --ref {p.name}=REF to override)"
        raise ConfigError(msg) from None


def _related(src: Path) -> dict[str, RelatedCommit]:
    text = checkoutfile.read_text(src, RELATED_COMMITS, f"{src.name}'s {RELATED_COMMITS}")
    return parse_related_commits(text) if text is not None else {}


def _checkout_project(
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
                patches=checkoutsteps.counts(series),
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
        result = checkoutsteps.do_checkout(
            p, plan_, entries, ref, series, new_stamp, existed=existed, progress=progress, jr=jr
        )
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
            entries[p.name] = checkoutsteps.entry(p, ref, series=(), stamp_="", complete=False)
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
    trust = resumecheck.Trust(ref.commit, recorded_heads(entry) if entry is not None else {})
    tempfiles.remove_stale(p.src.parent, resumecheck.scratch_prefix(p.src.name))
    journal.clear_git_leftovers(p.src, [(".", p.src)], am=False)
    if jr.last_step in resumecheck.GIT_WRITING_STEPS:
        journal.remove_object_temps([(".", p.src)])
        _repair_store(p, plan_, [(".", p.src)], trust, ref)
    if has_commit(p.src):
        journal.drop_half_cloned(p.src)
    repos = all_repos(p.src) if has_commit(p.src) else [(".", p.src)]
    journal.clear_git_leftovers(p.src, repos, am=False)
    if jr.last_step in resumecheck.GIT_WRITING_STEPS:
        journal.remove_object_temps(repos[1:])
        _repair_store(p, plan_, repos[1:], trust, ref)
    if not plan_.force:
        foreign = resumecheck.foreign_repos(p.src, repos, trust)
        if foreign:
            where = ", ".join(p.name if rel == "." else rel for rel in foreign)
            raise DirtyCheckout(resumecheck.stale_commit_advice(p.src, p.name, where))
        resumecheck.check_changes(
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
    trust: resumecheck.Trust,
    ref: git.Ref,
) -> None:
    """A kill inside git's fetch can leave a commit without all its objects: fetch it again,
    as a fresh clone would (only the object store and the fetched ref change; no commit or
    file is touched). The project's own repository fetches ``ref`` (a tag gets its name), a
    submodule the commit its parent records. That takes ``git fetch --refetch``: an older git
    stops here with one line, not git's own usage text after every retry."""
    damaged = resumecheck.damaged(p.src, repos, trust)
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
        gitremote.fetch(
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
