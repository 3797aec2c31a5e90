"""smoke: install wheels into a fresh virtual environment and prove they work there.

Plan first (``plan``: which wheels, which import names, which targets, the scrubbed
environment), then ``execute``: create the venv, install only the given wheels plus pytest, copy
the smoke suite (``suite/``, package data: :func:`suite_dir`) next to it and run it with every
ROCm location removed from the environment, so a library that would load from a system ROCm or
the build tree fails the run.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from rocm_build import arch, proc
from rocm_build.context import RunContext
from rocm_build.errors import CommandFailed, ConfigError, SmokeFailed
from rocm_build.progress import NO_PROGRESS, Progress
from rocm_build.smoke import upstream
from rocm_build.wheel.wheelfile import WheelReader

__all__ = [
    "SCRUBBED_VARIABLES",
    "SmokePlan",
    "SmokeResult",
    "execute",
    "import_names",
    "parse_junit",
    "plan",
    "scrub_environment",
    "suite_dir",
]

log = logging.getLogger(__name__)

#: Variables that point a process at a ROCm install, a compiler, or other Python code. The smoke
#: run must find everything through the wheels' own search paths, so none of these survive.
SCRUBBED_VARIABLES = (
    "ROCM_PATH",
    "ROCM_HOME",
    "ROCM_ROOT",
    "ROCM_SOURCE_DIR",
    "HIP_PATH",
    "HIP_CLANG_PATH",
    "HIP_DEVICE_LIB_PATH",
    "HIP_PLATFORM",
    "HSA_PATH",
    "HIPCC_COMPILE_FLAGS_APPEND",
    "DEVICE_LIB_PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LIBRARY_PATH",
    "CPATH",
    "CMAKE_PREFIX_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTORCH_ROCM_ARCH",
)
#: A line of ``pytest -v`` that ends a test ("suite/test_x.py::test_y PASSED  [ 10%]").
_TEST_DONE = re.compile(r"::\S+ (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
_SUITE_FILES = ("conftest.py", "pytest.ini", "smoke_*.py", "test_*.py")
UPSTREAM_DEPS = ("expecttest", "hypothesis", "numpy")
OPTIONAL_DEPS = ("zstandard",)


@dataclass(frozen=True)
class SmokePlan:
    wheels: tuple[Path, ...]
    packages: tuple[str, ...]
    targets: tuple[str, ...]
    python: str
    run_dir: Path
    offline: bool
    find_links: tuple[Path, ...]
    forbidden: tuple[Path, ...]
    env: Mapping[str, str]
    junit: Path | None = None
    upstream_pattern: str = ""
    upstream_dir: Path | None = None
    #: Whether torch was built with flash attention, checked beside Triton (None: not checked).
    flash_attention: bool | None = None

    @property
    def venv(self) -> Path:
        return self.run_dir / "venv"

    @property
    def venv_python(self) -> Path:
        return self.venv / "bin" / "python"

    def as_json(self) -> dict[str, Any]:
        return {
            "wheels": [str(w) for w in self.wheels],
            "packages": list(self.packages),
            "targets": list(self.targets),
            "python": self.python,
            "venv": str(self.venv),
            "offline": self.offline,
            "find_links": [str(p) for p in self.find_links],
            "forbidden": [str(p) for p in self.forbidden],
            "scrubbed": [v for v in SCRUBBED_VARIABLES if v not in self.env],
            "flash_attention": self.flash_attention,
        }


@dataclass(frozen=True)
class TestOutcome:
    name: str
    outcome: str  # passed | failed | error | skipped
    message: str = ""

    @property
    def headline(self) -> str:
        return self.message.splitlines()[0] if self.message else ""


@dataclass(frozen=True)
class SmokeResult:
    plan: SmokePlan
    returncode: int
    outcomes: tuple[TestOutcome, ...]
    seconds: float
    log_file: Path
    facts: Mapping[str, Any] = field(default_factory=dict)
    upstream: upstream.UpstreamSummary | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)

    def tally(self) -> str:
        """How many tests ran and how they ended, in words: "12 tests: 10 passed, 2 skipped"."""
        kinds = ("passed", "failed", "error", "skipped")
        parts = [f"{self.count(k)} {k if k != 'error' else 'errors'}" for k in kinds]
        shown = [p for p in parts if not p.startswith("0 ")] or ["none passed"]
        return f"{len(self.outcomes)} tests: {', '.join(shown)}"

    @property
    def failures(self) -> tuple[TestOutcome, ...]:
        return tuple(o for o in self.outcomes if o.outcome in ("failed", "error"))

    @property
    def nothing_to_do(self) -> str:
        return ""  # a smoke run always runs

    @property
    def outputs(self) -> list[Path]:
        return []  # no later stage consumes anything

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "returncode": self.returncode,
            "passed": self.count("passed"),
            "failed": self.count("failed"),
            "errors": self.count("error"),
            "skipped": self.count("skipped"),
            "failures": [{"test": o.name, "message": o.message} for o in self.failures],
            "skips": [
                {"test": o.name, "reason": o.message}
                for o in self.outcomes
                if o.outcome == "skipped"
            ],
            "seconds": round(self.seconds, 1),
            "log": str(self.log_file),
            "facts": dict(self.facts),
            "plan": self.plan.as_json(),
            "upstream": self.upstream.as_json() if self.upstream else None,
        }


def suite_dir() -> Path:
    """The smoke suite, package data of ``rocm_build.smoke`` (its ``suite/`` folder) in a
    checkout, an editable install and a regular one alike. A real folder: it is copied next to
    the environment under test and run there by that environment's pytest."""
    suite = resources.files("rocm_build.smoke") / "suite"
    if not isinstance(suite, Path):
        msg = (
            f"the smoke suite is inside an archive ({suite}), not a folder pytest can run; "
            "install rocm-build as a regular package (pip install rocm-build)"
        )
        raise ConfigError(msg)
    if not (suite / "conftest.py").is_file():
        msg = f"the smoke suite is not in {suite}; reinstall rocm-build"
        raise ConfigError(msg)
    return suite


