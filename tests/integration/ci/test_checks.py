"""Static checks of the CI files: actionlint on the workflows (with shellcheck on their scripts),
hadolint on the Dockerfile, shellcheck on every shell script, and the workflow's use of
`rocm-build matrix` against what that command really prints."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rocm_build import config
from tests.conftest import REPO, CliRunner
from tests.support.cicalls import rocm_build_calls, unknown_calls, walk_strings

WORKFLOWS = sorted((REPO / "ci").glob("*.yml"))
WORKFLOW = REPO / "ci" / "rocm-build.yml"
DOCKERFILE = REPO / "docker" / "Dockerfile"
BIN = Path(sys.executable).parent


def tool(name: str) -> str:
    """The linter from the test extra (venv bin), else from PATH."""
    for candidate in (BIN / name, shutil.which(name)):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail(f"{name} is not installed: pip install -e '.[test]' (or bash dev/setup)")


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    # actionlint runs shellcheck on `run:` scripts when it is on PATH.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(args, capture_output=True, text=True, env=env, check=False)


def shell_scripts() -> list[Path]:
    """Every shell script in the repository: *.sh files and files with a sh/bash shebang."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    scripts = []
    for name in filter(None, listed):
        path = REPO / name
        if not path.is_file():
            continue
        if path.suffix in (".sh", ".bash"):
            scripts.append(path)
            continue
        with path.open("rb") as fh:
            first = fh.readline(200)
        if re.match(rb"#!\s*(/usr)?/bin/(env\s+)?(ba)?sh\b", first):
            scripts.append(path)
    return sorted(scripts)


def load_workflow() -> dict[str, Any]:
    data = yaml.safe_load(WORKFLOW.read_text())
    assert isinstance(data, dict)
    return data


def test_there_is_a_workflow_and_a_dockerfile() -> None:
    assert WORKFLOW in WORKFLOWS
    assert DOCKERFILE.is_file()


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actionlint(workflow: Path) -> None:
    result = run_tool(tool("actionlint"), "-no-color", str(workflow))
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_catches_a_bad_workflow(tmp_path: Path) -> None:
    """The check can fail: an unquoted variable (shellcheck) and an unknown context."""
    bad = tmp_path / "bad.yml"
    bad.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo $FOO ${{ matrix.nope }}\n"
    )
    result = run_tool(tool("actionlint"), "-no-color", str(bad))
    assert result.returncode != 0
    assert "SC2086" in result.stdout


def test_hadolint() -> None:
    result = run_tool(tool("hadolint"), "--no-color", str(DOCKERFILE))
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_base_is_pinned_by_digest() -> None:
    text = DOCKERFILE.read_text()
    match = re.search(r"^ARG BASE_IMAGE=(\S+)$", text, re.MULTILINE)
    assert match, "the base image is a build argument"
    assert re.fullmatch(r"quay\.io/pypa/manylinux_2_28_x86_64@sha256:[0-9a-f]{64}", match[1])
    assert re.search(r"^FROM \$\{BASE_IMAGE\}$", text, re.MULTILINE)
    for needed in ("cmake", "ninja", "patchelf", "ccache", "sccache", "git"):
        assert needed in text
    assert "/opt/rocm-build/src" in text  # rocm-build itself is installed
    # No ROCm tree is baked in: only the package sources are copied, nothing is downloaded.
    for line in re.findall(r"^(?:COPY|ADD)\s+(.*)$", text, re.MULTILINE):
        *sources, _dest = line.split()
        assert set(sources) <= {
            "pyproject.toml",
            "README.md",
            "rocm_build",
        }, line
    instructions = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("#"))
    assert not re.search(r"rocm(-build)? (fetch|debian)|/opt/rocm\b(?!-build)", instructions)


def test_there_are_shell_scripts_to_check() -> None:
    names = {p.relative_to(REPO).as_posix() for p in shell_scripts()}
    assert {"dev/setup", "dev/test", ".ci/run"} <= names


