"""Build the checked-out projects into wheels against one ROCm tree, for exactly the chosen targets.

``plan`` (in ``buildplan``) makes a frozen ``BuildPlan`` from the run context (per project:
folder, environment, command, log, jobs). ``execute`` walks it: one build virtual environment,
each project's own build requirements and build system (``buildenv``), then a check of the
wheel (HIP code objects for exactly the requested targets, a HIP runtime dependency, pins to
the versions just built) before it goes to the output folder. Unchanged inputs: kept wheel.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from rocm_build import arch, locks, proc, statefile, tempfiles
from rocm_build.building import buildinputs, gitversion, tritonbuild
from rocm_build.building.buildenv import install_requirements, installed_version, pip, run_build
from rocm_build.building.buildfeatures import Feature
from rocm_build.building.buildplan import (
    GIB,
    BuildPlan,
    ProjectStep,
    add_env,
    default_jobs,
    memory_available,
    project_version,
    read_build_requirements,
)
from rocm_build.building.buildvenv import ensure_venv, held
from rocm_build.errors import BuildFailed, ConfigError
from rocm_build.masking import mask_values
from rocm_build.progress import NO_PROGRESS, Progress
from rocm_build.repo import git
from rocm_build.wheel import wheelmeta
from rocm_build.wheel.wheelfile import WheelReader, WheelWriter

__all__ = [
    "GIB",
    "BuildPlan",
    "BuildResult",
    "ProjectResult",
    "ProjectStep",
    "check_wheel",
    "default_jobs",
    "execute",
    "memory_available",
    "project_version",
    "read_build_requirements",
    "wheel_metadata",
]

log = logging.getLogger(__name__)

_HIP_RUNTIME = re.compile(r"^libamdhip64\.so(\.\d+)*$")


# --- wheel facts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class WheelFacts:
    name: str
    version: str
    requires: tuple[str, ...]
    targets: tuple[str, ...]  # gfx base names found in code objects, sorted


def wheel_metadata(wheel: Path) -> tuple[str, str, tuple[str, ...]]:
    """(name, version, Requires-Dist entries) of a wheel (opened by the checking reader)."""
    with WheelReader(wheel) as reader:
        meta = reader.metadata()
    return (
        wheelmeta.metadata_name(meta),
        wheelmeta.metadata_version(meta),
        wheelmeta.requirements(meta),
    )


def check_wheel(
    wheel: Path, targets: Sequence[str], project: str, *, device_code: bool = True
) -> WheelFacts:
    """Refuse a wheel that would not run on the requested GPUs: no HIP code objects or no HIP
    runtime dependency ("built without ROCm"), or code objects that miss a requested target or
    carry one that was not requested. A single library covering only some of the targets is
    reported (some sub-builds, such as aotriton, filter the list on purpose).

    A project not expected to carry device code (``device_code`` false: torchaudio's ROCm build
    is host code only) may have none; code objects it does carry are checked all the same."""
    from rocm_build.wheel.analyze import analyze_path

    name, version, requires = wheel_metadata(wheel)
    wanted = {arch.base_name(t) for t in targets}
    analysis = analyze_path(wheel)
    for member in analysis.unreadable:
        log.warning("%s: %s looks like ELF but cannot be read", project, member)
    runtime = [
        arc
        for arc, m in analysis.elves.items()
        if any(_HIP_RUNTIME.match(n) for n in m.info.needed)
    ]
    per_file = {arc: m.targets for arc, m in analysis.elves.items() if m.targets}
    found = set().union(*per_file.values()) if per_file else set()
    if not found and not device_code:
        log.info("%s: host code only, as expected (device_code = false)", project)
        return WheelFacts(name, version, requires, ())
    if not found or not runtime:
        why = "no HIP code objects" if not found else "no dependency on libamdhip64"
        msg = (
            f"{project} was built without ROCm: its wheel has {why}; check USE_ROCM and the "
            "build log for a CPU-only fallback"
        )
        raise BuildFailed(msg)
    missing = sorted(t for t in wanted if not arch.covered(t, found))
    if missing:
        msg = (
            f"{project}: the wheel's code objects are missing {', '.join(missing)} (they cover "
            f"{', '.join(sorted(found))}); a part of the build ignored PYTORCH_ROCM_ARCH: see "
            "the build log"
        )
        raise BuildFailed(msg)
    unexpected = sorted(k for k in found if not arch.keeps([k], wanted))
    if unexpected:
        where = sorted(f for f, t in per_file.items() if t - wanted)
        msg = (
            f"{project}: unexpected target {', '.join(unexpected)} in {', '.join(where)} "
            f"(requested {', '.join(sorted(wanted))})"
        )
        raise BuildFailed(msg)
    for member, have in sorted(per_file.items()):
        if have != wanted:
            log.warning(
                "%s: %s has code objects only for %s", project, member, ", ".join(sorted(have))
            )
    return WheelFacts(name, version, requires, tuple(sorted(found)))


def pin_requirement(wheel: Path, dep: str, version: str) -> str | None:
    """Make ``wheel`` require exactly ``dep==version``. Returns None when it already does,
    else what changed; raises when the wheel pins another version of ``dep``."""
    _, _, requires = wheel_metadata(wheel)
    key = canonicalize_name(dep)
    exact = Version(version)
    unconditional: list[str] = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != key or req.marker is not None:
            continue
        if len(req.specifier) == 1 and str(req.specifier) == f"=={version}":
            return None
        if req.specifier and not req.specifier.contains(exact, prereleases=True):
            msg = (
                f"{wheel.name} requires {line} but was built against {dep} {version}; the "
                "build saw the wrong version of it"
            )
            raise BuildFailed(msg)
        unconditional.append(line)
    _rewrite_requires(wheel, f"{dep}=={version}")
    was = ", ".join(unconditional) or "nothing"
    return f"Requires-Dist {dep}=={version} (was {was})"


def _rewrite_requires(wheel: Path, requirement: str) -> None:
    """METADATA requires ``requirement`` instead of the unconditional ones on the same name;
    every other member is copied raw (checked against RECORD on the way) and RECORD is written
    anew; the result replaces ``wheel`` atomically."""
    with WheelReader(wheel) as reader:
        meta_name = f"{reader.dist_info}/METADATA"
        record_name = f"{reader.dist_info}/RECORD"
        meta = wheelmeta.add_requirement(reader.read_text(meta_name), requirement).encode()
        with WheelWriter(wheel, reader.dist_info) as writer:
            for m in reader.members:
                if m.is_dir or m.name == record_name:
                    continue
                if m.name == meta_name:
                    writer.add_bytes(meta_name, meta)
                else:
                    writer.copy_member(reader, m.name)
            writer.commit()


# --- execution ----------------------------------------------------------------------------------


_SHOWN_PATHS = 20  # a report names this many of a dirty checkout's paths


@dataclass(frozen=True)
class ProjectResult:
    name: str
    wheel: Path
    version: str
    commit: str
    targets: tuple[str, ...]
    sha256: str
    seconds: float
    jobs: int
    retried_with: int | None = None
    pinned: tuple[str, ...] = ()
    inputs: str = ""  # fingerprint of what the wheel was built from ("" = not reusable)
    reused: bool = False  # inputs unchanged: the previous wheel was kept
    inputs_parts: Mapping[str, str] = field(default_factory=dict)  # a digest per part
    device_code: bool = True  # the wheel was required to carry HIP code objects
    version_from: str = ""  # where the version came from (release tag, dev build, file)
    #: What rocm-build set for the build (masked) and what the plan decided for the user.
    environment: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    features: tuple[Feature, ...] = ()  # torch's: on or off and why
    #: Uncommitted paths the wheel was built with (``--allow-dirty``) and their fingerprint.
    dirty_paths: tuple[str, ...] = ()
    dirty_fingerprint: str = ""

    def as_json(self, rocm_version: str) -> dict[str, Any]:
        return {
            "wheel": self.wheel.name,
            "version": self.version,
            "commit": self.commit,
            "dirty": bool(self.dirty_paths),
            "dirty_fingerprint": self.dirty_fingerprint,
            "dirty_paths": list(self.dirty_paths[:_SHOWN_PATHS]),
            "gfx_targets": list(self.targets),
            "rocm_version": rocm_version,
            "duration_seconds": round(self.seconds, 1),
            "sha256": self.sha256,
            "jobs": self.jobs,
            "retried_with_jobs": self.retried_with,
            "pinned": list(self.pinned),
            "inputs": self.inputs,
            "inputs_parts": dict(self.inputs_parts),
            "device_code": self.device_code,
            "version_from": self.version_from,
            "environment": mask_values(self.environment),
            "notes": list(self.notes),
            "features": [f.as_json() for f in self.features],
        }


@dataclass(frozen=True)
class BuildResult:
    projects: tuple[ProjectResult, ...]
    report: Path
    rocm_version: str = ""

    @property
    def nothing_to_do(self) -> str:
        return ""  # every wheel is checked and placed, also one kept from the last build

    @property
    def outputs(self) -> list[Path]:
        return [p.wheel for p in self.projects]

    def as_json(self) -> dict[str, Any]:
        return {
            "projects": [
                {
                    "name": p.name,
                    **p.as_json(self.rocm_version),
                    "wheel": str(p.wheel),
                    "reused": p.reused,
                }
                for p in self.projects
            ],
            "report": str(self.report),
        }


def _one_wheel(step: ProjectStep) -> Path:
    wheels = sorted(step.wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        msg = f"{step.name} build made {len(wheels)} wheels in {step.wheel_dir}, expected one"
        raise BuildFailed(msg)
    return wheels[0]


def _place(wheel: Path, output_dir: Path, *, no_wait: bool = False) -> Path:
    """Copy the built wheel into the output folder, under the wheel's lock, atomically."""
    tempfiles.check_folder(output_dir)
    dest = output_dir / wheel.name
    with tempfiles.swept(output_dir), locks.hold(dest, f"the wheel {dest}", no_wait=no_wait):
        tempfiles.atomic_copy(wheel, dest)
    return dest


