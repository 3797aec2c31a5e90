"""The build stage's plan: per project its folder, environment, command, log and jobs.

``survey(ctx, specs)`` asks the programs what only they can tell (the compiler cache's version,
each checkout's git revision); ``plan(ctx, specs, survey)`` reads the run context (settings, the
decided tree and targets) and the survey and makes the frozen ``Plan`` that
``execute`` walks (no processes, no writes; ``make_plan`` is its part that takes values).
"""

from __future__ import annotations

import logging
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from rocm_build import proc
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
from rocm_build.building.switches import aotriton_cache_dir, merge_env, pairs, switches
from rocm_build.building.version import (
    Revision,
    mark_dirty,
    project_version,
    read_revision,
    refuse_dirty,
)
from rocm_build.config.loader import ProjectSpec
from rocm_build.context import RunContext
from rocm_build.errors import BuildFailed, ConfigError, RocmTreeError
from rocm_build.repo import checkoutfile, worktree
from rocm_build.rocm import dist

__all__ = [
    "REPORT_NAME",
    "Plan",
    "ProjectStep",
    "Survey",
    "make_plan",
    "plan",
    "project_version",
    "read_build_requirements",
    "req_name",
    "survey",
]

log = logging.getLogger(__name__)

REPORT_NAME = "build-report.json"
#: Variables of the user's that the build keeps though ``dist`` clears their family.
KEPT_NAMES = ("HIP_CLANG_LAUNCHER", "HIPCXX")


#: PEP 517/518's fallback for a pyproject.toml without a [build-system] table (torchvision's and
#: torchaudio's have tool settings only) or without ``requires``/``build-backend`` in it; pip does
#: the same.
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0",)
LEGACY_BACKEND = "setuptools.build_meta:__legacy__"


def read_build_requirements(source: Path, spec: ProjectSpec) -> tuple[str, ...]:
    """What the build environment needs before the build runs: the ``[build-system] requires``
    of the project (the PEP 517 default without one), plus what its backend would ask for.

    A build without isolation (``pip wheel --no-build-isolation``, ``setup.py bdist_wheel``)
    never asks the backend (``get_requires_for_build_wheel``): setuptools' backend asks for
    ``wheel``, which setuptools before 70.1 needs for bdist_wheel (Python 3.11's venvs come with
    setuptools 65), so it is added here whenever setuptools builds the wheel."""
    pyproject = source / "pyproject.toml"
    data: dict[str, Any] = {}
    text = checkoutfile.read_text(source, "pyproject.toml", f"{spec.name}'s pyproject.toml")
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            msg = f"{pyproject}: not valid TOML ({exc})"
            raise BuildFailed(msg) from None
    table = data.get("build-system")
    table = table if isinstance(table, dict) else {}
    raw = table.get("requires")
    requires = [str(r) for r in raw] if isinstance(raw, list) else list(DEFAULT_BUILD_REQUIRES)
    backend = str(table.get("build-backend") or LEGACY_BACKEND)
    by_setuptools = spec.build_tool == "setup.py" or backend.startswith("setuptools.build_meta")
    if by_setuptools and not any(req_name(r) == "wheel" for r in requires):
        requires.append("wheel")
    return tuple(requires)


def req_name(line: str) -> str | None:
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return None


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
    base_python: Path  # makes the venv
    python: Path  # runs the builds
    venv: Path | None  # created when missing; None = use base_python as it is
    output_dir: Path
    work_dir: Path
    pip_args: tuple[str, ...]
    cache: str  # "ccache", "sccache" or "none"
    force: bool = False  # rebuild projects whose inputs did not change
    no_wait: bool = False  # Locked instead of waiting for an output wheel another run writes
    #: The cache ``cache`` names, with its program and variables (``plan`` sets it).
    compiler_cache: CompilerCache = field(default_factory=lambda: CompilerCache("none"))
    #: Triton built in this run, and who requires it (``tritonbuild``); None = no Triton.
    triton: tritonbuild.TritonBuild | None = None

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


