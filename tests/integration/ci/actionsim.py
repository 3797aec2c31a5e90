"""One job of a GitHub Actions workflow run here, as a runner runs it: the workflow's and the
job's ``env:``, every step's ``if:``, ``env:`` and ``run:`` script (bash -eo pipefail, in the
workspace) in order, ``$GITHUB_ENV``, ``$GITHUB_PATH`` and ``$GITHUB_OUTPUT`` between steps, and
the job's ``outputs:``. Expressions are evaluated by :mod:`actionexpr`, strictly: anything the
context lacks fails the run.

``uses:`` steps run only through a mapping given to the :class:`Runner` (``ACTIONS`` maps the
ones the shipped workflow's build job uses); an action with no mapping is an error, so a step
added to the workflow is either run or mapped here, never skipped."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.ci.actionexpr import EXPR, evaluate, substitute, truthy, value_of

__all__ = ["ACTIONS", "JobRun", "Runner", "StepFailed", "UnknownAction", "parse_file_commands"]


class StepFailed(Exception):
    """A step's script exited non-zero, or a mapped action found its inputs wrong."""


class UnknownAction(Exception):
    """A ``uses:`` step whose action has no mapping."""


@dataclass
class StepRun:
    name: str
    outcome: str  # success | failure | skipped
    outputs: dict[str, str] = field(default_factory=dict)
    log: str = ""
    seconds: float = 0.0


@dataclass
class JobRun:
    job: str
    ok: bool
    steps: list[StepRun]
    outputs: dict[str, Any]
    runs_on: Any
    env: dict[str, str]

    def step(self, name: str) -> StepRun:
        (found,) = [s for s in self.steps if s.name == name]
        return found

    @property
    def log(self) -> str:
        return "\n".join(
            f"--- {s.name}: {s.outcome} ({s.seconds:.1f} s)\n{s.log}" for s in self.steps
        )


@dataclass
class JobState:
    """What a job's steps share: the environment (``env:`` and ``$GITHUB_ENV``), ``$GITHUB_PATH``
    additions, and the runner's folders."""

    runner: Runner
    env: dict[str, str]
    path: list[str] = field(default_factory=list)
    outputs_of: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def workspace(self) -> Path:
        return self.runner.workspace

    def process_env(self, step_env: Mapping[str, str]) -> dict[str, str]:
        env = {**self.runner.base_env, **self.env, **step_env, **self.runner.default_env()}
        env["PATH"] = os.pathsep.join([*reversed(self.path), self.runner.base_env["PATH"]])
        return env


Action = Callable[[JobState, dict[str, Any], dict[str, str]], dict[str, str]]


def parse_file_commands(text: str) -> dict[str, str]:
    """``$GITHUB_ENV`` / ``$GITHUB_OUTPUT`` lines: ``NAME=value`` and ``NAME<<EOF ... EOF``."""
    values: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        if not line.strip():
            continue
        heredoc = re.fullmatch(r"([^=<]+)<<(.+)", line)
        if heredoc:
            body = []
            for more in lines:
                if more == heredoc[2]:
                    break
                body.append(more)
            else:
                raise StepFailed(f"{heredoc[1]}<<{heredoc[2]}: no closing {heredoc[2]}")
            values[heredoc[1]] = "\n".join(body)
            continue
        name, sep, value = line.partition("=")
        if not sep:
            raise StepFailed(f"not NAME=value: {line!r}")
        values[name] = value
    return values