def import_names(wheel: Path) -> tuple[str, ...]:
    """Top-level import names a wheel installs (top_level.txt, else its RECORD's folders).

    Opened by the checking reader, so an unsafe or malformed wheel stops smoke before pip sees
    it (``UnsafeInput``)."""
    with WheelReader(wheel) as reader:
        names = [m.name for m in reader.members]
        top = f"{reader.dist_info}/top_level.txt"
        if reader.has(top):
            text = reader.read_text(top)
            found = [line.strip() for line in text.splitlines() if line.strip()]
            # torch's wheel also installs functorch and torchgen: the package named like the
            # distribution stands for the wheel (they share its files and libraries).
            dist = wheel.name.split("-", 1)[0].lower()
            if dist in found:
                return (dist,)
            if found:
                return tuple(n for n in found if not n.startswith("_"))
    packages: dict[str, None] = {}
    for name in names:
        head, sep, _ = name.partition("/")
        if not sep or head.endswith((".dist-info", ".data", ".libs")):
            continue
        if name == f"{head}/__init__.py":
            packages[head] = None
    return tuple(packages)


def scrub_environment(env: Mapping[str, str], forbidden: Sequence[Path]) -> dict[str, str]:
    """``env`` without ROCM/compiler/Python search variables, and PATH without ROCm folders."""
    out = {
        k: v
        for k, v in env.items()
        if k not in SCRUBBED_VARIABLES and not k.startswith("ROCM_BUILD_")
    }
    kept = []
    for entry in env.get("PATH", "").split(os.pathsep):
        if not entry:
            continue
        path = Path(entry)
        if "rocm" in entry.lower() or any(path.is_relative_to(bad) for bad in forbidden):
            continue
        kept.append(entry)
    out["PATH"] = os.pathsep.join(kept) or os.defpath
    out["PYTHONNOUSERSITE"] = "1"
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    return out


def flash_expectation(ctx: RunContext, packages: Sequence[str]) -> bool | None:
    """Whether the torch under test was built with flash attention, as far as the settings say.

    Checked only with torch and triton both under test (auto needs Triton in the run). ``auto``
    with ``build.aotriton = auto`` is decided by the build from the aotriton it finds, so the
    settings alone do not know: None, not checked."""
    if "torch" not in packages or "triton" not in packages:
        return None
    cfg = ctx.settings
    setting = cfg.features.flash_attention
    if setting != "auto":
        return setting == "on"
    if cfg.build.aotriton == "off":
        return False
    if not arch.flash_targets(ctx.targets.bases):
        return False
    return None if cfg.build.aotriton == "auto" else True


