"""The checkout stage's plan: what to check out.

``plan`` turns the settings (and an optional manifest to replay) into a frozen
``Plan``; ``execute.execute`` walks it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocm_build.common.errors import ConfigError
from rocm_build.common.masking import is_masked, mask_url, strip_masked
from rocm_build.config import loader as config_mod
from rocm_build.repo import tritonpin
from rocm_build.repo.cmdargs import check_origin, check_ref
from rocm_build.repo.manifest import MANIFEST_NAME
from rocm_build.run.context import RunContext
from rocm_build.sources import patches

__all__ = ["Plan", "ProjectPlan", "plan"]

#: What ``checkout --manifest`` needs of each project it replays.
REPLAY_KEYS = ("origin", "ref", "commit", "patchset", "hipify")


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
    depth: int = 0  # history depth (0 = full); a replay's is the recorded one unless --depth
    pinned_by: str = ""  # the project whose checkout pins this one's ref (tritonpin)
    pin_release: bool = False  # the pin is the release branch of the pinned version
    #: the ref is no one's choice (neither the user's nor a replayed commit): the pins of the
    #: checkouts before it decide it (related_commits, then ``pinned_by``'s pin files)
    follows_pins: bool = False


@dataclass(frozen=True)
class Plan:
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


def plan(
    ctx: RunContext,
    names: Sequence[str] = (),
    *,
    manifest: Mapping[str, Any] | None = None,
    builtin_origins: Mapping[str, str] | None = None,
) -> Plan:
    """What to check out. ``manifest`` (a parsed source manifest) replays its commits and
    patches; ``builtin_origins`` tells which origins the user changed (they win over
    related_commits)."""
    cfg = ctx.settings
    src_dir = ctx.src_dir
    patches_dir = ctx.patches_dir
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
            projects.append(
                _replay_project(
                    spec,
                    entries[spec.name],
                    src_dir,
                    patches_dir,
                    depth=cfg.checkout.depth,
                    depth_flag=depth_flag,
                )
            )
    else:
        projects = _train_projects(ctx, names, builtin)
    projects = [_checked(p, cfg.cwd, manifest is not None) for p in projects]
    if any(p.name == tritonpin.TRITON for p in projects):
        tritonpin.check_platform()
    return Plan(
        src_dir=src_dir,
        manifest_path=src_dir / MANIFEST_NAME,
        log_dir=ctx.work_dir / "logs",
        projects=_pinned_last(projects),
        depth=cfg.checkout.depth,
        jobs=cfg.checkout.jobs,
        force=cfg.checkout.force,
        retries=cfg.checkout.retries,
        retry_delay=cfg.checkout.retry_delay,
        no_wait=cfg.general.no_wait,
    )


def _checked(p: ProjectPlan, cwd: Path, replay: bool) -> ProjectPlan:
    """``p`` with an origin and ref that git cannot take as options or as a command-running
    transport (see ``cmdargs``), wherever they came from (flags, files, a manifest)."""
    where = f"the manifest's project {p.name}" if replay else f"project {p.name}"
    return replace(p, origin=check_origin(p.origin, where, cwd), ref=check_ref(p.ref, where))


def _replay_project(
    spec: config_mod.ProjectSpec,
    entry: Mapping[str, Any],
    src_dir: Path,
    patches_dir: Path,
    *,
    depth: int,
    depth_flag: bool,
) -> ProjectPlan:
    """The plan that replays one project of a manifest (its types checked when it was read).
    ``depth``: the configured one, which a recorded depth overrides unless it is --depth's."""
    missing = [k for k in REPLAY_KEYS if k not in entry]
    if missing:
        msg = (
            f"project '{spec.name}' in the manifest has no {', '.join(missing)}; "
            "replay a manifest rocm-build wrote"
        )
        raise ConfigError(msg)
    return ProjectPlan(
        name=spec.name,
        origin=_replay_origin(str(entry["origin"]), spec.origin),
        ref=str(entry["ref"]),
        src=src_dir / spec.name,
        patches_root=patches.find_root(patches_dir, str(entry["patchset"]), spec.patches),
        patchset=str(entry["patchset"]),
        hipify=tuple(entry.get("hipify_command") or ()) if entry["hipify"] else (),
        apply_patches=bool(entry.get("apply_patches", True)),
        ref_given=True,
        origin_given=True,
        pin_commit=str(entry["commit"]),
        expect_patches=tuple((str(p["file"]), str(p["sha256"])) for p in entry.get("patches", [])),
        # Shallow stays shallow, full stays full; only --depth overrides it.
        depth=depth if depth_flag or entry.get("depth") is None else int(entry["depth"]),
    )


def _train_projects(
    ctx: RunContext, names: Sequence[str], builtin: Mapping[str, str]
) -> list[ProjectPlan]:
    """The projects at the train's refs (or the configured ones); a project another's checkout
    pins (triton) takes its origin from the [triton] repo setting unless the user set one."""
    cfg = ctx.settings
    train = cfg.trains.get(cfg.general.train, {})
    projects: list[ProjectPlan] = []
    for spec in cfg.selected_projects(names):
        origin_given = spec.origin != builtin.get(spec.name, "")
        origin = spec.origin
        if spec.pinned_by and not origin_given:
            origin = tritonpin.origin(cfg.triton)
        projects.append(
            ProjectPlan(
                name=spec.name,
                origin=origin,
                ref=spec.ref or train.get(spec.name, ""),
                src=ctx.src_dir / spec.name,
                patches_root=patches.find_root(ctx.patches_dir, cfg.patchset, spec.patches),
                patchset=cfg.patchset,
                hipify=spec.hipify if cfg.checkout.hipify else (),
                apply_patches=cfg.checkout.patches,
                ref_given=bool(spec.ref),
                origin_given=origin_given,
                depth=cfg.checkout.depth,
                pinned_by=spec.pinned_by,
                pin_release=cfg.triton.release,
                follows_pins=not spec.ref,
            )
        )
    return projects


def _pinned_last(projects: list[ProjectPlan]) -> tuple[ProjectPlan, ...]:
    """A project whose ref another's checkout pins goes after that project (triton after torch,
    though torch is built after triton)."""
    names = {p.name for p in projects}
    first = [p for p in projects if p.pinned_by not in names]
    return (*first, *(p for p in projects if p.pinned_by in names))


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