def plan(ctx: RunContext, specs: Sequence[ProjectSpec], found: Survey) -> Plan:
    """The build plan for the run context (``build`` and ``all`` share it): its decided tree
    and targets, and what ``survey`` found.

    Refuses a tree that cannot build these projects for these targets (its warnings are logged),
    and a checkout with uncommitted changes unless ``build.allow_dirty`` (then its wheel's local
    label is marked ``.dirty``); everything else comes from the settings.
    """
    cfg = ctx.settings
    refuse_dirty(found.worktrees, allow=cfg.build.allow_dirty)
    tree, targets = ctx.tree, ctx.targets
    check = trainfloors.check(cfg.general.train, cfg.floors, tree, specs, targets)
    for warning in check.warnings:
        log.warning("%s", warning)
    dist.require_valid(check)
    compiler_cache = found.compiler_cache
    venv_setting = cfg.build.venv
    if venv_setting not in ("", "create", "current"):
        venv_setting = str((cfg.cwd / venv_setting).resolve())
    made = make_plan(
        specs=specs,
        src_dir=ctx.src_dir,
        work_dir=ctx.work_dir,
        output_dir=ctx.output_dir,
        tree=tree,
        targets=targets,
        env=cfg.env,
        base_python=Path(sys.executable),
        venv_setting=venv_setting,
        jobs=cfg.general.jobs,
        cores=proc.cpus_available(),
        memory=memory_available(),
        version_suffix=cfg.build.version_suffix,
        cache=compiler_cache.kind,
        cache_env=compiler_cache.env,
        index_url=cfg.build.index_url,
        find_links=[str((cfg.cwd / f).resolve()) for f in cfg.build.find_links],
        no_index=cfg.build.no_index,
        force=cfg.build.force,
        aotriton=cfg.build.aotriton
        if cfg.build.aotriton in ("", "auto", "off")
        else str(cfg.absolute(cfg.build.aotriton)),
        revisions=found.revisions,
        llvm_url=cfg.triton.llvm_url,
        worktrees=found.worktrees,
    )
    sources = origin.read_sources(cfg, ctx.src_dir, [s.name for s in made.steps])
    made = replace(made, steps=tuple(replace(s, checkout=sources[s.name]) for s in made.steps))
    made = _with_features(made, ctx)
    label = dist.local_version_label(tree.version, cfg.build.version_suffix)
    triton = found.worktrees.get(tritonbuild.TRITON)
    made = _with_triton(made, ctx, mark_dirty(label) if triton and triton.dirty else label)
    if launcher := hiplauncher.plan_launcher(compiler_cache, tree, ctx.work_dir):
        steps = tuple(replace(add_env(s, launcher.env), hip_launcher=launcher) for s in made.steps)
        made = replace(made, steps=steps)
    made = replace(made, steps=tuple(_with_shape(s, tree) for s in made.steps))
    return replace(made, no_wait=cfg.general.no_wait, compiler_cache=compiler_cache)


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


def _with_features(made: Plan, ctx: RunContext) -> Plan:
    """torch's build features: the variables written (only for what the user set) and, per
    feature, on or off and why (``features``)."""
    if "torch" not in [s.name for s in made.steps]:
        return made
    cfg = ctx.settings
    torch = next(s for s in made.steps if s.name == "torch")
    spec = next(iter(cfg.selected_projects(["torch"])))
    given = {**cfg.env, **pairs(spec.build_env, "build_env", "torch")}
    decided = [
        features.aotriton_state(
            features.given_wins(f, given), torch.env, cfg.features.flash_attention
        )
        for f in features.decide(cfg.features, targets=made.targets)
    ]
    if problem := featureneeds.ck_problem(decided, torch.source):
        raise RocmTreeError(problem)
    add = features.torch_env(cfg.features, targets=made.targets, given=torch.env)
    add = {k: v for k, v in add.items() if k not in given}  # the user's own variables win
    steps = tuple(
        replace(add_env(s, add), features=tuple(decided)) if s.name == "torch" else s
        for s in made.steps
    )
    return replace(made, steps=steps)


def _with_triton(made: Plan, ctx: RunContext, label: str) -> Plan:
    """Triton's version suffix and torch's requirement of it in the steps' environments."""
    names = [s.name for s in made.steps]
    adds, build = tritonbuild.configure(names, ctx.settings.triton, ctx.src_dir, label)
    if build is None:
        return made
    for name in build.requirers:
        adds[name] = tritonbuild.requirement_env(
            next(s.env for s in made.steps if s.name == name), build, tritonbuild.PLACEHOLDER
        )
    steps = tuple(add_env(s, adds.get(s.name, {})) for s in made.steps)
    return replace(made, steps=steps, triton=build)


def add_env(step: ProjectStep, add: Mapping[str, str]) -> ProjectStep:
    """``step`` with ``add`` set in its build environment (and shown as set by rocm-build)."""
    if not add:
        return step
    return replace(step, env={**step.env, **add}, changed={**step.changed, **add})


@dataclass(frozen=True)
class _Shared:
    """What every project's step is made from (``make_plan``'s arguments, resolved)."""

    specs: Sequence[ProjectSpec]
    src_dir: Path
    work_dir: Path
    tree: dist.RocmTree
    targets: Sequence[str]
    env: Mapping[str, str]
    python: Path
    venv: Path | None
    label: str
    jobs: int
    cores: int
    memory: int | None
    cache_env: Mapping[str, str]
    revisions: Mapping[str, Revision]
    aotriton: str
    llvm_url: str
    worktrees: Mapping[str, worktree.WorkTree]


