"""The build stage's plan: per project its folder, environment, command, log and jobs.

``survey(ctx, specs)`` asks the programs what only they can tell (the compiler cache's version,
each checkout's git revision); ``plan(ctx, specs, survey)`` checks the tree against the train's
floors and makes the frozen ``Plan`` that ``execute`` walks (no processes, no writes).

The settings travel whole: ``Inputs`` holds the resolved ``Config`` (its ``[build]``,
``[general]``, ``[features]`` and ``[triton]`` sections and the environment) and, beside it, the
run's facts (projects, folders, tree, targets, the survey, the machine). Each project's own step
is decided by ``_step`` (``make_plan`` is that part alone), what the run adds to it (checkout
origin, torch's features, Triton, the hipcc launcher, the shape's routes) by ``_finish``, and
the ``Plan`` is made in one place, ``_assemble``; it carries the ``[build]`` section as it is.

Size: every decision of the build is made here, once (the stage rule: decide in plan, never in
execute).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from rocm_build.building import (
    featureneeds,
    features,
    hiplauncher,
    origin,
    shapes,
    trainfloors,
    tritonbuild,
)
from rocm_build.building.compilercache import CompilerCache, mask_values, resolve_cache
from rocm_build.building.jobs import default_jobs, memory_available
from rocm_build.building.prefetch import llvm_cache_dir
from rocm_build.building.requirements import read_build_requirements, req_name
from rocm_build.building.switches import (
    LlvmWhere,
    Switches,
    aotriton_cache_dir,
    merge_env,
    pairs,
    switches,
)
from rocm_build.building.version import (
    Revision,
    mark_dirty,
    project_version,
    read_revision,
    refuse_dirty,
)
from rocm_build.common import proc
from rocm_build.common.errors import ConfigError, RocmTreeError
from rocm_build.config.loader import Config, ProjectSpec
from rocm_build.config.schema import BuildSettings
from rocm_build.repo import worktree
from rocm_build.rocm import dist
from rocm_build.run.context import RunContext

__all__ = [
    "REPORT_NAME",
    "Folders",
    "Inputs",
    "Machine",
    "Plan",
    "ProjectStep",
    "Survey",
    "make_plan",
    "plan",
    "project_version",
    "survey",
]

log = logging.getLogger(__name__)

REPORT_NAME = "build-report.json"
#: Variables of the user's that the build keeps though ``dist`` clears their family.
KEPT_NAMES = ("HIP_CLANG_LAUNCHER", "HIPCXX")


@dataclass(frozen=True)
class ProjectStep:
    """How one project is built."""

    name: str
    source: Path
    command: tuple[str, ...]
    env: Mapping[str, str]
    changed: Mapping[str, str]  # what the build environment sets or extends
    removed: tuple[str, ...]  # variables of another ROCm/CUDA setup, dropped
    log: Path
    jobs: int
    version: str  # "" = the project versions itself
    version_from: str  # where the version came from: a release tag, a dev build, the file
    depends: tuple[str, ...]
    pin_env: Mapping[str, str]  # variable -> project whose built version it carries
    requires: tuple[str, ...]  # build-system requirements (projects we build are left out)
    requirement_files: tuple[Path, ...]
    wheel_dir: Path
    install_after: bool  # a later project builds against this one
    device_code: bool = True  # the wheel must carry HIP code objects (see ProjectSpec)
    notes: tuple[str, ...] = ()  # what the plan decided for the user (switches)
    #: torch's build features: on or off and why (features); () for the other projects.
    features: tuple[features.Feature, ...] = ()
    #: Where the checkout came from: upstream, fork or other (the source manifest).
    checkout: origin.Source | None = None
    #: The folder the build runs in, when not the checkout's root (:func:`build_dir`).
    build_dir: Path | None = None
    #: How hipcc's clang runs through the compiler cache (``hiplauncher``); None = it does not.
    hip_launcher: hiplauncher.HipLauncher | None = None
    shape: shapes.Shape | None = None  # how the project builds (``shapes``)
    #: The checkout's HEADs and uncommitted state, as the survey found it (``repo.worktree``).
    worktree: worktree.WorkTree = field(default_factory=worktree.WorkTree)

    @property
    def cwd(self) -> Path:
        return self.build_dir or self.source


@dataclass(frozen=True)
class Plan:
    steps: tuple[ProjectStep, ...]
    tree: dist.RocmTree
    targets: tuple[str, ...]
    #: The ``[build]`` settings, whole, as the run resolved them (``force``, the pip sources).
    settings: BuildSettings
    base_python: Path  # makes the venv
    python: Path  # runs the builds
    venv: Path | None  # created when missing; None = use base_python as it is
    output_dir: Path
    work_dir: Path
    pip_args: tuple[str, ...]
    #: The compiler cache the survey picked, with its program and variables.
    compiler_cache: CompilerCache
    no_wait: bool = False  # Locked instead of waiting for an output wheel another run writes
    #: Triton built in this run, and who requires it (``tritonbuild``); None = no Triton.
    triton: tritonbuild.TritonBuild | None = None

    @property
    def cache(self) -> str:
        """The compiler cache's kind: "ccache", "sccache" or "none"."""
        return self.compiler_cache.kind

    @property
    def force(self) -> bool:
        """Rebuild projects whose inputs did not change (``build.force``)."""
        return self.settings.force

    @property
    def report_path(self) -> Path:
        return self.output_dir / REPORT_NAME

    def as_json(self) -> dict[str, Any]:
        return {
            "rocm": {"root": str(self.tree.root), "version": self.tree.version},
            "targets": list(self.targets),
            "python": str(self.python),
            "venv": str(self.venv) if self.venv else None,
            "output_dir": str(self.output_dir),
            "cache": self.cache,
            "projects": [
                {
                    "name": s.name,
                    "folder": str(s.source),
                    "build_dir": str(s.cwd),
                    "command": list(s.command),
                    "env": mask_values(s.changed),
                    "removed_env": list(s.removed),
                    "jobs": s.jobs,
                    "version": s.version,
                    "version_from": s.version_from,
                    "dirty": list(s.worktree.paths),
                    "checkout": s.checkout.as_json() if s.checkout else None,
                    "device_code": s.device_code,
                    "notes": list(s.notes),
                    "features": [f.as_json() for f in s.features],
                    "hip_launcher": s.hip_launcher.as_json() if s.hip_launcher else None,
                    "shape": s.shape.name if s.shape else None,
                    "log": str(s.log),
                    "requires": list(s.requires),
                    "requirement_files": [str(p) for p in s.requirement_files],
                }
                for s in self.steps
            ],
        }


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


