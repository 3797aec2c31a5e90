"""The build stage's environment: the build venv, pip, the build requirements and the build
command itself (run once more with half the jobs when a compile was killed for memory)."""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from packaging.utils import NormalizedName, canonicalize_name

from rocm_build.building import hiplauncher
from rocm_build.building.plan import Plan, ProjectStep
from rocm_build.building.requirements import req_name
from rocm_build.common import proc, statefile
from rocm_build.common.errors import CommandFailed
from rocm_build.repo import checkoutfile

__all__ = [
    "OOM",
    "filtered_requirements",
    "install_requirements",
    "installed_version",
    "pip",
    "run_build",
]

log = logging.getLogger(__name__)

# What a compile killed for memory leaves in a log: gcc/clang drivers print the first, make and
# ninja report the child's status, Python build helpers the signal.
OOM = re.compile(
    r"Killed signal terminated program"
    r"|\b(?:exit (?:code|status)|returned non-zero exit status|error code)[ :]+137\b"
    r"|killed by signal 9\b|\bSIGKILL\b"
)


def _killed_for_memory(log_file: Path, start: int, err: CommandFailed) -> bool:
    if err.returncode in (137, -9):
        return True
    with log_file.open("r", encoding="utf-8", errors="replace") as fh:
        fh.seek(start)
        return bool(OOM.search(fh.read()))


def pip(
    plan: Plan,
    step: ProjectStep,
    args: Sequence[str],
    what: str,
    on_line: Callable[[str], None] | None = None,
) -> None:
    proc.run(
        [str(plan.python), "-m", "pip", *args],
        cwd=step.cwd,
        env=step.env,
        log_file=step.log,
        what=what,
        on_line=on_line,
    )


def filtered_requirements(
    source: Path, path: Path, skip: set[NormalizedName], seen: set[Path]
) -> list[str]:
    """A requirement file's lines without the projects we build ourselves (their fresh wheels
    are installed instead), following ``-r`` includes; each file is read as a file of the
    checkout ``source`` (``checkoutfile``: a regular file inside it)."""
    key = path.resolve()
    if key in seen:
        return []
    seen.add(key)
    out: list[str] = []
    text = checkoutfile.read_text(source, path, f"the requirements file {path.name}")
    for raw in (text or "").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        match = re.match(r"^(?:-r|--requirement)[=\s]+(\S+)$", line)
        if match:
            out += filtered_requirements(source, path.parent / match.group(1), skip, seen)
            continue
        if not line.startswith("-") and req_name(line) in skip:
            continue
        out.append(line)
    return out


def install_requirements(
    plan: Plan, step: ProjectStep, on_line: Callable[[str], None] | None = None
) -> None:
    skip = {canonicalize_name(n) for n in (step.name, *step.depends)}
    lines = list(step.requires)
    for path in step.requirement_files:
        lines += filtered_requirements(step.source, path, skip, set())
    if not lines:
        return
    req_file = plan.work_dir / "logs" / f"requirements-{step.name}.txt"
    statefile.own_folder(req_file.parent, "log folder")
    data = ("\n".join(lines) + "\n").encode("utf-8")
    statefile.write_bytes(req_file, data, "build requirements file")  # never through a link
    pip(
        plan,
        step,
        ["install", *plan.pip_args, "-r", str(req_file)],
        "installing build requirements",
        on_line,
    )


def installed_version(plan: Plan, step: ProjectStep, dist_name: str) -> str | None:
    code = (
        "import importlib.metadata as m, sys\n"
        "try:\n    print(m.version(sys.argv[1]))\n"
        "except m.PackageNotFoundError:\n    pass\n"
    )
    result = proc.run([str(plan.python), "-c", code, dist_name], env=step.env, capture=True)
    return result.stdout.strip() or None


def run_build(
    step: ProjectStep, on_line: Callable[[str], None] | None = None
) -> tuple[ProjectStep, int | None]:
    """Run the build; once more with half the jobs if a compile was killed for memory."""
    if step.hip_launcher is not None:
        hiplauncher.write(step.hip_launcher)
    start = step.log.stat().st_size if step.log.exists() else 0
    try:
        proc.run(
            step.command,
            cwd=step.cwd,
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
                cwd=step.cwd,
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