def plan(
    ctx: RunContext,
    wheels: Sequence[Path],
    *,
    junit: Path | None = None,
    run_dir: Path | None = None,
) -> SmokePlan:
    """Everything the smoke run will do, decided up front (no processes)."""
    if not wheels:
        msg = "no wheels to test; pass WHEEL... (e.g. wheels/*.whl)"
        raise ConfigError(msg)
    missing = [str(w) for w in wheels if not Path(w).is_file()]
    if missing:
        msg = (
            f"wheel not found: {', '.join(missing)}; check the path (rocm-build bundle writes them)"
        )
        raise ConfigError(msg)
    resolved = tuple(Path(w).resolve() for w in wheels)
    cfg = ctx.settings
    packages = list(cfg.smoke.packages)
    if not packages:
        for wheel in resolved:
            packages.extend(import_names(wheel))
    # torch first: the extensions' checks lean on it
    packages = sorted(dict.fromkeys(packages), key=lambda n: (n != "torch", packages.index(n)))
    forbidden = [ctx.src_dir]
    if cfg.general.rocm:
        forbidden.append(cfg.absolute(cfg.general.rocm))
    for name in ("ROCM_PATH", "ROCM_HOME", "HIP_PATH"):
        if cfg.env.get(name):
            forbidden.append(Path(cfg.env[name]))
    find_links = tuple(
        dict.fromkeys(
            (cfg.cwd / p).resolve() for p in [*cfg.smoke.find_links, *cfg.build.find_links]
        )
    )
    if cfg.smoke.offline and not find_links:
        msg = "--offline needs --find-links DIR: a folder with pytest and the wheels' dependencies"
        raise ConfigError(msg)
    pattern = cfg.smoke.upstream_tests
    upstream_dir = None
    if pattern:
        upstream_dir = ctx.src_dir / "torch" / "test"
        if not upstream_dir.is_dir():
            msg = (
                f"--upstream-tests needs the torch checkout's tests in {upstream_dir}; "
                "run rocm-build checkout torch"
            )
            raise ConfigError(msg)
        if not any(upstream_dir.glob(pattern)):
            msg = (
                f"--upstream-tests '{pattern}' matches no file in {upstream_dir}; try 'test_nn.py'"
            )
            raise ConfigError(msg)
    return SmokePlan(
        wheels=resolved,
        packages=tuple(packages),
        targets=ctx.targets.bases,
        python=cfg.smoke.python or sys.executable,
        run_dir=run_dir or ctx.work_dir / "smoke",
        offline=cfg.smoke.offline,
        find_links=find_links,
        forbidden=tuple(dict.fromkeys(forbidden)),
        env=scrub_environment(cfg.env, forbidden),
        junit=junit,
        upstream_pattern=pattern,
        upstream_dir=upstream_dir,
        flash_attention=flash_expectation(ctx, packages),
    )


def _pip_command(plan: SmokePlan, requirements: Sequence[str | Path]) -> list[str | Path]:
    # This interpreter's pip installs into the venv (pip --python): a venv without its own pip is
    # made in a fraction of the time, with the same result.
    cmd: list[str | Path] = [sys.executable, "-m", "pip", "--python", plan.venv_python]
    cmd += ["install", "--disable-pip-version-check"]
    if plan.offline:
        cmd.append("--no-index")
    for folder in plan.find_links:
        cmd += ["--find-links", folder]
    # After "--": a wheel path or name that starts with "-" is not taken as an option.
    return [*cmd, "--", *requirements]


def _pip_install(plan: SmokePlan, requirements: Sequence[str | Path], log_file: Path) -> None:
    cmd = _pip_command(plan, requirements)
    try:
        proc.run(cmd, env=plan.env, log_file=log_file, what="pip install into the smoke venv")
    except CommandFailed as err:
        last = next((line for line in reversed(err.tail) if line.startswith("ERROR")), "")
        msg = (
            f"the wheels do not install into a fresh environment ({last or 'pip failed'}); "
            f"log: {log_file}"
            + ("; --offline needs their dependencies in --find-links" if plan.offline else "")
        )
        raise SmokeFailed(msg) from err


def _copy_suite(dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    src = suite_dir()
    for pattern in _SUITE_FILES:
        for file in sorted(src.glob(pattern)):
            shutil.copy2(file, dest / file.name)


def _run_suite(
    plan: SmokePlan, cmd: list[str | Path], log_file: Path, progress: Progress
) -> proc.Result:
    """pytest on the suite (-v: one line per test as it ends, counted to ``progress``)."""
    task = "smoke: tests run"
    progress.start(task, None)

    def line(text: str) -> None:
        if _TEST_DONE.search(text):
            progress.advance(task)

    try:
        return proc.run(
            [*cmd, "-v"], cwd=plan.run_dir, env=plan.env, log_file=log_file, check=False,
            on_line=line,
        )  # fmt: skip
    finally:
        progress.done(task)


def parse_junit(path: Path) -> tuple[TestOutcome, ...]:
    """Per-test outcomes from a pytest JUnit XML file."""
    root = ET.parse(path).getroot()  # noqa: S314 - pytest wrote this file just now
    outcomes = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}".strip(":")
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                message = (child.get("message") or child.text or "").strip()
                break
        outcomes.append(TestOutcome(name, outcome, message[:4000]))
    return tuple(outcomes)