@dataclass(frozen=True)
class Survey:
    """What the plan needs that only a program can tell, asked just before planning."""

    compiler_cache: CompilerCache  # ``ccache --version`` (or sccache's)
    revisions: Mapping[str, Revision]  # per project built with version_from_tag: git's answer
    #: Per project: its checkout's HEADs and uncommitted changes (none = a clean checkout).
    worktrees: Mapping[str, worktree.WorkTree] = field(default_factory=dict)


def survey(ctx: RunContext, specs: Sequence[ProjectSpec]) -> Survey:
    """Pick the compiler cache (asking it for its version and storage backends) and read the
    revision of each checkout whose version comes from its release tag and every checkout's
    state: HEADs and uncommitted changes, submodules' too (git)."""
    cfg = ctx.settings
    return Survey(
        compiler_cache=resolve_cache(
            cfg.build.cache, cfg.build.cache_url, cfg.env, base_dir=ctx.src_dir
        ),
        revisions={
            s.name: read_revision(ctx.src_dir / s.name, s.name, ctx.src_dir)
            for s in specs
            if s.version_from_tag
        },
        worktrees={s.name: worktree.read(ctx.src_dir / s.name) for s in specs},
    )


@dataclass(frozen=True)
class Folders:
    """The run's folders: the checkouts, the work folder (venv, logs) and the output folder."""

    src_dir: Path
    work_dir: Path
    output_dir: Path


@dataclass(frozen=True)
class Machine:
    """What the build machine is: the Python that makes the venv, its cores and its memory."""

    python: Path
    cores: int = 1
    memory: int | None = None


@dataclass(frozen=True)
class Inputs:
    """What a build plan is made from: the settings whole (``[build]``, ``[general]``,
    ``[features]``, ``[triton]``, the projects, the environment) and, beside them, the run's
    facts: the projects in order, the folders, the decided tree and targets, what the survey
    found and the machine."""

    settings: Config
    specs: Sequence[ProjectSpec]
    folders: Folders
    tree: dist.RocmTree
    targets: tuple[str, ...]
    found: Survey
    machine: Machine