@dataclass
class Runner:
    """A runner for one workflow: its workspace (the repository, checked out), temp folder,
    the environment the runner's machine gives every step, and the contexts a run gets."""

    workflow: dict[str, Any]
    workspace: Path
    temp: Path
    base_env: dict[str, str]
    inputs: dict[str, Any]
    vars: dict[str, str]
    secrets: dict[str, str]
    github: dict[str, str]
    actions: Mapping[str, Action]
    artifacts: Path
    timeout: float = 600
    #: a venv of the running interpreter that setup-python copies (made once: faster than a
    #: new venv with pip per job); None: setup-python makes a new one
    python_template: Path | None = None

    def default_env(self) -> dict[str, str]:
        return {
            "CI": "true",
            "GITHUB_ACTIONS": "true",
            "GITHUB_WORKSPACE": str(self.workspace),
            "GITHUB_SHA": self.github["sha"],
            "RUNNER_TEMP": str(self.temp),
            "RUNNER_OS": "Linux",
        }

    def contexts(self, **more: Any) -> dict[str, Any]:
        base = {
            "github": self.github,
            "inputs": self.inputs,
            "vars": self.vars,
            "secrets": self.secrets,
            "runner": {"temp": str(self.temp), "os": "Linux"},
        }
        return {**base, **more}

    def workflow_env(self) -> dict[str, str]:
        env = value_of(self.workflow.get("env", {}), self.contexts())
        return {k: _env_text(v) for k, v in env.items()}

    def matrix_entries(self, job_id: str, needs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The job's matrix as GitHub expands it: ``include`` entries (no other axes here)."""
        job = self.workflow["jobs"][job_id]
        ctx = self.contexts(needs=needs, env=self.workflow_env())
        strategy = value_of(job.get("strategy", {}), ctx)
        matrix = strategy.get("matrix", {})
        if set(matrix) - {"include"}:
            raise StepFailed(f"{job_id}: only matrix.include is mapped, not {sorted(matrix)}")
        return list(matrix.get("include", [{}]))

    def run_job(
        self,
        job_id: str,
        *,
        matrix: dict[str, Any] | None = None,
        needs: Mapping[str, Any] | None = None,
    ) -> JobRun:
        job = self.workflow["jobs"][job_id]
        base = {"needs": dict(needs or {}), "matrix": matrix or {}, "strategy": {}}
        env = self.workflow_env()
        ctx = self.contexts(**base, env=env)
        runs_on = value_of(job.get("runs-on"), ctx)
        value_of({k: job.get(k) for k in ("name", "container", "timeout-minutes")}, ctx)
        env.update({k: _env_text(v) for k, v in value_of(job.get("env", {}), ctx).items()})
        state = JobState(self, env)
        steps: list[StepRun] = []
        ok = True
        for index, step in enumerate(job.get("steps", [])):
            start = time.monotonic()
            run = self._step(state, step, index, ok, base)
            run.seconds = time.monotonic() - start
            steps.append(run)
            ok = ok and run.outcome != "failure"
            if step.get("id"):
                state.outputs_of[step["id"]] = {
                    "outputs": run.outputs,
                    "outcome": run.outcome,
                    "conclusion": run.outcome,
                }
        ctx = self.contexts(**base, env=state.env, steps=state.outputs_of)
        # A failed job's outputs are not used (its dependants do not run).
        outputs = value_of(job.get("outputs", {}), ctx) if ok else {}
        return JobRun(job_id, ok, steps, outputs, runs_on, state.env)

    def _step(
        self, state: JobState, step: dict[str, Any], index: int, ok: bool, base: dict[str, Any]
    ) -> StepRun:
        name = str(step.get("name") or step.get("uses") or f"step {index}")
        ctx = self.contexts(**base, env=state.env, steps=state.outputs_of)
        status = {"success": ok, "failure": not ok, "always": True, "cancelled": False}
        condition = str(step.get("if", "success()")).strip()
        whole = EXPR.fullmatch(condition)
        condition = whole[1] if whole else condition
        if not re.search(r"\b(success|failure|always|cancelled)\(", condition):
            condition = f"success() && ({condition})"
        if not truthy(evaluate(condition, ctx, status)):
            return StepRun(name, "skipped")
        step_env = {k: _env_text(v) for k, v in value_of(step.get("env", {}), ctx).items()}
        try:
            if "run" in step:
                outputs, log = self._script(state, substitute(step["run"], ctx), step_env, index)
            else:
                outputs, log = self._action(state, step, ctx, step_env), ""
        except StepFailed as err:
            return StepRun(name, "failure", log=str(err))
        return StepRun(name, "success", outputs, log)

    def _action(
        self, state: JobState, step: dict[str, Any], ctx: dict[str, Any], env: dict[str, str]
    ) -> dict[str, str]:
        action = str(step["uses"]).split("@")[0]
        handler = self.actions.get(action)
        if handler is None:
            raise UnknownAction(f"no mapping for {step['uses']} (step {step.get('name')!r})")
        return handler(state, value_of(step.get("with", {}), ctx), env)

    def _script(
        self, state: JobState, script: str, step_env: dict[str, str], index: int
    ) -> tuple[dict[str, str], str]:
        folder = self.temp / "_steps" / str(index)
        folder.mkdir(parents=True)
        files = {n: folder / n.lower() for n in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT")}
        for path in files.values():
            path.touch()
        (folder / "script.sh").write_text(script)
        env = {**state.process_env(step_env), **{k: str(v) for k, v in files.items()}}
        env["GITHUB_STEP_SUMMARY"] = str(folder / "summary.md")
        proc = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(folder / "script.sh")],
            cwd=self.workspace,
            env=env,
            capture_output=True,
            text=True,
            timeout=self.timeout,
            check=False,
        )
        log = f"$ {script.strip()}\n{proc.stdout[-6000:]}{proc.stderr[-6000:]}"
        if proc.returncode != 0:
            raise StepFailed(f"exit {proc.returncode}\n{log}")
        state.env.update(parse_file_commands(files["GITHUB_ENV"].read_text()))
        state.path += [p for p in files["GITHUB_PATH"].read_text().splitlines() if p.strip()]
        return parse_file_commands(files["GITHUB_OUTPUT"].read_text()), log


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _checkout(state: JobState, with_: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """The workspace is the repository already, at ``github.sha``."""
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=state.workspace, capture_output=True, text=True
    ).stdout.strip()
    if with_ or head != state.runner.github["sha"]:
        raise StepFailed(f"checkout: the workspace is at {head}, with {with_} not mapped")
    return {}