def _write_atomic(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dest)


def execute(plan: SmokePlan, progress: Progress = NO_PROGRESS) -> SmokeResult:
    """Create the venv, install, run the suite and collect the outcome (``check`` judges it).

    Wheels that do not install into a fresh environment are a smoke failure already. The run
    reports each test pytest finishes to ``progress`` ("smoke: tests run", no total)."""
    start = time.monotonic()
    if plan.run_dir.exists():
        shutil.rmtree(plan.run_dir)
    plan.run_dir.mkdir(parents=True)
    log_file = plan.run_dir / "smoke.log"
    log.info("creating a fresh environment %s (%s)", plan.venv, plan.python)
    proc.run(
        [plan.python, "-m", "venv", "--without-pip", "--", plan.venv],
        env=plan.env,
        log_file=log_file,
        what="venv",
    )
    extra = list(UPSTREAM_DEPS) if plan.upstream_pattern else []
    log.info("installing %s", ", ".join(w.name for w in plan.wheels))
    _pip_install(plan, [*plan.wheels, "pytest", *extra], log_file)
    # Optional: reads compressed (CCOB) code objects on Pythons before 3.14; without it the
    # suite skips those, with the reason.
    optional = proc.run(
        _pip_command(plan, OPTIONAL_DEPS), env=plan.env, log_file=log_file, check=False
    )
    if optional.returncode != 0:
        log.info(
            "%s not installed: compressed code objects cannot be read", ", ".join(OPTIONAL_DEPS)
        )
    suite = plan.run_dir / "suite"
    _copy_suite(suite)
    junit = plan.run_dir / "junit.xml"
    facts_file = plan.run_dir / "facts.json"
    cmd: list[str | Path] = [
        plan.venv_python,
        "-m",
        "pytest",
        "-c",
        suite / "pytest.ini",
        suite,
        "--packages",
        ",".join(plan.packages),
        "--junitxml",
        junit,
        "--smoke-report",
        facts_file,
        "-o",
        "junit_family=xunit1",
    ]
    if plan.targets:
        cmd += ["--rocm-arch", ";".join(plan.targets)]
    for bad in plan.forbidden:
        cmd += ["--forbidden-path", bad]
    if plan.flash_attention is not None:
        cmd += ["--flash-attention", "on" if plan.flash_attention else "off"]
    log.info("running the smoke suite on %s", ", ".join(plan.packages))
    result = _run_suite(plan, cmd, log_file, progress)
    outcomes = parse_junit(junit) if junit.is_file() else ()
    facts: dict[str, Any] = {}
    if facts_file.is_file():
        facts = json.loads(facts_file.read_text(encoding="utf-8"))
    if plan.junit is not None and junit.is_file():
        _write_atomic(junit, plan.junit)
    summary = None
    if plan.upstream_pattern and plan.upstream_dir is not None:
        summary = _run_upstream(plan)
    return SmokeResult(
        plan=plan,
        returncode=result.returncode,
        outcomes=outcomes,
        seconds=time.monotonic() - start,
        log_file=log_file,
        facts=facts,
        upstream=summary,
    )


def check(result: SmokeResult) -> None:
    """Raise ``SmokeFailed`` for a failed run, naming the first failure and the log."""
    if result.ok:
        return
    failures = result.failures
    if failures:
        first = failures[0]
        what = f"{len(failures)} failed, first {first.name}: {first.headline}"
    elif not result.outcomes:
        what = f"pytest exited {result.returncode} before running tests"
    else:
        what = f"pytest exited {result.returncode}"
    msg = f"smoke tests failed ({what}); log: {result.log_file}"
    raise SmokeFailed(msg)


def _run_upstream(plan: SmokePlan) -> upstream.UpstreamSummary:
    assert plan.upstream_dir is not None
    files = sorted(plan.upstream_dir.glob(plan.upstream_pattern))
    log_file = plan.run_dir / "upstream.log"
    env = dict(plan.env)
    env["PYTORCH_TEST_WITH_ROCM"] = "1"
    log.info("running %d upstream test files with PYTORCH_TEST_WITH_ROCM=1", len(files))
    # The tests run from torch's test folder (as PyTorch's own CI does), so `import torch` finds
    # the installed wheel, never the checkout's source tree one level up.
    proc.run(
        [
            plan.venv_python,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-rfE",
            "--continue-on-collection-errors",
            *files,
        ],
        cwd=plan.upstream_dir,
        env=env,
        log_file=log_file,
        check=False,
    )
    return upstream.summarize(log_file.read_text(encoding="utf-8", errors="replace"))