def plan(ctx: RunContext, specs: Sequence[ProjectSpec], found: Survey) -> Plan:
    """The build plan for the run context (``build`` and ``all`` share it): its decided tree
    and targets, and what ``survey`` found.

    Refuses a tree that cannot build these projects for these targets (its warnings are logged),
    and a checkout with uncommitted changes unless ``build.allow_dirty`` (then its wheel's local
    label is marked ``.dirty``); everything else comes from the settings.
    """
    cfg = ctx.settings
    refuse_dirty(found.worktrees, allow=cfg.build.allow_dirty)
    tree, targets = ctx.tree, ctx.targets.names
    check = trainfloors.check(cfg.general.train, cfg.floors, tree, specs, targets)
    for warning in check.warnings:
        log.warning("%s", warning)
    dist.require_valid(check)
    inputs = Inputs(
        settings=cfg,
        specs=specs,
        folders=Folders(ctx.src_dir, ctx.work_dir, ctx.output_dir),
        tree=tree,
        targets=tuple(targets),
        found=found,
        machine=Machine(Path(sys.executable), proc.cpus_available(), memory_available()),
    )
    shared = _shared(inputs)
    own = [_step(shared, spec) for spec in specs]
    run = _run_facts(inputs, own)
    return _assemble(shared, tuple(_finish(step, run) for step in own), run.triton)


def make_plan(inputs: Inputs) -> Plan:
    """Each project's own step, decided up front (no processes, no writes): the part of
    ``plan`` that takes values, without what the run adds to the steps (where each checkout
    came from, torch's features, Triton, the hipcc launcher, each project's shape)."""
    shared = _shared(inputs)
    return _assemble(shared, tuple(_step(shared, spec) for spec in inputs.specs), None)


@dataclass(frozen=True)
class _RunFacts:
    """What the run decides beside each project's own step (``_finish`` adds it)."""

    inputs: Inputs
    sources: Mapping[str, origin.Source | None]
    #: torch's feature variables and its features, on or off and why (``features``).
    torch_features: tuple[Mapping[str, str], tuple[features.Feature, ...]]
    triton: tritonbuild.TritonBuild | None
    triton_env: Mapping[str, Mapping[str, str]]  # per project: Triton's suffix variables
    launcher: hiplauncher.HipLauncher | None


def _run_facts(inputs: Inputs, own: Sequence[ProjectStep]) -> _RunFacts:
    cfg, folders = inputs.settings, inputs.folders
    names = [s.name for s in own]
    sources = origin.read_sources(cfg, folders.src_dir, names)
    torch = next((s for s in own if s.name == "torch"), None)
    torch_features = _torch_features(torch, inputs) if torch else ({}, ())
    label = dist.local_version_label(inputs.tree.version, cfg.build.version_suffix)
    triton_tree = inputs.found.worktrees.get(tritonbuild.TRITON)
    if triton_tree and triton_tree.dirty:
        label = mark_dirty(label)
    adds, build = tritonbuild.configure(names, cfg.triton, folders.src_dir, label)
    compiler_cache = inputs.found.compiler_cache
    return _RunFacts(
        inputs=inputs,
        sources=sources,
        torch_features=torch_features,
        triton=build,
        triton_env=adds if build is not None else {},
        launcher=hiplauncher.plan_launcher(compiler_cache, inputs.tree, folders.work_dir),
    )


def _finish(step: ProjectStep, run: _RunFacts) -> ProjectStep:
    """A project's step with what the run decides: where its checkout came from, torch's
    features, Triton's version suffix and torch's requirement of it, the hipcc launcher and
    the routes of the project's shape."""
    step = replace(step, checkout=run.sources[step.name])
    if step.name == "torch":
        add, decided = run.torch_features
        step = replace(add_env(step, add), features=decided)
    if run.triton is not None:
        add = run.triton_env.get(step.name, {})
        if step.name in run.triton.requirers:
            add = tritonbuild.requirement_env(step.env, run.triton, tritonbuild.PLACEHOLDER)
        step = add_env(step, add)
    if run.launcher:
        step = replace(add_env(step, run.launcher.env), hip_launcher=run.launcher)
    return _with_shape(step, run.inputs.tree)


def _with_shape(step: ProjectStep, tree: dist.RocmTree) -> ProjectStep:
    """The step with its shape's routes (``shapes``): variables, config settings, notes."""
    shape = shapes.detect(step.cwd, step.name)
    env, changed = dict(step.env), dict(step.changed)
    sysdeps = tree.sysdeps_dir / "include" if tree.sysdeps_dir else None
    found = shapes.apply_to(env, changed, shape, sysdeps, step.name)
    launcher = step.hip_launcher if shape.name == shapes.SETUP_PY else None
    if step.hip_launcher and not launcher and tree.clang_dir:  # no hipcc: the tree's clang
        env["HIP_CLANG_PATH"] = changed["HIP_CLANG_PATH"] = str(tree.clang_dir)
    command = step.command
    if shape.name == shapes.SCIKIT_BUILD_CORE:
        command = shapes.pip_command(Path(command[0]), step.wheel_dir, found.config_settings)
    notes = (*step.notes, *found.notes)
    done = replace(step, env=env, changed=changed, command=command, notes=notes, shape=shape)
    return replace(done, hip_launcher=launcher)


