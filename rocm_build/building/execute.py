"""The build stage's execute: build the checked-out projects into wheels against one ROCm tree,
for exactly the chosen targets.

``plan`` (in :mod:`.plan`) makes a frozen ``Plan`` from the run context (per project: folder,
environment, command, log, jobs). ``execute`` walks it: one build virtual environment, each
project's own build requirements and build system (:mod:`.commands`), then the wheel check
(:mod:`.wheelcheck`: HIP code objects for exactly the requested targets, a HIP runtime
dependency, pins to the versions just built) before it goes to the output folder. Unchanged
inputs: kept wheel. Its ``Result`` is the stage's result.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocm_build.building import gitversion, inputs, tritonbuild
from rocm_build.building.commands import install_requirements, installed_version, pip, run_build
from rocm_build.building.features import Feature
from rocm_build.building.plan import Plan, ProjectStep, add_env
from rocm_build.building.venv import ensure_venv, held
from rocm_build.building.wheelcheck import WheelFacts, check_wheel, pin_requirement, wheel_metadata
from rocm_build.common import locks, proc, statefile, tempfiles
from rocm_build.common.errors import BuildFailed, ConfigError
from rocm_build.common.masking import mask_values
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.repo import git

__all__ = ["ProjectResult", "Result", "execute"]

log = logging.getLogger(__name__)


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
class Result:
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


def _write_report(plan: Plan, results: Sequence[ProjectResult]) -> Path:
    path = plan.report_path
    projects = {**_previous(plan), **{r.name: r.as_json(plan.tree.version) for r in results}}
    data = {
        "rocm": {"root": str(plan.tree.root), "version": plan.tree.version},
        "targets": list(plan.targets),
        "projects": projects,
    }
    statefile.write_json(path, data, _REPORT)
    return path


def _previous(plan: Plan) -> dict[str, dict[str, Any]]:
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


def _reuse(plan: Plan, step: ProjectStep, key: str, prev: Any) -> ProjectResult | None:
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


def execute(plan: Plan, progress: Progress = NO_PROGRESS) -> Result:
    """Build every project of the plan in order; stop at the first failure.

    Per project built, ``progress`` gets "<project>: build steps" (``BUILD_STEPS``, one
    advance each) and "<project>: log lines" (no total: the lines its build log grows by,
    a sign of life during a long compile). The build folder and the venv are locked
    (``venv.held``) from before the venv is looked at to the end."""
    with held(plan):
        ensure_venv(plan)
        return _build_all(plan, progress)


def _build_all(plan: Plan, progress: Progress) -> Result:
    built: dict[str, str] = {}  # project -> version just built
    wheels: dict[str, str] = {}  # project -> sha256 of the wheel built (or kept) in this run
    results: list[ProjectResult] = []
    previous = _previous(plan)
    for planned in plan.steps:
        started = time.monotonic()
        step, pins = _pinned(plan, planned, built)
        step = _require_triton(plan, step, built)
        deps = {d: wheels.get(d, pins[d]) for d in step.depends}
        key, parts = inputs.inputs(plan, step, deps)
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
    return Result(projects=tuple(results), report=report, rocm_version=plan.tree.version)


def _pinned(
    plan: Plan, step: ProjectStep, built: Mapping[str, str]
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
    plan: Plan, step: ProjectStep, progress: Progress
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


def _require_triton(plan: Plan, step: ProjectStep, built: Mapping[str, str]) -> ProjectStep:
    """torch's step told to require the Triton wheel just built (its version read from it)."""
    t = plan.triton
    if t is None or step.name not in t.requirers or t.project not in built:
        return step
    return add_env(step, tritonbuild.requirement_env(step.env, t, built[t.project]))


def _check(plan: Plan, step: ProjectStep, wheel: Path) -> WheelFacts:
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
    plan: Plan,
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