_REPORT = "build report"


def _write_report(plan: BuildPlan, results: Sequence[ProjectResult]) -> Path:
    path = plan.report_path
    projects = {**_previous(plan), **{r.name: r.as_json(plan.tree.version) for r in results}}
    data = {
        "rocm": {"root": str(plan.tree.root), "version": plan.tree.version},
        "targets": list(plan.targets),
        "projects": projects,
    }
    statefile.write_json(path, data, _REPORT)
    return path


def _previous(plan: BuildPlan) -> dict[str, dict[str, Any]]:
    """The projects of the last build's report. A report that is damaged or of other types is
    as good as none (its projects are built again); one that is no regular file of this user's
    alone (a link, a FIFO, a folder, another user's) stops the build (``statefile``, exit 14)."""
    try:
        data = statefile.read_json(plan.report_path, _REPORT)
    except (FileNotFoundError, ValueError):
        return {}
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, dict):
        return {}
    return {name: entry for name, entry in projects.items() if isinstance(entry, dict)}


#: The types of what a reused project's entry gives back (``ProjectResult.as_json``).
_ENTRY_TYPES: dict[str, type | tuple[type, ...]] = {
    "wheel": str,
    "version": str,
    "sha256": str,
    "commit": str,
    "duration_seconds": (int, float),
    "jobs": int,
    "retried_with_jobs": (int, type(None)),
    "gfx_targets": list,
    "pinned": list,
}