def _torch_features(
    torch: ProjectStep, inputs: Inputs
) -> tuple[dict[str, str], tuple[features.Feature, ...]]:
    """torch's build features: the variables written (only for what the user set) and, per
    feature, on or off and why (``features``)."""
    cfg, targets = inputs.settings, inputs.targets
    spec = next(iter(cfg.selected_projects(["torch"])))
    given = {**cfg.env, **pairs(spec.build_env, "build_env", "torch")}
    decided = [
        features.aotriton_state(
            features.given_wins(f, given), torch.env, cfg.features.flash_attention
        )
        for f in features.decide(cfg.features, targets=targets)
    ]
    if problem := featureneeds.ck_problem(decided, torch.source):
        raise RocmTreeError(problem)
    add = features.torch_env(cfg.features, targets=targets, given=torch.env)
    add = {k: v for k, v in add.items() if k not in given}  # the user's own variables win
    return add, tuple(decided)


def add_env(step: ProjectStep, add: Mapping[str, str]) -> ProjectStep:
    """``step`` with ``add`` set in its build environment (and shown as set by rocm-build)."""
    if not add:
        return step
    return replace(step, env={**step.env, **add}, changed={**step.changed, **add})


@dataclass(frozen=True)
class _Shared:
    """What every project's step is made from: the inputs, and what is decided from them once
    (the Python that runs the builds, the venv, the local version label, the aotriton setting)."""

    inputs: Inputs
    python: Path
    venv: Path | None
    label: str
    aotriton: str


def _shared(inputs: Inputs) -> _Shared:
    cfg = inputs.settings
    setting = cfg.build.venv
    venv: Path | None = None
    python = inputs.machine.python
    if setting != "current":
        venv = (
            inputs.folders.work_dir / "venv"
            if setting in ("", "create")
            else (cfg.cwd / setting).resolve()
        )
        python = _venv_python(venv)
    aotriton = cfg.build.aotriton
    if aotriton not in ("", "auto", "off"):
        aotriton = str(cfg.absolute(aotriton))
    label = dist.local_version_label(inputs.tree.version, cfg.build.version_suffix)
    return _Shared(inputs, python, venv, label, aotriton)


def _assemble(
    shared: _Shared, steps: tuple[ProjectStep, ...], triton: tritonbuild.TritonBuild | None
) -> Plan:
    """The one place a ``Plan`` is made."""
    inputs = shared.inputs
    cfg, folders = inputs.settings, inputs.folders
    find_links = [str((cfg.cwd / f).resolve()) for f in cfg.build.find_links]
    return Plan(
        steps=steps,
        tree=inputs.tree,
        targets=inputs.targets,
        settings=cfg.build,
        base_python=inputs.machine.python,
        python=shared.python,
        venv=shared.venv,
        output_dir=folders.output_dir,
        work_dir=folders.work_dir,
        pip_args=_pip_args(cfg.build.index_url, find_links, no_index=cfg.build.no_index),
        compiler_cache=inputs.found.compiler_cache,
        no_wait=cfg.general.no_wait,
        triton=triton,
    )


def _pip_args(index_url: str, find_links: Sequence[str], *, no_index: bool) -> tuple[str, ...]:
    pip_args: list[str] = []
    if index_url:
        pip_args += ["--index-url", index_url]
    for folder in find_links:
        pip_args += ["--find-links", folder]
    if no_index:
        pip_args.append("--no-index")
    return tuple(pip_args)


def _source(src_dir: Path, spec: ProjectSpec) -> Path:
    source = src_dir / spec.name
    if not source.is_dir():
        msg = (
            f"no checkout of {spec.name} at {source}; run 'rocm-build checkout {spec.name}' "
            "or pass --src-dir"
        )
        raise ConfigError(msg)
    if spec.build_tool not in ("pip", "setup.py"):
        msg = f"[projects.{spec.name}] build_tool must be 'pip' or 'setup.py'"
        raise ConfigError(msg)
    return source


def build_dir(source: Path, spec: ProjectSpec) -> Path | None:
    """Where a setup.py build runs when not at the checkout's root: ``python/`` of a checkout
    whose ``setup.py`` is only there (ROCm's older Triton branches, before Triton moved it to
    the root; TheRock's build_prod_wheels.py looks in both places)."""
    if spec.build_tool != "setup.py" or (source / "setup.py").is_file():
        return None
    nested = source / "python"
    return nested if (nested / "setup.py").is_file() else None


