"""The smoke stage's execute: create the venv, install only the given wheels plus pytest, copy
the smoke suite next to it and run it in the scrubbed environment (:mod:`.environment`); ``check``
judges the outcome."""

from __future__ import annotations

import json
import logging
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocm_build.common import proc, statefile
from rocm_build.common.errors import CommandFailed, FileAccessError, SmokeFailed
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.smoke import upstream
from rocm_build.smoke.junit import TestOutcome, parse_junit
from rocm_build.smoke.plan import Plan
from rocm_build.smoke.suitefiles import copy_suite

__all__ = ["Device", "Result", "SuiteFacts", "check", "execute"]

log = logging.getLogger(__name__)

#: A line of ``pytest -v`` that ends a test ("suite/test_x.py::test_y PASSED  [ 10%]").
_TEST_DONE = re.compile(r"::\S+ (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
UPSTREAM_DEPS = ("expecttest", "hypothesis", "numpy")
OPTIONAL_DEPS = ("zstandard",)


@dataclass(frozen=True)
class Device:
    """A GPU the smoke suite saw (its ``devices`` fact)."""

    index: int
    name: str
    gfx: str
    memory_gib: float
    compute_units: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Device:
        return cls(
            int(data["index"]),
            str(data["name"]),
            str(data["gfx"]),
            float(data["memory_gib"]),
            int(data["compute_units"]),
        )


@dataclass(frozen=True)
class HipRuntime:
    """The HIP runtime a probe loaded, and what hipGetDeviceCount returned."""

    path: str
    rc: Any


@dataclass(frozen=True)
class SuiteFacts:
    """What the smoke suite found (``facts.json``), read once for people: the HIP runtime the
    first probe that loaded one saw, the targets of the code objects per package, the targets
    Triton refused, the GPUs. The JSON keeps the facts as the suite wrote them."""

    hip: HipRuntime | None = None
    found_targets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    triton_refused: tuple[str, ...] = ()
    devices: tuple[Device, ...] = ()

    @classmethod
    def from_json(cls, facts: Mapping[str, Any]) -> SuiteFacts:
        hip = None
        for probe in facts.get("probes", {}).values():
            found = probe.get("hip") or {}
            if found.get("loaded") and "rc" in found:
                hip = HipRuntime(str(found["path"]), found["rc"])
                break
        return cls(
            hip=hip,
            found_targets={p: tuple(f) for p, f in facts.get("found_targets", {}).items()},
            triton_refused=tuple(facts.get("triton", {}).get("unsupported_targets", [])),
            devices=tuple(Device.from_json(d) for d in facts.get("devices", [])),
        )


@dataclass(frozen=True)
class Result:
    plan: Plan
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

    @property
    def suite_facts(self) -> SuiteFacts:
        """The facts, typed (:class:`SuiteFacts`); ``facts`` as the suite wrote them."""
        return SuiteFacts.from_json(self.facts)

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


def _pip_command(plan: Plan, requirements: Sequence[str | Path]) -> list[str | Path]:
    # This interpreter's pip installs into the venv (pip --python): a venv without its own pip is
    # made in a fraction of the time, with the same result.
    cmd: list[str | Path] = [sys.executable, "-m", "pip", "--python", plan.venv_python]
    cmd += ["install", "--disable-pip-version-check"]
    if plan.settings.offline:
        cmd.append("--no-index")
    for folder in plan.find_links:
        cmd += ["--find-links", folder]
    # After "--": a wheel path or name that starts with "-" is not taken as an option.
    return [*cmd, "--", *requirements]


def _pip_install(plan: Plan, requirements: Sequence[str | Path], log_file: Path) -> None:
    cmd = _pip_command(plan, requirements)
    try:
        proc.run(cmd, env=plan.env, log_file=log_file, what="pip install into the smoke venv")
    except CommandFailed as err:
        last = next((line for line in reversed(err.tail) if line.startswith("ERROR")), "")
        msg = (
            f"the wheels do not install into a fresh environment ({last or 'pip failed'}); "
            f"log: {log_file}"
            + (
                "; --offline needs their dependencies in --find-links"
                if plan.settings.offline
                else ""
            )
        )
        raise SmokeFailed(msg) from err


def _run_suite(
    plan: Plan, cmd: list[str | Path], log_file: Path, progress: Progress
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


def _write_atomic(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(src, tmp)
    tmp.replace(dest)


def remove_folder(folder: Path, what: str) -> None:
    """Remove a folder the smoke run made (its run folder, its venv), if there is one. What is
    planted at its name instead (a link, a file, another user's folder, one anyone may write to)
    is refused in one line (exit 14) and left as it is (``statefile.check_folder``); links inside
    are removed, never followed."""
    if statefile.check_folder(folder, what) is None:
        return
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        msg = f"cannot remove the {what} {folder} ({exc.strerror}): remove it by hand, run again"
        raise FileAccessError(msg) from exc


def execute(plan: Plan, progress: Progress = NO_PROGRESS) -> Result:
    """Create the venv, install, run the suite and collect the outcome (``check`` judges it).

    Wheels that do not install into a fresh environment are a smoke failure already. The run
    reports each test pytest finishes to ``progress`` ("smoke: tests run", no total)."""
    start = time.monotonic()
    remove_folder(plan.run_dir, "smoke folder")  # the last run's
    plan.run_dir.mkdir(parents=True)
    log_file = plan.run_dir / "smoke.log"
    log.info("creating a fresh environment %s (%s)", plan.venv, plan.python)
    proc.run(
        [plan.python, "-m", "venv", "--without-pip", "--", plan.venv],
        env=plan.env,
        log_file=log_file,
        what="venv",
    )
    extra = list(UPSTREAM_DEPS) if plan.settings.upstream_tests else []
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
    copy_suite(suite)
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
    if plan.settings.upstream_tests and plan.upstream_dir is not None:
        summary = _run_upstream(plan)
    passed = result.returncode == 0 and (summary is None or summary.failed == 0)
    if passed and not plan.settings.keep_venv:
        log.info("removing %s: the run passed (--keep-venv keeps it)", plan.venv)
        remove_folder(plan.venv, "smoke venv")
    return Result(
        plan=plan,
        returncode=result.returncode,
        outcomes=outcomes,
        seconds=time.monotonic() - start,
        log_file=log_file,
        facts=facts,
        upstream=summary,
    )


def check(result: Result) -> None:
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


def _run_upstream(plan: Plan) -> upstream.UpstreamSummary:
    assert plan.upstream_dir is not None
    files = sorted(plan.upstream_dir.glob(plan.settings.upstream_tests))
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