def _entry_ok(prev: Mapping[str, Any]) -> bool:
    """Whether a report entry has the types rocm-build writes, and names a wheel in the output
    folder itself (no folder part)."""
    if not all(isinstance(prev.get(k), t) for k, t in _ENTRY_TYPES.items()):
        return False
    if not all(isinstance(v, str) for v in [*prev["gfx_targets"], *prev["pinned"]]):
        return False
    name = prev["wheel"]
    return name.endswith(".whl") and Path(name).name == name and not name.startswith(".")


def _reuse(plan: BuildPlan, step: ProjectStep, key: str, prev: Any) -> ProjectResult | None:
    """The previous result when its inputs equal ``key`` and its wheel is still there intact."""
    if plan.force or not key or not isinstance(prev, dict) or prev.get("inputs") != key:
        return None
    if not _entry_ok(prev):
        return None
    wheel = plan.output_dir / str(prev["wheel"])
    if not wheel.is_file() or statefile.file_sha256(wheel) != prev.get("sha256"):
        return None
    if step.install_after and installed_version(plan, step, step.name) != prev.get("version"):
        args = ["install", "--no-deps", "--force-reinstall", "--", str(wheel)]
        pip(plan, step, args, "installing")
    return ProjectResult(
        name=step.name,
        wheel=wheel,
        version=str(prev["version"]),
        commit=str(prev.get("commit", "")),
        targets=tuple(prev.get("gfx_targets", ())),
        sha256=str(prev["sha256"]),
        seconds=float(prev.get("duration_seconds", 0.0)),
        jobs=int(prev.get("jobs", step.jobs)),
        retried_with=prev.get("retried_with_jobs"),
        pinned=tuple(prev.get("pinned", ())),
        inputs=key,
        reused=True,
        device_code=step.device_code,
        version_from=step.version_from,
        environment={k: step.env.get(k, "") for k in step.changed},
        notes=step.notes,
        features=step.features,
        dirty_paths=step.worktree.paths,
        dirty_fingerprint=step.worktree.fingerprint,
    )


