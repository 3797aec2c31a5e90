"""save-patches: write each project's commits on top of its checkout into its patch series,
and record in the source manifest that the checkout now equals upstream + that series.

``plan(ctx, names)`` decides which checkouts and where (reading the manifest and the journals);
``execute(plan)`` checks each checkout and writes its series, under the checkout's lock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build import config as config_mod
from rocm_build.common import faults, locks
from rocm_build.common.errors import ConfigError, DirtyCheckout, FileAccessError, RocmBuildError
from rocm_build.repo import git, manifest
from rocm_build.run.context import RunContext
from rocm_build.sources import journal, patches

__all__ = ["SavePlan", "SavedProject", "execute", "plan"]


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


@dataclass(frozen=True)
class SavePlan:
    """The checkouts whose commits to save, and where their series go."""

    src_dir: Path
    patches_dir: Path
    projects: tuple[tuple[str, str], ...]  # (project, its subfolder of the patch set)
    patchset: str  # the setting's; a project's checkout may have used another
    patchset_given: bool  # set by the user: it wins over the one the checkout used
    no_wait: bool = False

    @property
    def manifest_path(self) -> Path:
        return self.src_dir / manifest.MANIFEST_NAME

    def as_json(self) -> dict[str, Any]:
        return {
            "src_dir": str(self.src_dir),
            "patches_dir": str(self.patches_dir),
            "projects": [name for name, _ in self.projects],
            "patchset": self.patchset,
            "patchset_given": self.patchset_given,
        }


def plan(ctx: RunContext, names: Sequence[str] = ()) -> SavePlan:
    """The checkouts to save (``names``, else every one the manifest records or a journal says
    was begun): a ``ConfigError`` when there is none."""
    cfg = ctx.settings
    src_dir = ctx.src_dir
    recorded = manifest.read_manifest(src_dir / manifest.MANIFEST_NAME)
    entries: dict[str, Any] = recorded["projects"]
    # A project whose first checkout was interrupted has a journal and no entry yet: it is
    # named too, so the answer is to finish that checkout, not that there is none.
    journals = src_dir / journal.JOURNAL_DIR
    pending = [n for n in cfg.projects if (journals / f"{n}.json").exists() and n not in entries]
    chosen = list(names) or [n for n in entries if n in cfg.projects] + pending
    if not chosen:
        msg = f"no checkouts in {src_dir}; run `rocm-build checkout` first or pass --src-dir"
        raise ConfigError(msg)
    return SavePlan(
        src_dir=src_dir,
        patches_dir=ctx.patches_dir,
        projects=tuple((spec.name, spec.patches) for spec in cfg.selected_projects(chosen)),
        patchset=cfg.patchset,
        patchset_given=cfg.sources["patchset"] != config_mod.Source.DEFAULT,
        no_wait=cfg.general.no_wait,
    )


def execute(plan_: SavePlan) -> tuple[SavedProject, ...]:
    """Write each planned project's commits on top of the checkout into its patch series."""
    out: list[SavedProject] = []
    for name, subfolder in plan_.projects:
        src = plan_.src_dir / name
        with locks.hold(src, f"the checkout {src}", no_wait=plan_.no_wait):
            faults.point("save-patches.locked")
            entry = manifest.read_manifest(plan_.manifest_path)["projects"].get(name)
            out.append(_save_one(plan_, name, subfolder, entry))
            faults.point("save-patches.project-done")
    return tuple(out)


def _save_one(
    plan_: SavePlan, name: str, subfolder: str, entry: dict[str, Any] | None
) -> SavedProject:
    src_dir = plan_.src_dir
    src = src_dir / name
    if journal.CheckoutJournal.read(src_dir, name) is not None:
        msg = (
            f"the checkout {src} was interrupted and is not finished; run `rocm-build checkout "
            f"{name}` to finish it, then save-patches"
        )
        raise RocmBuildError(msg)
    if not git.is_repo(src) or git.tag_commit(src, patches.UPSTREAM_TAG) is None:
        msg = f"{src} is not a rocm-build checkout; run `rocm-build checkout {name}`"
        raise ConfigError(msg)
    dirty = [f for f in manifest.uncommitted(src) if not _build_output(src, f)]
    if dirty:
        msg = (
            f"{src} has uncommitted changes ({', '.join(dirty[:3])}); commit them "
            "(in the submodule for submodule files) and run save-patches again"
        )
        raise DirtyCheckout(msg)
    faults.point("save-patches.checked")
    patchset = (
        plan_.patchset
        if plan_.patchset_given or entry is None
        else str(entry.get("patchset") or plan_.patchset)
    )
    root = patches.series_root(plan_.patches_dir, patchset, subfolder)
    patches.check_save_root(root)
    repos = [rel for rel, _ in manifest.all_repos(src)]
    with locks.hold(root, f"the patch folder {root}", no_wait=plan_.no_wait):
        faults.point("save-patches.patch-folder-locked")
        try:
            result = patches.save(src, repos, root)
        except OSError as exc:
            msg = (
                f"cannot write the patch folder {root} ({exc.strerror or exc}); the series there "
                "is as it was: make the folder writable, or pass --patches-dir"
            )
            raise FileAccessError(msg) from exc
    if entry is not None:
        _after_save(entry, src, root, patchset)
        faults.point("save-patches.before-manifest")
        manifest.update_manifest(src_dir / manifest.MANIFEST_NAME, name, entry)
        faults.point("save-patches.after-manifest")
    return SavedProject(name, root, result.changed, result.removed, result.counts)


#: Folders a build writes into a source tree (setuptools, CMake, pip): never part of a patch, so
#: save-patches does not ask for them to be committed when the project's .gitignore lacks them.
BUILD_OUTPUT = ("build", "dist", ".eggs", "__pycache__")


def _build_output(src: Path, rel: str) -> bool:
    """``rel`` (from ``manifest.uncommitted``) is an untracked file in a build output folder."""
    parts = rel.split("/")[:-1]
    if not any(part in BUILD_OUTPUT or part.endswith(".egg-info") for part in parts):
        return False
    repo, inner = src, rel
    for sub, path in reversed(manifest.all_repos(src)[1:]):
        if rel.startswith(sub + "/"):
            repo, inner = path, rel[len(sub) + 1 :]
            break
    literal = {"GIT_LITERAL_PATHSPECS": "1"}
    res = git.run(repo, "ls-files", "--error-unmatch", "--", inner, env=literal, check=False)
    return res.status != 0  # tracked: an edit to it is work to save


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
        entry["stamp"] = manifest.stamp(
            origin=str(entry["origin"]),
            ref=str(entry["ref"]),
            commit=str(entry["commit"]),
            patchset=patchset,
            series=[(s.rel, s.sha256) for s in series],
            hipify=list(entry.get("hipify_command") or []) if entry.get("hipify") else [],
            apply_patches=True,
        )
