"""Build the checked-out projects into wheels against one ROCm tree, for exactly the chosen targets.

``plan_build`` is pure: from the resolved settings, the tree and the targets it makes a frozen
``BuildPlan`` (per project: folder, environment, command, log, jobs). ``execute`` walks it: one
build virtual environment, each project's own build requirements, the project's own build system,
then a check of the wheel (HIP code objects for exactly the requested targets, a HIP runtime
dependency, dependencies pinned to the versions just built) before it is put in the output folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import sys
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import NormalizedName, canonicalize_name
from packaging.version import InvalidVersion, Version

from . import arch, dist, locks, proc, tempfiles
from .cache import CompilerCache, mask_values, resolve_cache
from .config import ProjectSpec
from .context import RunContext
from .errors import BuildFailed, CommandFailed, ConfigError, ToolMissing
from .progress import NO_PROGRESS, Progress
from .wheelfile import WheelReader, WheelWriter

__all__ = [
    "BuildPlan",
    "BuildResult",
    "ProjectResult",
    "ProjectStep",
    "check_wheel",
    "cpu_count",
    "default_jobs",
    "execute",
    "memory_available",
    "plan_build",
    "plan_from_config",
    "project_version",
    "read_build_requirements",
    "wheel_metadata",
]

log = logging.getLogger(__name__)

REPORT_NAME = "build-report.json"
GIB = 1 << 30
# What a compile killed for memory leaves in a log: gcc/clang drivers print the first, make and
# ninja report the child's status, Python build helpers the signal.
_OOM = re.compile(
    r"Killed signal terminated program"
    r"|\b(?:exit (?:code|status)|returned non-zero exit status|error code)[ :]+137\b"
    r"|killed by signal 9\b|\bSIGKILL\b"
)
_HIP_RUNTIME = re.compile(r"^libamdhip64\.so(\.\d+)*$")


# --- planning -----------------------------------------------------------------------------------


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def memory_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory available to new processes (MemAvailable), or None when unknown."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_jobs(cores: int, available: int | None, job_memory_gb: float) -> int:
    """The smaller of the core count and how many jobs of ``job_memory_gb`` fit in memory."""
    jobs = max(cores, 1)
    if available is not None and job_memory_gb > 0:
        jobs = min(jobs, int(available // (job_memory_gb * GIB)))
    return max(jobs, 1)


def project_version(source: Path, spec: ProjectSpec, label: str) -> str:
    """The version the build is told to use: the version file plus the local label; "" when the
    project has no version file (it then versions itself)."""
    if not spec.version_file or not spec.version_env:
        return ""
    path = source / spec.version_file
    if not path.is_file():
        return ""
    base = path.read_text(encoding="utf-8").strip()
    local = label.lstrip("+")
    text = f"{base}.{local}" if "+" in base else f"{base}+{local}"
    try:
        Version(text)
    except InvalidVersion:
        msg = f"{spec.name}: '{text}' is not a valid version; fix --version-suffix or {path}"
        raise ConfigError(msg) from None
    return text


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
    if pyproject.is_file():
        try:
            data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            msg = f"{pyproject}: not valid TOML ({exc})"
            raise BuildFailed(msg) from None
    table = data.get("build-system")
    table = table if isinstance(table, dict) else {}
    raw = table.get("requires")
    requires = [str(r) for r in raw] if isinstance(raw, list) else list(DEFAULT_BUILD_REQUIRES)
    backend = str(table.get("build-backend") or LEGACY_BACKEND)
    by_setuptools = spec.build_tool == "setup.py" or backend.startswith("setuptools.build_meta")
    if by_setuptools and not any(_req_name(r) == "wheel" for r in requires):
        requires.append("wheel")
    return tuple(requires)


def _req_name(line: str) -> str | None:
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement:
        return None


def _pairs(items: Sequence[str], what: str, project: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            msg = f"[projects.{project}] {what}: expected NAME=VALUE, got '{item}'"
            raise ConfigError(msg)
        out[name.strip()] = value.strip()
    return out


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
    depends: tuple[str, ...]
    pin_env: Mapping[str, str]  # variable -> project whose built version it carries
    requires: tuple[str, ...]  # build-system requirements (projects we build are left out)
    requirement_files: tuple[Path, ...]
    wheel_dir: Path
    install_after: bool  # a later project builds against this one


@dataclass(frozen=True)
class BuildPlan:
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
                    "command": list(s.command),
                    "env": mask_values(s.changed),
                    "removed_env": list(s.removed),
                    "jobs": s.jobs,
                    "version": s.version,
                    "log": str(s.log),
                    "requires": list(s.requires),
                    "requirement_files": [str(p) for p in s.requirement_files],
                }
                for s in self.steps
            ],
        }


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def plan_from_config(
    ctx: RunContext, specs: Sequence[ProjectSpec]
) -> tuple[BuildPlan, CompilerCache]:
    """The build plan for the run context (``build`` and ``all`` share it): its tree and targets.

    Refuses a tree that cannot build these projects for these targets (its warnings are logged)
    and picks the compiler cache; everything else comes from the settings.
    """
    cfg = ctx.settings
    tree, targets = ctx.tree, ctx.targets
    check = dist.validate(tree, specs, targets)
    for warning in check.warnings:
        log.warning("%s", warning)
    dist.require_valid(check)
    compiler_cache = resolve_cache(
        cfg.build.cache, cfg.build.cache_url, cfg.env, base_dir=ctx.src_dir
    )
    venv_setting = cfg.build.venv
    if venv_setting not in ("", "create", "current"):
        venv_setting = str((cfg.cwd / venv_setting).resolve())
    plan = plan_build(
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
        cores=cpu_count(),
        memory=memory_available(),
        version_suffix=cfg.build.version_suffix,
        cache=compiler_cache.kind,
        cache_env=compiler_cache.env,
        index_url=cfg.build.index_url,
        find_links=[str((cfg.cwd / f).resolve()) for f in cfg.build.find_links],
        no_index=cfg.build.no_index,
        force=cfg.build.force,
    )
    return replace(plan, no_wait=cfg.general.no_wait), compiler_cache


def plan_build(
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
) -> BuildPlan:
    """Everything ``execute`` will do, decided up front (no processes, no writes)."""
    if venv_setting == "current":
        venv: Path | None = None
        python = base_python
    else:
        venv = work_dir / "venv" if venv_setting in ("", "create") else Path(venv_setting)
        python = _venv_python(venv)
    label = dist.local_version_label(tree.version, version_suffix)
    pip_args: list[str] = []
    if index_url:
        pip_args += ["--index-url", index_url]
    for folder in find_links:
        pip_args += ["--find-links", folder]
    if no_index:
        pip_args.append("--no-index")
    names = [s.name for s in specs]
    steps: list[ProjectStep] = []
    for spec in specs:
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
        n = jobs or default_jobs(cores, memory, spec.job_memory_gb)
        version = project_version(source, spec, label)
        versions = dict.fromkeys(spec.version_env, version) if version else {}
        pin_env = _pairs(spec.pin_env, "pin_env", spec.name)
        extra = {**_pairs(spec.build_env, "build_env", spec.name), **(cache_env or {})}
        prepend = [python.parent] if venv is not None else []
        composed = dist.compose_env(
            env,
            tree=tree,
            targets=targets,
            jobs=n,
            versions=versions,
            extra=extra,
            path_prepend=prepend,
        )
        run_env = dict(composed.env)
        changed = dict(composed.changed)
        if venv is not None:
            run_env["VIRTUAL_ENV"] = changed["VIRTUAL_ENV"] = str(venv)
        for var, project in pin_env.items():
            # The real value is known once the dependency is built; shown as a placeholder.
            run_env[var] = changed[var] = f"<version of {project}>"
        wheel_dir = work_dir / "dist" / spec.name
        if spec.build_tool == "pip":
            command: tuple[str, ...] = (
                str(python),
                *("-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps"),
                *("--wheel-dir", str(wheel_dir), "."),
            )
        else:
            command = (str(python), "setup.py", "bdist_wheel", "--dist-dir", str(wheel_dir))
        skip = {canonicalize_name(n) for n in (spec.name, *spec.depends)}
        requires = tuple(
            r for r in read_build_requirements(source, spec) if _req_name(r) not in skip
        )
        files = tuple(source / f for f in spec.requirements if (source / f).is_file())
        later = names[names.index(spec.name) + 1 :]
        install_after = any(spec.name in s.depends for s in specs if s.name in later)
        steps.append(
            ProjectStep(
                name=spec.name,
                source=source,
                command=command,
                env=run_env,
                changed=changed,
                removed=composed.removed,
                log=work_dir / "logs" / f"build-{spec.name}.log",
                jobs=n,
                version=version,
                depends=spec.depends,
                pin_env=pin_env,
                requires=requires,
                requirement_files=files,
                wheel_dir=wheel_dir,
                install_after=install_after,
            )
        )
    return BuildPlan(
        steps=tuple(steps),
        tree=tree,
        targets=tuple(targets),
        base_python=base_python,
        python=python,
        venv=venv,
        output_dir=output_dir,
        work_dir=work_dir,
        pip_args=tuple(pip_args),
        cache=cache,
        force=force,
    )


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
        parsed = HeaderParser().parsestr(reader.metadata())
    return (
        str(parsed["Name"]),
        str(parsed["Version"]),
        tuple(str(v) for v in parsed.get_all("Requires-Dist") or ()),
    )


def check_wheel(wheel: Path, targets: Sequence[str], project: str) -> WheelFacts:
    """Refuse a wheel that would not run on the requested GPUs: no HIP code objects or no HIP
    runtime dependency ("built without ROCm"), or code objects that miss a requested target or
    carry one that was not requested. A single library covering only some of the targets is
    reported (some sub-builds, such as aotriton, filter the list on purpose)."""
    from .bundle.analyze import analyze_path

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
    if not found or not runtime:
        why = "no HIP code objects" if not found else "no dependency on libamdhip64"
        msg = (
            f"{project} was built without ROCm: its wheel has {why}; check USE_ROCM and the "
            "build log for a CPU-only fallback"
        )
        raise BuildFailed(msg)
    missing = sorted(wanted - found)
    if missing:
        msg = (
            f"{project}: the wheel's code objects are missing {', '.join(missing)} (they cover "
            f"{', '.join(sorted(found))}); a part of the build ignored PYTORCH_ROCM_ARCH: see "
            "the build log"
        )
        raise BuildFailed(msg)
    unexpected = sorted(found - wanted)
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
    _rewrite_requires(wheel, drop=set(unconditional), add=f"{dep}=={version}")
    was = ", ".join(unconditional) or "nothing"
    return f"Requires-Dist {dep}=={version} (was {was})"


def _rewrite_requires(wheel: Path, *, drop: set[str], add: str) -> None:
    """Rewrite METADATA's Requires-Dist; every other member is copied raw (checked against
    RECORD on the way) and RECORD is written anew; the result replaces ``wheel`` atomically."""
    with WheelReader(wheel) as reader:
        meta_name = f"{reader.dist_info}/METADATA"
        record_name = f"{reader.dist_info}/RECORD"
        head, sep, body = reader.read_text(meta_name).partition("\n\n")
        lines = [
            ln
            for ln in head.split("\n")
            if not (ln.startswith("Requires-Dist:") and ln[14:].strip() in drop)
        ]
        lines.append(f"Requires-Dist: {add}")
        meta = ("\n".join(lines) + (sep or "\n") + body).encode("utf-8")
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

    def as_json(self, rocm_version: str) -> dict[str, Any]:
        return {
            "wheel": self.wheel.name,
            "version": self.version,
            "commit": self.commit,
            "gfx_targets": list(self.targets),
            "rocm_version": rocm_version,
            "duration_seconds": round(self.seconds, 1),
            "sha256": self.sha256,
            "jobs": self.jobs,
            "retried_with_jobs": self.retried_with,
            "pinned": list(self.pinned),
            "inputs": self.inputs,
        }


@dataclass(frozen=True)
class BuildResult:
    projects: tuple[ProjectResult, ...]
    report: Path


def _killed_for_memory(log_file: Path, start: int, err: CommandFailed) -> bool:
    if err.returncode in (137, -9):
        return True
    with log_file.open("r", encoding="utf-8", errors="replace") as fh:
        fh.seek(start)
        return bool(_OOM.search(fh.read()))


def _pip(
    plan: BuildPlan,
    step: ProjectStep,
    args: Sequence[str],
    what: str,
    on_line: Callable[[str], None] | None = None,
) -> None:
    proc.run(
        [str(plan.python), "-m", "pip", *args],
        cwd=step.source,
        env=step.env,
        log_file=step.log,
        what=what,
        on_line=on_line,
    )


def _filtered_requirements(path: Path, skip: set[NormalizedName], seen: set[Path]) -> list[str]:
    """A requirement file's lines without the projects we build ourselves (their fresh wheels
    are installed instead), following ``-r`` includes."""
    path = path.resolve()
    if path in seen:
        return []
    seen.add(path)
    out: list[str] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"^(?:-r|--requirement)[=\s]+(\S+)$", line)
        if match:
            out += _filtered_requirements(path.parent / match.group(1), skip, seen)
            continue
        if not line.startswith("-") and _req_name(line) in skip:
            continue
        out.append(line)
    return out


def _install_requirements(
    plan: BuildPlan, step: ProjectStep, on_line: Callable[[str], None] | None = None
) -> None:
    skip = {canonicalize_name(n) for n in (step.name, *step.depends)}
    lines = list(step.requires)
    for path in step.requirement_files:
        lines += _filtered_requirements(path, skip, set())
    if not lines:
        return
    req_file = plan.work_dir / "logs" / f"requirements-{step.name}.txt"
    req_file.parent.mkdir(parents=True, exist_ok=True)
    req_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _pip(
        plan,
        step,
        ["install", *plan.pip_args, "-r", str(req_file)],
        "installing build requirements",
        on_line,
    )


def _installed_version(plan: BuildPlan, step: ProjectStep, dist_name: str) -> str | None:
    code = (
        "import importlib.metadata as m, sys\n"
        "try:\n    print(m.version(sys.argv[1]))\n"
        "except m.PackageNotFoundError:\n    pass\n"
    )
    result = proc.run([str(plan.python), "-c", code, dist_name], env=step.env, capture=True)
    return result.stdout.strip() or None


def _commit(source: Path, env: Mapping[str, str]) -> str:
    if not (source / ".git").exists():  # not its own repository (git would find a parent's)
        return ""
    return (_git(source, env, "rev-parse", "HEAD") or "").strip()


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _ensure_venv(plan: BuildPlan) -> None:
    if plan.venv is None or plan.python.exists():
        return
    log.info("creating the build environment %s", plan.venv)
    # A venv records its own path, so it is made in place; a half-made one is started over.
    shutil.rmtree(plan.venv, ignore_errors=True)
    plan.venv.parent.mkdir(parents=True, exist_ok=True)
    proc.run([str(plan.base_python), "-m", "venv", str(plan.venv)], what="creating the build venv")


def _run_build(
    step: ProjectStep, on_line: Callable[[str], None] | None = None
) -> tuple[ProjectStep, int | None]:
    """Run the build; once more with half the jobs if a compile was killed for memory."""
    start = step.log.stat().st_size if step.log.exists() else 0
    try:
        proc.run(
            step.command,
            cwd=step.source,
            env=step.env,
            log_file=step.log,
            what=f"{step.name} build",
            on_line=on_line,
        )
        return step, None
    except CommandFailed as err:
        if step.jobs <= 1 or not _killed_for_memory(step.log, start, err):
            raise _build_failed(step, err) from None
        half = max(step.jobs // 2, 1)
        log.warning(
            "%s: a compile was killed (out of memory?); building again with %d jobs instead of %d",
            step.name,
            half,
            step.jobs,
        )
        env = {**step.env, "MAX_JOBS": str(half), "CMAKE_BUILD_PARALLEL_LEVEL": str(half)}
        retry = replace(step, env=env, jobs=half)
        shutil.rmtree(step.wheel_dir, ignore_errors=True)
        try:
            proc.run(
                retry.command,
                cwd=step.source,
                env=env,
                log_file=step.log,
                what=f"{step.name} build",
                on_line=on_line,
            )
        except CommandFailed as err2:
            raise _build_failed(retry, err2) from None
        return retry, half


def _build_failed(step: ProjectStep, err: CommandFailed) -> CommandFailed:
    msg = f"{step.name} build failed (exit code {err.returncode}); full log: {step.log}"
    return CommandFailed(msg, returncode=err.returncode, tail=err.tail)


def _one_wheel(step: ProjectStep) -> Path:
    wheels = sorted(step.wheel_dir.glob("*.whl"))
    if len(wheels) != 1:
        msg = f"{step.name} build made {len(wheels)} wheels in {step.wheel_dir}, expected one"
        raise BuildFailed(msg)
    return wheels[0]


def _place(wheel: Path, output_dir: Path, *, no_wait: bool = False) -> Path:
    """Copy the built wheel into the output folder, under the wheel's lock, atomically."""
    tempfiles.check_folder(output_dir)
    tempfiles.sweep(output_dir)
    dest = output_dir / wheel.name
    with locks.hold(dest, f"the wheel {dest}", no_wait=no_wait):
        tempfiles.atomic_copy(wheel, dest)
    return dest