@pytest.mark.parametrize("script", shell_scripts(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_shellcheck(script: Path) -> None:
    result = run_tool(tool("shellcheck"), "--format=gcc", str(script))
    assert result.returncode == 0, result.stdout + result.stderr


# --- the workflow against `rocm-build matrix` ----------------------------------------------------

MATRIX_JOBS_EXPR = "${{ fromJSON(needs.plan.outputs.matrix) }}"


def matrix_jobs(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: job
        for name, job in workflow["jobs"].items()
        if job.get("strategy", {}).get("matrix") == MATRIX_JOBS_EXPR
    }


def plan_step(workflow: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    plan = workflow["jobs"]["plan"]
    expr = plan["outputs"]["matrix"]
    step_id = re.fullmatch(r"\$\{\{ steps\.(\w+)\.outputs\.matrix \}\}", expr)
    assert step_id, f"plan's matrix output is not a step output: {expr}"
    (step,) = [s for s in plan["steps"] if s.get("id") == step_id[1]]
    return plan, step


def github_output(stdout: str) -> dict[str, str]:
    """Parse `name=value` lines the way the runner reads $GITHUB_OUTPUT."""
    out = {}
    for line in stdout.splitlines():
        key, sep, value = line.partition("=")
        assert sep, f"not a name=value line: {line!r}"
        out[key] = value
    return out


def workflow_env(workflow: dict[str, Any], inputs: dict[str, str]) -> dict[str, str]:
    """The workflow-level env with `${{ inputs.X }}` (and `|| vars.Y`) evaluated: inputs given,
    variables unset."""
    env = {}
    for name, value in workflow.get("env", {}).items():
        text = str(value)
        ref = re.fullmatch(r"\$\{\{ inputs\.(\w+)(?: \|\| vars\.\w+)? \}\}", text)
        if ref:
            env[name] = inputs.get(ref[1], "")
        elif "${{" not in text:
            env[name] = text
    return env


TREE_URL = "https://dist.example/therock-{group}.tar.gz"


@pytest.mark.parametrize(
    "inputs",
    [
        {"rocm": TREE_URL},
        {"pythons": "3.12,3.13", "trains": "2.9", "arch_groups": "gfx94X,mi=gfx90a+gfx942",
         "rocm": TREE_URL},
        {"rocm": TREE_URL, "gpu_labels": "gpu,{group}"},
    ],
    ids=["tree-only", "inputs", "rocm-and-labels"],
)  # fmt: skip
def test_workflow_matrix_keys_exist_in_rocm_build_matrix_output(
    run_cli: CliRunner, tmp_path: Path, inputs: dict[str, str]
) -> None:
    workflow = load_workflow()
    _, step = plan_step(workflow)
    assert step["run"].strip() == 'rocm-build matrix --format github >> "$GITHUB_OUTPUT"'
    env = workflow_env(workflow, inputs)
    args = step["run"].split(">>")[0].split()[1:]
    result = run_cli(args, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    outputs = github_output(result.stdout)
    matrix = json.loads(outputs["matrix"])
    include = matrix["include"]
    assert include, "the matrix has jobs"

    jobs = matrix_jobs(workflow)
    assert {"build", "gpu-smoke"} <= set(jobs)
    for name, job in jobs.items():
        assert "plan" in job["needs"], name
        used = {key for text in walk_strings(job) for key in re.findall(r"\bmatrix\.(\w+)", text)}
        assert used, name
        for entry in include:
            missing = used - set(entry)
            assert not missing, (
                f"job {name} uses matrix.{sorted(missing)} that are not in the output"
            )
            # Jobs pass --rocm "$ROCM": an empty value would hide the runner's ROCM_PATH.
            assert entry["rocm"]
            # Inputs reach the jobs.
            if "pythons" in inputs:
                assert entry["python"] in inputs["pythons"].split(",")
            if "gpu_labels" in inputs:
                assert entry["gpu_runs_on"] == ["gpu", entry["arch_group"]]
            if "rocm" in inputs:
                assert entry["rocm"] == f"https://dist.example/therock-{entry['arch_group']}.tar.gz"
    # Every job's artifact name is unique, so the publish job can collect them all, and the
    # wheels in them have distinct names: one local version label per group.
    assert len({e["artifact"] for e in include}) == len(include)
    assert len({(e["python"], e["train"], e["version_suffix"]) for e in include}) == len(include)
    build_steps = workflow["jobs"]["build"]["steps"]
    assert any('--version-suffix "$VERSION_SUFFIX"' in s.get("run", "") for s in build_steps)
    publish = workflow["jobs"]["publish"]
    (download,) = [s for s in publish["steps"] if "download-artifact" in s.get("uses", "")]
    prefix = download["with"]["pattern"].rstrip("*")
    assert all(e["artifact"].startswith(prefix) for e in include)


def test_workflow_without_a_tree_stops_the_plan_job_saying_what_to_give(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    """Hosted runners have no /opt/rocm: no default tree that every build job would fail on."""
    workflow = load_workflow()
    assert workflow["env"]["ROCM_BUILD_MATRIX_ROCM"] == "${{ inputs.rocm || vars.ROCM_BUILD_ROCM }}"
    env = workflow_env(workflow, {})
    result = run_cli(["matrix", "--format", "github"], cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "names no ROCm tree" in result.stderr
    assert "`rocm` input or ROCM_BUILD_ROCM variable" in result.stderr
    assert result.stdout == ""


def test_workflow_matrix_input_errors_fail_the_plan_job(run_cli: CliRunner, tmp_path: Path) -> None:
    env = workflow_env(load_workflow(), {"arch_groups": "gfx9422"})
    result = run_cli(["matrix", "--format", "github"], cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert "did you mean 'gfx942'" in result.stderr
    assert result.stdout == ""


@pytest.mark.slow
def test_workflow_calls_only_rocm_build_commands_and_flags_that_exist(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    """The workflow runs the README's commands with their documented flags; a command the CLI
    no longer has fails here (it would fail every CI run of the workflow)."""
    calls = rocm_build_calls(load_workflow())
    unknown, seen = unknown_calls(run_cli, calls, tmp_path)
    assert not unknown, f"the workflow calls what rocm-build does not have: {unknown}"
    assert {"matrix", "checkout", "build", "bundle", "smoke", "rocm fetch"} <= seen, calls


def test_a_removed_command_or_flag_in_the_workflow_is_found(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    """The check can fail: a command and a flag that do not exist, as a workflow would call them."""
    calls = [["-q", "rocm", "fetch", "$ROCM"], ["smoke-all", "--arch", "x"],
             ["bundle", "w.whl", "--no-such-flag"], ["rocm", "unfetch", "$ROCM"]]  # fmt: skip
    unknown, seen = unknown_calls(run_cli, calls, tmp_path)
    assert seen == {"rocm fetch", "bundle"}
    assert [u.split(" (")[0] for u in unknown] == [
        "command smoke-all",
        "bundle --no-such-flag",
        "command rocm unfetch",
    ]


def test_the_workflow_builds_triton_with_torch(run_cli: CliRunner, tmp_path: Path) -> None:
    """`triton` is in no train: the build job gets its projects from the matrix (the train's
    plus `matrix.extra_projects`, triton by default) through ROCM_BUILD_DEFAULT_PROJECTS, so its
    `checkout` and `build` (which name no project) take triton too, and the GPU smoke job's
    torch.compile check has a Triton to run."""
    workflow = load_workflow()
    build = workflow["jobs"]["build"]
    assert build["env"].get("ROCM_BUILD_DEFAULT_PROJECTS") == "${{ matrix.projects }}"
    names = set(config.load(cwd=tmp_path, env={}).projects)
    for step in build["steps"]:
        run = step.get("run", "")
        if re.search(r"\brocm-build\s+(checkout|build)\b", run):
            named = names & set(re.findall(r"[\w.-]+", run))
            assert not named, f"{step['name']} names {named}: the matrix's projects would not apply"
    env = workflow_env(workflow, {"rocm": TREE_URL, "trains": "2.11,2.12"})
    result = run_cli(["matrix", "--format", "github"], cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    include = json.loads(github_output(result.stdout)["matrix"])["include"]
    assert {e["train"] for e in include} == {"2.11", "2.12"}
    for entry in include:
        job_env = {
            "ROCM_BUILD_TRAIN": entry["train"],
            "ROCM_BUILD_DEFAULT_PROJECTS": entry["projects"],
        }
        chosen = [s.name for s in config.load(cwd=tmp_path, env=job_env).selected_projects()]
        assert "triton" in chosen, entry
        assert chosen.index("triton") < chosen.index("torch")  # built first; torch requires it
        assert "torchaudio" in chosen  # the train's projects: 2.12 pairs torchaudio v2.11.0