#: The steps of one project's build reported as "<project>: build steps".
BUILD_STEPS = ("requirements", "compile", "wheel check")


def execute(plan: BuildPlan, progress: Progress = NO_PROGRESS) -> BuildResult:
    """Build every project of the plan in order; stop at the first failure.

    Per project built, ``progress`` gets "<project>: build steps" (``BUILD_STEPS``, one
    advance each) and "<project>: log lines" (no total: the lines its build log grows by,
    a sign of life during a long compile). The build folder and the venv are locked
    (``buildvenv.held``) from before the venv is looked at to the end."""
    with held(plan):
        ensure_venv(plan)
        return _build_all(plan, progress)


def _build_all(plan: BuildPlan, progress: Progress) -> BuildResult:
    built: dict[str, str] = {}  # project -> version just built
    wheels: dict[str, str] = {}  # project -> sha256 of the wheel built (or kept) in this run
    results: list[ProjectResult] = []
    previous = _previous(plan)
    for planned in plan.steps:
        started = time.monotonic()
        step, pins = _pinned(plan, planned, built)
        step = _require_triton(plan, step, built)
        deps = {d: wheels.get(d, pins[d]) for d in step.depends}
        key, parts = buildinputs.inputs(plan, step, deps)
        result = _reuse(plan, step, key, previous.get(step.name))
        if result is not None:
            log.info(
                "%s: unchanged since the last build; keeping %s (--force rebuilds)",
                step.name,
                result.wheel.name,
            )
        else:
            result = _build_one(plan, step, pins, key, started, progress)
        result = replace(result, inputs_parts=parts)
        built[step.name] = result.version
        wheels[step.name] = result.sha256
        results.append(result)
        # Written after every project, so a later failure keeps what was built.
        _write_report(plan, results)
    report = plan.report_path if results else _write_report(plan, results)
    return BuildResult(projects=tuple(results), report=report, rocm_version=plan.tree.version)


def _pinned(
    plan: BuildPlan, step: ProjectStep, built: Mapping[str, str]
) -> tuple[ProjectStep, dict[str, str]]:
    """The step with its ``pin_env`` variables set to the versions of its dependencies (built
    in this run or installed in the build environment), and those versions."""
    pins: dict[str, str] = {}
    env = dict(step.env)
    for dep in step.depends:
        version = built.get(dep) or installed_version(plan, step, dep)
        if version is None:
            msg = (
                f"{step.name} builds against {dep}, which is neither built in this run nor "
                f"installed in the build environment; run 'rocm-build build {dep} {step.name}'"
            )
            raise BuildFailed(msg)
        pins[dep] = version
    for var, project in step.pin_env.items():
        if project not in pins:
            msg = f"[projects.{step.name}] pin_env names '{project}', which is not in depends"
            raise ConfigError(msg)
        env[var] = pins[project]
    return replace(step, env=env), pins