def _write_report(plan: BuildPlan, results: Sequence[ProjectResult]) -> Path:
    path = plan.report_path
    previous: dict[str, Any] = {}
    if path.is_file():
        with contextlib.suppress(json.JSONDecodeError, OSError):
            previous = json.loads(path.read_text(encoding="utf-8")).get("projects", {})
    projects = {**previous, **{r.name: r.as_json(plan.tree.version) for r in results}}
    data = {
        "rocm": {"root": str(plan.tree.root), "version": plan.tree.version},
        "targets": list(plan.targets),
        "projects": projects,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


# Settings that change how fast a wheel is built, not what is in it.
_VOLATILE = re.compile(
    r"^(MAX_JOBS|CMAKE_BUILD_PARALLEL_LEVEL|CCACHE_\w+|SCCACHE_\w+|CMAKE_\w+_COMPILER_LAUNCHER)$"
)


def _git(source: Path, env: Mapping[str, str], *args: str) -> str | None:
    try:
        result = proc.run(["git", *args], cwd=source, env=env, capture=True, check=False)
    except ToolMissing:
        return None
    return result.stdout if result.returncode == 0 else None


def _inputs_key(plan: BuildPlan, step: ProjectStep, deps: Mapping[str, str]) -> str:
    """What the wheel is made from: the commit, the build environment rocm-build sets, the
    command, the targets and the tree. "" when that cannot be told (not a git checkout, or
    uncommitted changes)."""
    if not (step.source / ".git").exists():
        return ""
    head = _git(step.source, step.env, "rev-parse", "HEAD")
    status = _git(step.source, step.env, "status", "--porcelain", "--untracked-files=no")
    if not head or status is None or status.strip():
        return ""
    env = {k: step.env.get(k, "") for k in step.changed if not _VOLATILE.match(k)}
    data = {
        "commit": head.strip(),
        "env": env,
        "removed": list(step.removed),
        "command": list(step.command),
        "targets": list(plan.targets),
        "rocm": [str(plan.tree.root), plan.tree.version],
        "depends": dict(deps),  # a rebuilt torch means its dependents are rebuilt too
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def _previous(plan: BuildPlan) -> dict[str, Any]:
    if not plan.report_path.is_file():
        return {}
    try:
        data = json.loads(plan.report_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, OSError):
        return {}
    projects = data.get("projects", {}) if isinstance(data, dict) else {}
    return projects if isinstance(projects, dict) else {}


def _reuse(plan: BuildPlan, step: ProjectStep, key: str, prev: Any) -> ProjectResult | None:
    """The previous result when its inputs equal ``key`` and its wheel is still there intact."""
    if plan.force or not key or not isinstance(prev, dict) or prev.get("inputs") != key:
        return None
    wheel = plan.output_dir / str(prev.get("wheel", ""))
    if not wheel.is_file() or _sha256(wheel) != prev.get("sha256"):
        return None
    if step.install_after and _installed_version(plan, step, step.name) != prev.get("version"):
        _pip(plan, step, ["install", "--no-deps", "--force-reinstall", str(wheel)], "installing")
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
    )


#: The steps of one project's build reported as "<project>: build steps".
BUILD_STEPS = ("requirements", "compile", "wheel check")


def execute(plan: BuildPlan, progress: Progress = NO_PROGRESS) -> BuildResult:
    """Build every project of the plan in order; stop at the first failure.

    Per project built, ``progress`` gets "<project>: build steps" (``BUILD_STEPS``, one
    advance each) and "<project>: log lines" (no total: the lines its build log grows by,
    a sign of life during a long compile)."""
    _ensure_venv(plan)
    built: dict[str, str] = {}  # project -> version just built
    wheels: dict[str, str] = {}  # project -> sha256 of the wheel built (or kept) in this run
    results: list[ProjectResult] = []
    previous = _previous(plan)
    for step in plan.steps:
        started = time.monotonic()
        pins: dict[str, str] = {}
        env = dict(step.env)
        for dep in step.depends:
            version = built.get(dep) or _installed_version(plan, step, dep)
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
        step = replace(step, env=env)
        deps = {d: wheels.get(d, pins[d]) for d in step.depends}
        key = _inputs_key(plan, step, deps)
        kept = _reuse(plan, step, key, previous.get(step.name))
        if kept is not None:
            log.info(
                "%s: unchanged since the last build; keeping %s (--force rebuilds)",
                step.name,
                kept.wheel.name,
            )
            built[step.name] = kept.version
            wheels[step.name] = kept.sha256
            results.append(kept)
            _write_report(plan, results)
            continue
        step.log.parent.mkdir(parents=True, exist_ok=True)
        step.log.write_text("", encoding="utf-8")
        log.info("building %s (%d jobs); log: %s", step.name, step.jobs, step.log)
        steps_task, lines_task = f"{step.name}: build steps", f"{step.name}: log lines"
        progress.start(steps_task, len(BUILD_STEPS))
        progress.start(lines_task, None)

        def line(_text: str, task: str = lines_task) -> None:
            progress.advance(task)

        try:
            _install_requirements(plan, step, line)
            progress.advance(steps_task)
            shutil.rmtree(step.wheel_dir, ignore_errors=True)
            step, retried = _run_build(step, line)
            progress.advance(steps_task)
            wheel = _one_wheel(step)
            facts = check_wheel(wheel, plan.targets, step.name)
            progress.advance(steps_task)
        finally:
            progress.done(lines_task)
            progress.done(steps_task)
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
        dest = _place(wheel, plan.output_dir, no_wait=plan.no_wait)
        if step.install_after:
            _pip(
                plan,
                step,
                ["install", "--no-deps", "--force-reinstall", str(dest)],
                f"installing {step.name}",
            )
        built[step.name] = facts.version
        wheels[step.name] = _sha256(dest)
        results.append(
            ProjectResult(
                name=step.name,
                wheel=dest,
                version=facts.version,
                commit=_commit(step.source, step.env),
                targets=facts.targets,
                sha256=wheels[step.name],
                seconds=time.monotonic() - started,
                jobs=step.jobs,
                retried_with=retried,
                pinned=tuple(pinned),
                inputs=key,
            )
        )
        log.info("%s %s: %s", step.name, facts.version, dest)
        # Written after every project, so a later failure keeps what was built.
        _write_report(plan, results)
    report = plan.report_path if results else _write_report(plan, results)
    return BuildResult(projects=tuple(results), report=report)