def make_plan(
    *,
    specs: Sequence[ProjectSpec],
    src_dir: Path,
    work_dir: Path,
    output_dir: Path,
    tree: dist.RocmTree,
    targets: Sequence[str],
    env: Mapping[str, str],
    base_python: Path,
    venv_setting: str,
    jobs: int = 0,
    cores: int = 1,
    memory: int | None = None,
    version_suffix: str = "",
    cache: str = "none",
    cache_env: Mapping[str, str] | None = None,
    index_url: str = "",
    find_links: Sequence[str] = (),
    no_index: bool = False,
    force: bool = False,
    revisions: Mapping[str, Revision] | None = None,
    aotriton: str = "auto",
    llvm_url: str = "",
    worktrees: Mapping[str, worktree.WorkTree] | None = None,
) -> Plan:
    """Everything ``execute`` will do, decided up front (no processes, no writes)."""
    if venv_setting == "current":
        venv: Path | None = None
        python = base_python
    else:
        venv = work_dir / "venv" if venv_setting in ("", "create") else Path(venv_setting)
        python = _venv_python(venv)
    shared = _Shared(
        specs=specs,
        src_dir=src_dir,
        work_dir=work_dir,
        tree=tree,
        targets=targets,
        env=env,
        python=python,
        venv=venv,
        label=dist.local_version_label(tree.version, version_suffix),
        jobs=jobs,
        cores=cores,
        memory=memory,
        cache_env=cache_env or {},
        revisions=revisions or {},
        aotriton=aotriton,
        llvm_url=llvm_url,
        worktrees=worktrees or {},
    )
    return Plan(
        steps=tuple(_step(shared, spec) for spec in specs),
        tree=tree,
        targets=tuple(targets),
        base_python=base_python,
        python=python,
        venv=venv,
        output_dir=output_dir,
        work_dir=work_dir,
        pip_args=_pip_args(index_url, find_links, no_index=no_index),
        cache=cache,
        force=force,
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


def _source(shared: _Shared, spec: ProjectSpec) -> Path:
    source = shared.src_dir / spec.name
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
    source = _source(shared, spec)
    n = shared.jobs or default_jobs(shared.cores, shared.memory, spec.job_memory_gb)
    revision = shared.revisions.get(spec.name)
    tree_state = shared.worktrees.get(spec.name, worktree.WorkTree())
    label = mark_dirty(shared.label) if tree_state.dirty else shared.label
    version = project_version(source, spec, label, revision)
    version_from = _version_from(spec, revision) if version else "set by the project"
    versions = dict.fromkeys(spec.version_env, version) if version else {}
    pin_env = pairs(spec.pin_env, "pin_env", spec.name)
    build_env = pairs(spec.build_env, "build_env", spec.name)
    chosen = switches(
        spec,
        shared.tree,
        given={**shared.env, **build_env},
        aotriton=shared.aotriton,
        aotriton_cache=aotriton_cache_dir(shared.env, shared.work_dir),
        source=source,
        targets=shared.targets,
        llvm_cache=llvm_cache_dir(shared.env, shared.work_dir),
        llvm_url=shared.llvm_url,
    )
    for note in chosen.notes:
        log.warning("%s: %s", spec.name, note)
    extra = merge_env(chosen.env, build_env, shared.cache_env)
    composed = dist.compose_env(
        shared.env,
        tree=shared.tree,
        targets=shared.targets,
        jobs=n,
        versions=versions,
        extra=extra,
        path_prepend=[shared.python.parent] if shared.venv is not None else [],
    )
    run_env = dict(composed.env)
    changed = dict(composed.changed)
    # The user's own launcher and HIP compiler win over the cache's (native HIP reads HIPCXX).
    kept = {k: shared.env[k] for k in KEPT_NAMES if k in shared.env and k not in build_env}
    run_env.update(kept)
    for key in kept:
        changed.pop(key, None)
    if shared.venv is not None:
        run_env["VIRTUAL_ENV"] = changed["VIRTUAL_ENV"] = str(shared.venv)
    for var, project in pin_env.items():
        # The real value is known once the dependency is built; shown as a placeholder.
        run_env[var] = changed[var] = f"<version of {project}>"
    wheel_dir = shared.work_dir / "dist" / spec.name
    cwd = build_dir(source, spec)
    skip = {canonicalize_name(n) for n in (spec.name, *spec.depends)}
    names = [s.name for s in shared.specs]
    later = names[names.index(spec.name) + 1 :]
    return ProjectStep(
        name=spec.name,
        source=source,
        command=_command(shared.python, spec, wheel_dir),
        env=run_env,
        changed=changed,
        removed=tuple(k for k in composed.removed if k not in kept),
        log=shared.work_dir / "logs" / f"build-{spec.name}.log",
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
        install_after=any(spec.name in s.depends for s in shared.specs if s.name in later),
        device_code=spec.device_code,
        notes=chosen.notes,
        build_dir=cwd,
        worktree=tree_state,
    )
