"""The checkout stage: fetch, pin, tag, patch, hipify; and save-patches.

``plan`` turns the Config (and an optional manifest to replay) into a frozen ``CheckoutPlan``;
``execute`` walks it. Each project's inputs (origin, ref -> commit, patch hashes, hipify command,
flags) are hashed into a stamp kept in ``<src-dir>/rocm-build-sources.json``; a re-run whose stamp
and checkout state match does nothing.

Moving branches: a tag or full SHA is taken as immutable, so a re-run needs no network. A branch
is re-checked with one ``git ls-remote`` (no objects are fetched): if it moved, the project is
checked out again at the new commit; if not, it is up to date.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import config as config_mod
from . import faults, git, journal, locks, patches, proc
from .context import RunContext
from .errors import ConfigError, DirtyCheckout, RocmBuildError
from .masking import is_masked, mask_url, strip_masked
from .progress import NO_PROGRESS, Progress

__all__ = [
    "MANIFEST_NAME",
    "CheckoutPlan",
    "CheckoutResult",
    "ProjectPlan",
    "ProjectResult",
    "execute",
    "parse_related_commits",
    "plan",
    "read_manifest",
    "save_patches",
]

log = logging.getLogger(__name__)

MANIFEST_NAME = "rocm-build-sources.json"
MANIFEST_FORMAT = 1
RELATED_COMMITS = "related_commits"


@dataclass(frozen=True)
class ProjectPlan:
    name: str
    origin: str
    ref: str  # "" = not known yet (may come from another project's related_commits)
    src: Path
    patches_root: Path
    patchset: str
    hipify: tuple[str, ...]  # the command template ("{python}" kept); () = no hipify
    apply_patches: bool
    ref_given: bool = False  # the user's own ref: related_commits do not override it
    origin_given: bool = False
    pin_commit: str = ""  # --manifest replay: exactly this commit
    expect_patches: tuple[tuple[str, str], ...] | None = None  # (file, sha256) to replay
    depth: int | None = None  # --manifest replay: the recorded depth; None = the plan's


@dataclass(frozen=True)
class CheckoutPlan:
    src_dir: Path
    manifest_path: Path
    log_dir: Path
    projects: tuple[ProjectPlan, ...]
    depth: int = 0
    jobs: int = 8
    force: bool = False
    retries: int = 3
    retry_delay: float = 2.0
    no_wait: bool = False


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


@dataclass(frozen=True)
class CheckoutResult:
    manifest: Path
    projects: tuple[ProjectResult, ...]

    @property
    def up_to_date(self) -> bool:
        return all(p.action == "up to date" for p in self.projects)

    @property
    def nothing_to_do(self) -> str:
        return "sources up to date" if self.up_to_date else ""

    @property
    def outputs(self) -> list[Path]:
        return [self.manifest]  # what the checkouts are at, for the build

    def as_json(self) -> dict[str, Any]:
        return {
            "manifest": str(self.manifest),
            "up_to_date": self.up_to_date,
            "projects": [p.as_json() for p in self.projects],
        }


# --- planning (pure) -----------------------------------------------------------------------------


def plan(
    ctx: RunContext,
    names: Sequence[str] = (),
    *,
    manifest: Mapping[str, Any] | None = None,
    builtin_origins: Mapping[str, str] | None = None,
) -> CheckoutPlan:
    """What to check out. ``manifest`` (a parsed source manifest) replays its commits and
    patches; ``builtin_origins`` tells which origins the user changed (they win over
    related_commits)."""
    cfg = ctx.settings
    src_dir = ctx.src_dir
    patches_dir = ctx.patches_dir
    do_hipify = cfg.checkout.hipify
    do_patches = cfg.checkout.patches
    builtin = builtin_origins or {}
    projects: list[ProjectPlan] = []
    depth_flag = cfg.sources["checkout.depth"] == config_mod.Source.FLAG
    if manifest is not None:
        entries = manifest.get("projects", {})
        chosen = list(names) or list(entries)
        for name in chosen:
            if name not in entries:
                raise ConfigError(config_mod._unknown("project in the manifest", name, entries))
        for spec in cfg.selected_projects(chosen):
            entry = entries[spec.name]
            projects.append(
                ProjectPlan(
                    name=spec.name,
                    origin=_replay_origin(str(entry["origin"]), spec.origin),
                    ref=str(entry["ref"]),
                    src=src_dir / spec.name,
                    patches_root=patches.series_root(
                        patches_dir, str(entry["patchset"]), spec.patches
                    ),
                    patchset=str(entry["patchset"]),
                    hipify=tuple(entry.get("hipify_command") or ()) if entry["hipify"] else (),
                    apply_patches=bool(entry.get("apply_patches", True)),
                    ref_given=True,
                    origin_given=True,
                    pin_commit=str(entry["commit"]),
                    expect_patches=tuple(
                        (str(p["file"]), str(p["sha256"])) for p in entry.get("patches", [])
                    ),
                    # Shallow stays shallow, full stays full; only --depth overrides it.
                    depth=None if depth_flag or "depth" not in entry else int(entry["depth"]),
                )
            )
    else:
        specs = cfg.selected_projects(names)
        train = cfg.trains.get(cfg.general.train, {})
        for spec in specs:
            projects.append(
                ProjectPlan(
                    name=spec.name,
                    origin=spec.origin,
                    ref=spec.ref or train.get(spec.name, ""),
                    src=src_dir / spec.name,
                    patches_root=patches.series_root(patches_dir, cfg.patchset, spec.patches),
                    patchset=cfg.patchset,
                    hipify=spec.hipify if do_hipify else (),
                    apply_patches=do_patches,
                    ref_given=bool(spec.ref),
                    origin_given=spec.origin != builtin.get(spec.name, ""),
                )
            )
    return CheckoutPlan(
        src_dir=src_dir,
        manifest_path=src_dir / MANIFEST_NAME,
        log_dir=ctx.work_dir / "logs",
        projects=tuple(projects),
        depth=cfg.checkout.depth,
        jobs=cfg.checkout.jobs,
        force=cfg.checkout.force,
        retries=cfg.checkout.retries,
        retry_delay=cfg.checkout.retry_delay,
        no_wait=cfg.general.no_wait,
    )


def _replay_origin(recorded: str, configured: str) -> str:
    """The origin to fetch a manifest's project from. Manifests store origins with their
    credentials masked: the configured origin (config file, environment, ``--origin``) supplies
    them when it is the same URL; else the masked part is dropped, and git's credential helper
    (or ``GIT_ASKPASS``) is asked."""
    if not is_masked(recorded):
        return recorded
    if mask_url(configured) == recorded:
        return configured
    return strip_masked(recorded)


@dataclass(frozen=True)
class RelatedCommit:
    project: str
    branch: str
    commit: str
    origin: str


def parse_related_commits(text: str) -> dict[str, RelatedCommit]:
    """``os|source|project|branch|commit|origin`` lines; the first line per project wins."""
    out: dict[str, RelatedCommit] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 6 or not git.SHA_RE.match(fields[4]):
            log.warning("related_commits: ignoring malformed line %r", line)
            continue
        _os, _source, project, branch, commit, origin = fields
        out.setdefault(project, RelatedCommit(project, branch, commit, origin))
    return out


def stamp(
    *,
    origin: str,
    ref: str,
    commit: str,
    patchset: str,
    series: Sequence[tuple[str, str]],
    hipify: Sequence[str],
    apply_patches: bool,
) -> str:
    """A hash of everything that decides a checkout's content."""
    data = {
        "format": MANIFEST_FORMAT,
        "origin": mask_url(origin),
        "ref": ref,
        "commit": commit,
        "patchset": patchset,
        "series": [list(p) for p in series],
        "hipify": list(hipify),
        "apply_patches": apply_patches,
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


# --- manifest ------------------------------------------------------------------------------------


def read_manifest(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {"format": MANIFEST_FORMAT, "projects": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"{path} is not a readable source manifest ({exc}); fix or remove it"
        raise ConfigError(msg) from None
    if not isinstance(data, dict) or not isinstance(data.get("projects"), dict):
        msg = f"{path} is not a rocm-build source manifest; fix or remove it"
        raise ConfigError(msg)
    return data


def write_manifest(path: Path, data: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def update_manifest(path: Path, name: str, entry: Mapping[str, Any]) -> None:
    """Set one project's entry under the manifest's own lock, re-reading the file first, so
    runs on other projects of the same src-dir keep theirs. Temp files that killed runs left
    are removed here (the lock makes them nobody's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with locks.hold(path, f"the source manifest {path}"):
        journal.remove_stale(path.parent, f".{path.name}.")
        data = read_manifest(path)
        data["format"] = MANIFEST_FORMAT
        data["projects"][name] = dict(entry)
        faults.point("manifest.before-write")
        write_manifest(path, data)


# --- execution -----------------------------------------------------------------------------------


def _all_repos(src: Path) -> list[tuple[str, Path]]:
    return [(".", src), *((s.path, src / s.path) for s in git.submodules(src))]


def _state_heads(src: Path) -> dict[str, str]:
    return {".": git.head(src), **{s.path: s.commit for s in git.submodules(src)}}


def _recorded_heads(entry: Mapping[str, Any]) -> dict[str, str]:
    heads = {".": str(entry.get("head", ""))}
    for sub in entry.get("submodules", []):
        heads[str(sub["path"])] = str(sub.get("head", sub.get("commit", "")))
    return heads


def _uncommitted(src: Path, repos: Sequence[str] | None = None) -> list[str]:
    rels = list(repos) if repos is not None else [r for r, _ in _all_repos(src)]

    def one(rel: str) -> list[str]:
        prefix = "" if rel == "." else rel + "/"
        return [prefix + p for p in git.changed_paths(src if rel == "." else src / rel)]

    # Independent read-only questions: ask them in parallel (most of a re-run's time).
    with ThreadPoolExecutor(max_workers=4) as pool:
        return [path for paths in pool.map(one, rels) for path in paths]


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
    dirty = _uncommitted(src)
    if dirty:
        more = f" and {len(dirty) - 3} more" if len(dirty) > 3 else ""
        msg = (
            f"{src} has uncommitted changes ({', '.join(dirty[:3])}{more}); commit them and "
            + save_hint
        )
        raise DirtyCheckout(msg)
    recorded = _recorded_heads(entry)
    foreign: list[str] = []
    for rel, path in _all_repos(src):
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
    return git.resolve_ref(cwd, p.origin, p.ref, retries=plan_.retries, delay=plan_.retry_delay)


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
        results.append(_checkout_project(p, plan_, entries, progress))
        pins.update(_related(p.src))
    return CheckoutResult(plan_.manifest_path, tuple(results))


def _related(src: Path) -> dict[str, RelatedCommit]:
    path = src / RELATED_COMMITS
    if not path.is_file():
        return {}
    return parse_related_commits(path.read_text(encoding="utf-8", errors="replace"))


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
    journal.remove_stale(plan_.src_dir / journal.JOURNAL_DIR, f".{p.name}.json.")
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
        heads = _state_heads(p.src)
        if heads == _recorded_heads(entry):
            if jr is not None:
                jr.clear()
            return ProjectResult(
                name=p.name,
                action="up to date",
                origin=p.origin,
                ref=p.ref,
                commit=ref.commit,
                head=heads["."],
                patches=_counts(series),
                hipify=bool(entry.get("hipify")),
                submodules=len(heads) - 1,
                uncommitted=tuple(_uncommitted(p.src, list(heads))),
            )
    if jr is not None and not _resume(p, jr):
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
        plan_.src_dir, p.name, created=created, target=ref.commit, heads=_heads_now(p.src)
    )
    faults.point("checkout.journal-begun")
    try:
        result = _do_checkout(
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


def _record_failure(
    p: ProjectPlan, plan_: CheckoutPlan, entries: dict[str, Any], ref: git.Ref, *, created: bool
) -> None:
    if created and (not git.is_repo(p.src) or not _has_commit(p.src)):
        shutil.rmtree(p.src, ignore_errors=True)
    elif git.is_repo(p.src) and _has_commit(p.src):
        # Record what is there now, so the next run may redo it without --force.
        try:
            entries[p.name] = _entry(p, ref, series=(), stamp_="", complete=False)
            update_manifest(plan_.manifest_path, p.name, entries[p.name])
        except RocmBuildError:
            log.debug("could not record the interrupted checkout of %s", p.name)


def _heads_now(src: Path) -> dict[str, str]:
    """HEAD of every repo that has one (an interrupted first checkout may have none yet)."""
    if not git.is_repo(src) or not _has_commit(src):
        return {}
    return _state_heads(src)


def _resume(p: ProjectPlan, jr: journal.CheckoutJournal) -> bool:
    """An interrupted checkout of ours: check that nothing in it is the user's, then clear what
    the killed git steps left. Returns False if there is nothing to resume."""
    if not git.is_repo(p.src):
        if p.src.exists() and not any(p.src.iterdir()):
            p.src.rmdir()
        jr.clear()
        return False
    log.info("%s: finishing the checkout a killed run left at step '%s'", p.name, jr.last_step)
    journal.clear_git_leftovers(p.src, [(".", p.src)])
    if _has_commit(p.src):
        journal.drop_half_cloned(p.src)
    repos = _all_repos(p.src) if _has_commit(p.src) else [(".", p.src)]
    journal.clear_git_leftovers(p.src, repos)
    foreign = journal.foreign_repos(p.src, jr, repos)
    if foreign:
        where = ", ".join(p.name if rel == "." else rel for rel in foreign)
        msg = (
            f"{p.src} has commits that rocm-build did not make since its interrupted checkout "
            f"(in {where}); run `rocm-build save-patches {p.name}` to keep them, or pass "
            "--force to discard"
        )
        raise DirtyCheckout(msg)
    return True


def _refuse_stale_git(p: ProjectPlan, *, force: bool) -> None:
    """No journal: a lock file or an am in progress is not ours. --force drops an am in
    progress (the user asked to discard local work); a lock file may belong to a live git."""
    repos = _all_repos(p.src) if _has_commit(p.src) else [(".", p.src)]
    stale = journal.stale_git_state(repos)
    if stale:
        raise journal.refuse_stale(p.src, stale)
    if force:
        for _rel, path in repos:
            if (git.git_dir(path) / "rebase-apply").is_dir():
                git.run(path, "am", "--abort", check=False)
                shutil.rmtree(git.git_dir(path) / "rebase-apply", ignore_errors=True)


def _has_commit(src: Path) -> bool:
    return git.run(src, "rev-parse", "-q", "--verify", "HEAD", check=False).status == 0


def _counts(series: Sequence[patches.PatchFile]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in series:
        key = f"{s.repo}/{s.stage}"
        out[key] = out.get(key, 0) + 1
    return out


def _do_checkout(
    p: ProjectPlan,
    plan_: CheckoutPlan,
    entries: dict[str, Any],
    ref: git.Ref,
    series: Sequence[patches.PatchFile],
    new_stamp: str,
    *,
    existed: bool,
    progress: Progress,
    jr: journal.CheckoutJournal,
) -> ProjectResult:
    src = p.src

    def step(name: str) -> None:
        # The intent first: a kill from here on is recognised as this step of ours.
        jr.step(name, _heads_now(src))
        faults.point(f"checkout.before-{name}")

    step("fetch")
    if not existed:
        git.init(src, p.origin)
    else:
        git.set_origin(src, p.origin)
    log.info("%s: fetching %s %s from %s", p.name, ref.kind, ref.name, p.origin)
    commit = git.fetch(
        src,
        p.origin,
        ref,
        depth=plan_.depth,
        retries=plan_.retries,
        delay=plan_.retry_delay,
        progress=progress,
        task=f"{p.name}: objects fetched",
    )
    faults.point("checkout.after-fetch")
    step("checkout")
    for _rel, path in reversed(_all_repos(src)) if existed and _has_commit(src) else []:
        git.run(path, "tag", "-d", patches.HIPIFY_TAG, check=False)
    git.checkout_detached(src, commit, force=existed)
    faults.point("checkout.after-checkout")
    if existed:
        git.clean_untracked(src)
    step("submodules")
    git.update_submodules(
        src,
        p.origin,
        depth=plan_.depth,
        jobs=plan_.jobs,
        retries=plan_.retries,
        delay=plan_.retry_delay,
    )
    repos = _all_repos(src)
    known = {rel for rel, _ in repos}
    stray = sorted({s.repo for s in series} - known)
    if stray:
        msg = (
            f"{p.patches_root} has patches for {', '.join(stray)}, which {p.name} at {ref.name} "
            "has no submodule for; rename the folder to the submodule's path or remove it"
        )
        raise ConfigError(msg)
    step("tag")
    for _rel, path in repos:
        git.set_tag(path, patches.UPSTREAM_TAG)
        if existed:
            git.clean_untracked(path)
    step("base-patches")
    for repo_rel, files in patches.by_repo(series, "base").items():
        patches.apply_series(src, p.name, repo_rel, files)
    ran_hipify = False
    if p.hipify:
        step("hipify")
        _hipify(p, plan_, src, commit, progress)
        faults.point("checkout.after-hipify")
        ran_hipify = True
    step("hipified-patches")
    for repo_rel, files in patches.by_repo(series, "hipified").items():
        patches.apply_series(src, p.name, repo_rel, files)
    entries[p.name] = _entry(
        p, ref, series=series, stamp_=new_stamp, complete=True, ran_hipify=ran_hipify
    )
    step("manifest")
    update_manifest(plan_.manifest_path, p.name, entries[p.name])
    faults.point("checkout.after-manifest")
    heads = _state_heads(src)
    return ProjectResult(
        name=p.name,
        action="updated" if existed else "checked out",
        origin=p.origin,
        ref=p.ref,
        commit=commit,
        head=heads["."],
        patches=_counts(series),
        hipify=ran_hipify,
        submodules=len(heads) - 1,
    )


def _hipify(
    p: ProjectPlan, plan_: CheckoutPlan, src: Path, upstream: str, progress: Progress
) -> None:
    """Run the project's hipify command and commit its result in every repo.

    A hipify command has no common progress stream, so the number of files it changed is
    counted afterwards (``git status`` of every repo) and reported as one step of
    "<project>: files hipified". Files it writes that the project's ``.gitignore`` hides
    (``*.hip``, ``hip/``) are its output too: they are committed (and so tracked, protected
    and saved by save-patches like any other file)."""
    cmd = [a.replace("{python}", sys.executable) for a in p.hipify]
    log_file = plan_.log_dir / f"checkout-{p.name}-hipify.log"
    log.info("%s: hipify: %s (log: %s)", p.name, " ".join(cmd), log_file)
    task = f"{p.name}: files hipified"
    progress.start(task, None)
    repos = _all_repos(src)
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


def _entry(
    p: ProjectPlan,
    ref: git.Ref,
    *,
    series: Sequence[patches.PatchFile],
    stamp_: str,
    complete: bool,
    ran_hipify: bool = False,
) -> dict[str, Any]:
    src = p.src
    subs = git.submodules(src)
    return {
        "origin": mask_url(p.origin),  # git's remote config keeps the real one
        "ref": p.ref,
        "ref_kind": ref.kind,
        "commit": git.tag_commit(src, patches.UPSTREAM_TAG) or ref.commit,
        "head": git.head(src),
        "submodules": [
            {
                "path": s.path,
                "commit": git.tag_commit(src / s.path, patches.UPSTREAM_TAG) or s.commit,
                "head": git.head(src / s.path),
            }
            for s in subs
        ],
        "patchset": p.patchset,
        "patches_dir": str(p.patches_root),
        "patches": [s.as_json() for s in series],
        "apply_patches": p.apply_patches,
        "hipify": ran_hipify,
        "hipify_command": list(p.hipify),
        "depth": p.depth,
        "stamp": stamp_,
        "complete": complete,
    }


# --- save-patches --------------------------------------------------------------------------------


@dataclass(frozen=True)
class SavedProject:
    name: str
    root: Path
    changed: bool
    removed: bool
    counts: Mapping[str, int]

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "patches": str(self.root),
            "changed": self.changed,
            "removed": self.removed,
            "counts": dict(self.counts),
        }


def save_patches(ctx: RunContext, names: Sequence[str] = ()) -> tuple[SavedProject, ...]:
    """Write each project's commits on top of the checkout into its patch series."""
    cfg = ctx.settings
    src_dir = ctx.src_dir
    manifest_path = src_dir / MANIFEST_NAME
    manifest = read_manifest(manifest_path)
    entries: dict[str, Any] = manifest["projects"]
    chosen = list(names) or [n for n in entries if n in cfg.projects]
    if not chosen:
        msg = f"no checkouts in {src_dir}; run `rocm-build checkout` first or pass --src-dir"
        raise ConfigError(msg)
    patchset_given = cfg.sources["patchset"] != config_mod.Source.DEFAULT
    out: list[SavedProject] = []
    for spec in cfg.selected_projects(chosen):
        src = src_dir / spec.name
        with locks.hold(src, f"the checkout {src}", no_wait=cfg.general.no_wait):
            faults.point("save-patches.locked")
            entry = read_manifest(manifest_path)["projects"].get(spec.name)
            out.append(_save_one(ctx, spec.name, spec.patches, entry, patchset_given))
            faults.point("save-patches.project-done")
    return tuple(out)


def _save_one(
    ctx: RunContext,
    name: str,
    subfolder: str,
    entry: dict[str, Any] | None,
    patchset_given: bool,
) -> SavedProject:
    cfg = ctx.settings
    src_dir = ctx.src_dir
    src = src_dir / name
    if not git.is_repo(src) or git.tag_commit(src, patches.UPSTREAM_TAG) is None:
        msg = f"{src} is not a rocm-build checkout; run `rocm-build checkout {name}`"
        raise ConfigError(msg)
    if journal.CheckoutJournal.read(src_dir, name) is not None:
        msg = (
            f"the checkout {src} was interrupted and is not finished; run `rocm-build checkout "
            f"{name}` to finish it, then save-patches"
        )
        raise RocmBuildError(msg)
    dirty = _uncommitted(src)
    if dirty:
        msg = (
            f"{src} has uncommitted changes ({', '.join(dirty[:3])}); commit them "
            "(in the submodule for submodule files) and run save-patches again"
        )
        raise DirtyCheckout(msg)
    faults.point("save-patches.checked")
    patchset = (
        cfg.patchset
        if patchset_given or entry is None
        else str(entry.get("patchset") or cfg.patchset)
    )
    root = patches.series_root(ctx.patches_dir, patchset, subfolder)
    repos = [rel for rel, _ in _all_repos(src)]
    with locks.hold(root, f"the patch folder {root}", no_wait=cfg.general.no_wait):
        faults.point("save-patches.patch-folder-locked")
        result = patches.save(src, repos, root)
    if entry is not None:
        _after_save(entry, src, root, patchset)
        faults.point("save-patches.before-manifest")
        update_manifest(src_dir / MANIFEST_NAME, name, entry)
        faults.point("save-patches.after-manifest")
    return SavedProject(name, root, result.changed, result.removed, result.counts)


def _after_save(entry: dict[str, Any], src: Path, root: Path, patchset: str) -> None:
    """The checkout now equals upstream + the saved series: record that, so a checkout with the
    same inputs is up to date and a changed one may redo the project without --force."""
    series = patches.list_series(root)
    entry["patchset"] = patchset
    entry["patches_dir"] = str(root)
    entry["patches"] = [s.as_json() for s in series]
    entry["apply_patches"] = True
    entry["head"] = git.head(src)
    for sub in entry.get("submodules", []):
        path = src / str(sub["path"])
        if git.is_repo(path):
            sub["head"] = git.head(path)
    if entry.get("complete"):
        entry["stamp"] = stamp(
            origin=str(entry["origin"]),
            ref=str(entry["ref"]),
            commit=str(entry["commit"]),
            patchset=patchset,
            series=[(s.rel, s.sha256) for s in series],
            hipify=list(entry.get("hipify_command") or []) if entry.get("hipify") else [],
            apply_patches=True,
        )