def _setup_python(state: JobState, with_: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """The running interpreter stands for every version asked for: a venv of it (so installs
    land there, not in the tests' environment) with ``pythonX.Y`` for each version, on PATH."""
    versions = str(with_.pop("python-version", "")).split()
    if with_ or not versions:
        raise StepFailed(f"setup-python: only python-version is mapped, not {with_}")
    venv = state.runner.temp / "setup-python"
    template = state.runner.python_template
    if venv.is_dir():
        pass
    elif template is not None:
        shutil.copytree(template, venv, symlinks=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", venv], check=True, capture_output=True)
    for version in versions:
        if not re.fullmatch(r"3\.\d+", version):
            raise StepFailed(f"setup-python: {version!r} is not a Python version")
        link = venv / "bin" / f"python{version}"
        if not link.exists():
            link.symlink_to("python")
    state.path.append(str(venv / "bin"))
    return {}


def _cache(state: JobState, with_: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """Nothing is restored; the paths must be inside the workspace (as actions/cache sees it)
    and hold the compiler caches' folders, as they are set now."""
    paths = [state.workspace / p for p in str(with_.get("path", "")).split()]
    if not paths or not with_.get("key"):
        raise StepFailed(f"cache: no path or key in {with_}")
    outside = [p for p in paths if not p.resolve().is_relative_to(state.workspace.resolve())]
    if outside:
        raise StepFailed(f"cache: {outside} are not in the workspace {state.workspace}")
    for name in ("CCACHE_DIR", "SCCACHE_DIR"):
        folder = {**state.env, **env}.get(name)
        if folder is not None and Path(folder) not in paths:
            raise StepFailed(f"cache: {name}={folder} is not among the cached {paths}")
    return {}


def _upload_artifact(state: JobState, with_: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """The ``path`` files are copied to ``<artifacts>/<name>/`` (their workspace paths)."""
    dest = state.runner.artifacts / str(with_["name"])
    found: list[Path] = []
    for pattern in str(with_["path"]).split():
        if pattern.endswith("/"):
            pattern += "**/*"
        found += [p for p in state.workspace.glob(pattern) if p.is_file()]
    if not found and with_.get("if-no-files-found", "warn") == "error":
        raise StepFailed(f"upload-artifact {with_['name']}: no files match {with_['path']!r}")
    for path in found:
        target = dest / path.relative_to(state.workspace)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return {}


#: The actions the build job uses, mapped to what they do here.
ACTIONS: dict[str, Action] = {
    "actions/checkout": _checkout,
    "actions/setup-python": _setup_python,
    "actions/cache": _cache,
    "actions/upload-artifact": _upload_artifact,
}