def _compile(
    plan: BuildPlan, step: ProjectStep, progress: Progress
) -> tuple[ProjectStep, int | None, Path, WheelFacts]:
    """Requirements, the project's build and the wheel check, reported to ``progress``."""
    _own_outputs(step)
    git.exclude_build_outputs(step.source)  # what the build writes there is no one's work
    log.info("building %s (%d jobs); log: %s", step.name, step.jobs, step.log)
    steps_task, lines_task = f"{step.name}: build steps", f"{step.name}: log lines"
    progress.start(steps_task, len(BUILD_STEPS))
    progress.start(lines_task, None)

    def line(_text: str, task: str = lines_task) -> None:
        progress.advance(task)

    try:
        install_requirements(plan, step, line)
        progress.advance(steps_task)
        if statefile.check_folder(step.wheel_dir, _OUTPUTS) is not None:
            shutil.rmtree(step.wheel_dir, ignore_errors=True)  # a real folder: links not followed
        step, retried = run_build(step, line)
        progress.advance(steps_task)
        wheel = _one_wheel(step)
        facts = _check(plan, step, wheel)
        progress.advance(steps_task)
    finally:
        progress.done(lines_task)
        progress.done(steps_task)
    return step, retried, wheel, facts


_OUTPUTS = "build's output folder"


def _own_outputs(step: ProjectStep) -> None:
    """The work folder's places a build writes and empties (``dist/``, ``dist/<project>``,
    ``logs/``) are folders of this user's, and its log a file of theirs, emptied: a link, a file,
    a FIFO or another user's thing planted there is refused (exit 14), never emptied, written
    through or waited on."""
    statefile.own_folder(step.wheel_dir.parent, _OUTPUTS)
    statefile.check_folder(step.wheel_dir, _OUTPUTS)
    proc.open_log(step.log, empty=True).close()


def _require_triton(plan: BuildPlan, step: ProjectStep, built: Mapping[str, str]) -> ProjectStep:
    """torch's step told to require the Triton wheel just built (its version read from it)."""
    t = plan.triton
    if t is None or step.name not in t.requirers or t.project not in built:
        return step
    return add_env(step, tritonbuild.requirement_env(step.env, t, built[t.project]))


def _check(plan: BuildPlan, step: ProjectStep, wheel: Path) -> WheelFacts:
    """The wheel check: Triton's wheel has no HIP code objects (it loads HIP at run time), and
    torch's must require the Triton built with it."""
    t = plan.triton
    if t is not None and step.name == t.project:
        name, version, requires = wheel_metadata(wheel)
        tritonbuild.check_triton_wheel(name, version, step.name)
        return WheelFacts(name, version, requires, ())
    facts = check_wheel(wheel, plan.targets, step.name, device_code=step.device_code)
    if t is not None and step.name in t.requirers:
        tritonbuild.check_requires(t, step.env, step.name, facts.requires)
    return facts


def _build_one(
    plan: BuildPlan,
    step: ProjectStep,
    pins: Mapping[str, str],
    key: str,
    started: float,
    progress: Progress,
) -> ProjectResult:
    """Build one project, pin its dependencies in the wheel and place it in the output folder."""
    step, retried, wheel, facts = _compile(plan, step, progress)
    if step.version and facts.version != step.version:
        log.warning(
            "%s: the wheel's version is %s, not %s: its build ignores %s",
            step.name,
            facts.version,
            step.version,
            ", ".join(k for k, v in step.changed.items() if v == step.version),
        )
    pinned = []
    for dep, version in pins.items():
        change = pin_requirement(wheel, dep, version)
        if change:
            log.warning("%s: its build did not pin %s; set %s", step.name, dep, change)
            pinned.append(change)
    # A build of uncommitted changes is no upstream commit's source (``gitversion``).
    upstream = (
        [] if step.worktree.dirty else gitversion.note_upstream(step.name, step.source, wheel)
    )
    notes = [*step.notes, *upstream]
    dest = _place(wheel, plan.output_dir, no_wait=plan.no_wait)
    if step.install_after:
        pip(
            plan,
            step,
            ["install", "--no-deps", "--force-reinstall", "--", str(dest)],
            f"installing {step.name}",
        )
    log.info("%s %s: %s", step.name, facts.version, dest)
    return ProjectResult(
        name=step.name,
        wheel=dest,
        version=facts.version,
        commit=step.worktree.head,
        targets=facts.targets,
        sha256=statefile.file_sha256(dest),
        seconds=time.monotonic() - started,
        jobs=step.jobs,
        retried_with=retried,
        pinned=tuple(pinned),
        inputs=key,
        device_code=step.device_code,
        version_from=step.version_from,
        environment={k: step.env.get(k, "") for k in step.changed},
        notes=tuple(notes),
        features=step.features,
        dirty_paths=step.worktree.paths,
        dirty_fingerprint=step.worktree.fingerprint,
    )