def _command(python: Path, spec: ProjectSpec, wheel_dir: Path) -> tuple[str, ...]:
    if spec.build_tool == "pip":
        return (
            str(python),
            *("-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps"),
            *("--wheel-dir", str(wheel_dir), "--", "."),
        )
    return (str(python), "setup.py", "bdist_wheel", "--dist-dir", str(wheel_dir))


def _version_from(spec: ProjectSpec, revision: Revision | None) -> str:
    if not spec.version_from_tag or revision is None:
        return f"{spec.version_file} + local label"
    return revision.describe()


def _step(shared: _Shared, spec: ProjectSpec) -> ProjectStep:
    inputs = shared.inputs
    cfg, found, work_dir = inputs.settings, inputs.found, inputs.folders.work_dir
    source = _source(inputs.folders.src_dir, spec)
    machine = inputs.machine
    n = cfg.general.jobs or default_jobs(machine.cores, machine.memory, spec.job_memory_gb)
    revision = found.revisions.get(spec.name)
    tree_state = found.worktrees.get(spec.name, worktree.WorkTree())
    label = mark_dirty(shared.label) if tree_state.dirty else shared.label
    version = project_version(source, spec, label, revision)
    version_from = _version_from(spec, revision) if version else "set by the project"
    pin_env = pairs(spec.pin_env, "pin_env", spec.name)
    build_env = pairs(spec.build_env, "build_env", spec.name)
    chosen = _switches(shared, spec, source, build_env)
    for note in chosen.notes:
        log.warning("%s: %s", spec.name, note)
    versions = dict.fromkeys(spec.version_env, version) if version else {}
    extra = merge_env(chosen.env, build_env, found.compiler_cache.env)
    composed = dist.compose_env(
        cfg.env,
        tree=inputs.tree,
        targets=inputs.targets,
        jobs=n,
        versions=versions,
        extra=extra,
        path_prepend=[shared.python.parent] if shared.venv is not None else [],
    )
    run_env = dict(composed.env)
    changed = dict(composed.changed)
    # The user's own launcher and HIP compiler win over the cache's (native HIP reads HIPCXX).
    kept = {k: cfg.env[k] for k in KEPT_NAMES if k in cfg.env and k not in build_env}
    run_env.update(kept)
    for key in kept:
        changed.pop(key, None)
    if shared.venv is not None:
        run_env["VIRTUAL_ENV"] = changed["VIRTUAL_ENV"] = str(shared.venv)
    for var, project in pin_env.items():
        # The real value is known once the dependency is built; shown as a placeholder.
        run_env[var] = changed[var] = f"<version of {project}>"
    wheel_dir = work_dir / "dist" / spec.name
    cwd = build_dir(source, spec)
    skip = {canonicalize_name(n) for n in (spec.name, *spec.depends)}
    names = [s.name for s in inputs.specs]
    later = names[names.index(spec.name) + 1 :]
    return ProjectStep(
        name=spec.name,
        source=source,
        command=_command(shared.python, spec, wheel_dir),
        env=run_env,
        changed=changed,
        removed=tuple(k for k in composed.removed if k not in kept),
        log=work_dir / "logs" / f"build-{spec.name}.log",
        jobs=n,
        version=version,
        version_from=version_from,
        depends=spec.depends,
        pin_env=pin_env,
        requires=tuple(
            r for r in read_build_requirements(cwd or source, spec) if req_name(r) not in skip
        ),
        requirement_files=tuple(source / f for f in spec.requirements if (source / f).is_file()),
        wheel_dir=wheel_dir,
        install_after=any(spec.name in s.depends for s in inputs.specs if s.name in later),
        device_code=spec.device_code,
        notes=chosen.notes,
        build_dir=cwd,
        worktree=tree_state,
    )


def _switches(
    shared: _Shared, spec: ProjectSpec, source: Path, build_env: Mapping[str, str]
) -> Switches:
    """The reference's switches for one project (``switches``)."""
    inputs = shared.inputs
    env, work_dir = inputs.settings.env, inputs.folders.work_dir
    return switches(
        spec,
        inputs.tree,
        given={**env, **build_env},
        aotriton=shared.aotriton,
        aotriton_cache=aotriton_cache_dir(env, work_dir),
        source=source,
        targets=inputs.targets,
        llvm=LlvmWhere(llvm_cache_dir(env, work_dir), inputs.settings.triton.llvm_url),
    )
