"""The shipped workflow runs as copied: ci/rocm-build.yml copied into another git repository (the
vecadd example's rocm-build.toml and patches, as a user's repository holds them), its plan job
and then one job of the matrix it plans run here step by step (``actionsim``): rocm-build
installed from a wheel of this checkout committed in that repository (a documented
``rocm_build_spec`` value), the Debian ROCm 5.2 tree as the `rocm` input, gfx90a-dcgpu (a TheRock
family string) as the arch group, and the uploaded artifacts checked for the fat wheel.

Every ``${{ ... }}`` the jobs use is evaluated strictly (``actionexpr``): a context, matrix key,
input or variable the workflow names that is not there fails these tests; so does a ``uses:``
step with no mapping (``actionsim.ACTIONS``). The variables context holds the ones the workflow's
header documents, and nothing else."""

from __future__ import annotations

import copy
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

from tests.conftest import REPO, CliRunner
from tests.integration.ci.actionexpr import EXPR, Unresolved
from tests.integration.ci.actionsim import ACTIONS, Runner
from tests.integration.smoke.conftest import EXAMPLE, cache_root, run
from tests.support.gitrepo import git, make_example_repo

WORKFLOW = REPO / "ci" / "rocm-build.yml"
DOCS = REPO / "docs" / "ci-workflow.md"
#: the docs' copy command, as a user runs it in their repository
COPY = "mkdir -p .github/workflows && cp ci/rocm-build.yml .github/workflows/"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
#: the wheel's sources, as docker/Dockerfile copies them
PACKAGE_FILES = ("pyproject.toml", "README.md", "rocm_build")


def load(path: Path = WORKFLOW) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def documented_vars(text: str) -> set[str]:
    """The repository variables the workflow's header lists."""
    header = "\n".join(header_lines(text))
    section = header.split("Repository variables", 1)[1].split("# Secrets:", 1)[0]
    return set(re.findall(r"^#\s+(ROCM_BUILD_[A-Z_]+)\s", section, re.MULTILINE))


def header_lines(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def runner_for(
    workflow: dict[str, Any],
    host: Path,
    work: Path,
    *,
    inputs: dict[str, Any],
    vars: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
) -> Runner:
    """A runner for ``workflow`` on ``host`` (a git repository): the inputs with the workflow's
    defaults, the documented variables (empty unless given), no secrets set."""
    declared = workflow["on"]["workflow_dispatch"]["inputs"]
    assert set(inputs) <= set(declared), (
        f"not inputs of the workflow: {set(inputs) - set(declared)}"
    )
    all_inputs = {name: spec.get("default") for name, spec in declared.items()} | inputs
    known = documented_vars(WORKFLOW.read_text())
    assert set(vars or {}) <= known, f"not documented in the header: {set(vars or {}) - known}"
    secrets = workflow["on"]["workflow_call"]["secrets"]
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=host, capture_output=True, text=True, check=False
    ).stdout.strip()
    this_bin = Path(sys.executable).parent
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        and not k.startswith(("GITHUB_", "RUNNER_", "ROCM_BUILD_"))
    }
    # No rocm-build or python of the tests' venv, and no git identity: a fresh runner's.
    base["PATH"] = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if p and Path(p) != this_bin
    )
    base["GIT_CONFIG_GLOBAL"] = os.devnull
    base.update(env or {})
    return Runner(
        workflow=workflow,
        workspace=host,
        temp=work / "runner-temp",
        base_env=base,
        inputs=all_inputs,
        vars=dict.fromkeys(known, "") | (vars or {}),
        secrets=dict.fromkeys(secrets, ""),
        github={"workspace": str(host), "sha": head, "ref": "refs/heads/main"},
        actions=ACTIONS,
        artifacts=work / "artifacts",
    )


def make_host(dest: Path, origin: str, wheel: Path | None) -> Path:
    """A user's repository: the example's rocm-build.toml (its project at ``origin``, no extra
    projects: vecadd is no torch) and patches, the workflow copied as the docs say, and
    ``wheel`` (rocm-build) committed in vendor/."""
    dest.mkdir()
    (dest / "ci").mkdir()
    shutil.copy(WORKFLOW, dest / "ci" / "rocm-build.yml")  # where the user's copy comes from
    subprocess.run(["bash", "-ec", COPY], cwd=dest, check=True)
    shutil.rmtree(dest / "ci")
    toml = (EXAMPLE / "rocm-build.toml").read_text()
    toml = toml.replace("https://example.invalid/vecadd.git", origin)
    (dest / "rocm-build.toml").write_text(toml + "\n[matrix]\nextra_projects = []\n")
    shutil.copytree(EXAMPLE / "patches", dest / "patches")
    if wheel is not None:
        (dest / "vendor").mkdir()
        shutil.copy(wheel, dest / "vendor")
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "rocm-build CI")
    return dest


@pytest.fixture(scope="module")
def rocm_build_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """rocm-build's wheel from this checkout's files (committed or not)."""
    src = tmp_path_factory.mktemp("rocm-build-src")
    for name in PACKAGE_FILES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, src / name)
    dist = src / "dist"
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps"]
    run([*pip, "-w", dist, src])
    (wheel,) = dist.glob("rocm_build-*.whl")
    return wheel


@pytest.fixture(scope="module")
def python_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of this interpreter for setup-python to copy into each job's runner."""
    venv = tmp_path_factory.mktemp("setup-python") / "venv"
    run([sys.executable, "-m", "venv", venv])
    return venv


@pytest.fixture(scope="module")
def hipify() -> Path:
    """PyTorch's hipify extracted from a torch wheel (the example's own step), cached."""
    dest = cache_root() / "torch-hipify"
    run([sys.executable, EXAMPLE / "project" / "tools" / "fetch_hipify.py", dest])
    return dest


@pytest.mark.slow
def test_the_copied_workflow_plans_and_builds_the_example(
    tmp_path: Path,
    rocm_tree: Path,
    hipify: Path,
    rocm_build_wheel: Path,
    python_template: Path,
) -> None:
    origin = make_example_repo(tmp_path / "vecadd-repo")
    host = make_host(tmp_path / "host", origin, rocm_build_wheel)
    workflow = load(host / ".github" / "workflows" / "rocm-build.yml")
    inputs = {
        "rocm_build_spec": f"./vendor/{rocm_build_wheel.name}",
        "pythons": PYTHON,
        "arch_groups": "gfx90a-dcgpu",
        "rocm": str(rocm_tree),
    }
    env = {"TORCH_HIPIFY_PATH": str(hipify), "ROCM_BUILD_BUNDLE_COMPRESSION_LEVEL": "1"}
    env["ROCM_BUILD_BUNDLE_DEFLATE_CACHE"] = os.environ["ROCM_BUILD_BUNDLE_DEFLATE_CACHE"]
    plan_runner = runner_for(workflow, host, tmp_path / "plan", inputs=inputs, env=env)
    plan_runner.python_template = python_template
    plan = plan_runner.run_job("plan")
    assert plan.ok, plan.log
    needs = {"plan": {"result": "success", "outputs": plan.outputs}}
    (entry,) = plan_runner.matrix_entries("build", needs)
    assert entry["arch"] == "gfx90a"
    assert entry["projects"] == "vecadd"

    runner = runner_for(workflow, host, tmp_path / "build", inputs=inputs, env=env)
    runner.python_template = python_template
    build = runner.run_job("build", matrix=entry, needs=needs)
    assert build.ok, build.log
    outcomes = {s.name: s.outcome for s in build.steps}
    assert all(o == "success" for n, o in outcomes.items() if not n.startswith("Get the ROCm")), (
        outcomes
    )
    assert outcomes["Get the ROCm tree (a tarball URL is downloaded and unpacked once)"] == (
        "skipped"  # a folder, not a URL
    )
    assert build.runs_on == "ubuntu-latest"
    # rocm-build ran from the runner's venv, installed from the committed wheel.
    tool = runner.temp / "rocm-build" / "bin"
    assert (tool / "rocm-build").is_file()
    assert build.env["ROCM_BUILD_BUILD_VENV"] == str(runner.temp / "build-python")
    assert build.env["CCACHE_DIR"] == str(host / ".cache" / "ccache")

    (fat,) = (runner.artifacts / entry["artifact"]).rglob("*.whl")
    assert fat.name.startswith(f"vecadd-1.0.0+rocm5.2.gfx90a.dcgpu-cp{PYTHON.replace('.', '')}-")
    assert "manylinux" in fat.name
    names = subprocess.run(
        [sys.executable, "-m", "zipfile", "-l", fat], capture_output=True, text=True, check=True
    ).stdout
    assert "vecadd/lib/libamdhip64.so.5" in names
    report = runner.artifacts / f"report-{entry['name']}"
    assert (report / "reports" / "smoke-cpu.xml").is_file()


@pytest.fixture(scope="module")
def matrix_entry(run_cli: CliRunner, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One job of ``rocm-build matrix`` (defaults, one Python and group, a folder as tree)."""
    env = {"ROCM_BUILD_MATRIX_PYTHONS": PYTHON, "ROCM_BUILD_MATRIX_ARCH_GROUPS": "gfx90a-dcgpu"}
    args = ["matrix", "--format", "json", "--rocm", "/opt/rocm"]
    result = run_cli(args, cwd=tmp_path_factory.mktemp("matrix"), env=env, check=True)
    (entry,) = json.loads(result.stdout)["include"]
    return dict(entry)


def only_step(workflow: dict[str, Any], job: str, name: str) -> dict[str, Any]:
    """``workflow`` with ``job`` cut down to its step ``name``."""
    cut = copy.deepcopy(workflow)
    steps = cut["jobs"][job]["steps"]
    cut["jobs"][job]["steps"] = [s for s in steps if s.get("name") == name]
    assert len(cut["jobs"][job]["steps"]) == 1, name
    return cut


def test_an_expression_the_run_cannot_resolve_fails_it(
    matrix_entry: dict[str, Any], tmp_path: Path
) -> None:
    """The check can fail: a matrix key the plan does not make, an undocumented variable, an
    unknown function, and an action with no mapping each stop the job before any step runs."""
    host = tmp_path / "host"
    host.mkdir()
    git(host, "init", "-q", "-b", "main")
    git(host, "commit", "-q", "--allow-empty", "-m", "x")
    entry = dict(matrix_entry)
    real = load()
    for path, value, error in [
        (("env", "ARCH"), "${{ matrix.arch_list }}", "matrix has no 'arch_list'"),
        (("env", "ARCH"), "${{ vars.ROCM_BUILD_NOT_DOCUMENTED }}", "vars has no"),
        (("runs-on",), "${{ fromJSON(inputs.runs_on || '\"a\"', 1) }}", None),
        (("env", "ARCH"), "${{ toUpper(matrix.arch) }}", "unknown function toUpper"),
    ]:
        workflow = copy.deepcopy(real)
        job = workflow["jobs"]["build"]
        target = job
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        runner = runner_for(workflow, host, tmp_path / "w", inputs={})
        if error is None:  # a wrong call: GitHub fails the run, so does this
            with pytest.raises((Unresolved, TypeError)):
                runner.run_job("build", matrix=entry)
            continue
        with pytest.raises(Unresolved, match=error):
            runner.run_job("build", matrix=entry)
    workflow = only_step(real, "build", "Checkout")
    workflow["jobs"]["build"]["steps"].insert(0, {"uses": "actions/new-thing@v1"})
    with pytest.raises(Exception, match="no mapping for actions/new-thing@v1"):
        runner_for(workflow, host, tmp_path / "u", inputs={}).run_job("build", matrix=entry)


def test_a_failing_step_fails_the_job_and_skips_the_rest(
    matrix_entry: dict[str, Any], tmp_path: Path
) -> None:
    """The check can fail: a step that exits non-zero fails the job; later steps are skipped but
    `if: always()` ones (the run report) still run."""
    host = tmp_path / "host"
    host.mkdir()
    git(host, "init", "-q", "-b", "main")
    git(host, "commit", "-q", "--allow-empty", "-m", "x")
    workflow = load()
    keep = ("Checkout", "Bundle", "Upload the run report")
    job = workflow["jobs"]["build"]
    job["steps"] = [s for s in job["steps"] if s.get("name") in keep]
    job["steps"][0]["run"] = "echo failing on purpose; exit 3"
    entry = dict(matrix_entry)
    result = runner_for(workflow, host, tmp_path / "w", inputs={}).run_job("build", matrix=entry)
    assert not result.ok
    assert [s.outcome for s in result.steps] == ["failure", "skipped", "success"]
    assert "failing on purpose" in result.steps[0].log


def test_the_plan_job_says_which_rocm_build_to_install(tmp_path: Path) -> None:
    """No default spec: "." would install the repository the copy runs in."""
    host = tmp_path / "host"
    host.mkdir()
    git(host, "init", "-q", "-b", "main")
    git(host, "commit", "-q", "--allow-empty", "-m", "x")
    real = load()
    assert "'.'" not in real["env"]["INSTALL_SPEC"]
    workflow = only_step(real, "plan", "Install rocm-build")
    result = runner_for(workflow, host, tmp_path / "w", inputs={}).run_job("plan")
    assert not result.ok
    log = result.steps[0].log
    assert "::error title=Which rocm-build?::" in log
    assert "rocm_build_spec input or the ROCM_BUILD_INSTALL variable" in log


@pytest.mark.parametrize(
    ("projects", "ok"), [("torch,torchvision,triton", False), ("vecadd", True)]
)
def test_a_torch_job_on_a_small_runner_stops_before_building(
    matrix_entry: dict[str, Any], tmp_path: Path, projects: str, ok: bool
) -> None:
    host = tmp_path / "host"
    host.mkdir()
    git(host, "init", "-q", "-b", "main")
    git(host, "commit", "-q", "--allow-empty", "-m", "x")
    workflow = only_step(
        load(), "build", "Check the runner's disk (a torch build needs about 60 GB free)"
    )
    entry = dict(matrix_entry) | {"projects": projects}
    runner = runner_for(
        workflow, host, tmp_path / "w", inputs={}, vars={"ROCM_BUILD_MIN_DISK_GB": "1000000"}
    )
    result = runner.run_job("build", matrix=entry)
    assert result.ok is ok, result.log
    if not ok:
        assert "::error title=Not enough disk for a torch build::" in result.log
        assert "large or self-hosted runner" in result.log


@pytest.mark.parametrize(
    ("index", "kind", "ok"),
    [
        ("https://upload.pypi.org/legacy/", "pypi", False),
        ("https://test.pypi.org/legacy/", "pypi", False),
        ("https://pypi.example.com/simple/upload", "other", True),
    ],
)
def test_the_publish_job_checks_what_pypi_refuses(
    tmp_path: Path, index: str, kind: str, ok: bool
) -> None:
    host = tmp_path / "host"
    (host / "dist").mkdir(parents=True)
    git(host, "init", "-q", "-b", "main")
    git(host, "commit", "-q", "--allow-empty", "-m", "x")
    (
        host / "dist" / "vecadd-1.0.0+rocm6.4.gfx94x.dcgpu-cp312-cp312-manylinux_2_28_x86_64.whl"
    ).touch()
    with (host / "dist" / "torch-2.9.0-cp312-cp312-manylinux_2_28_x86_64.whl").open("wb") as fh:
        fh.truncate(101 * 1024 * 1024)  # sparse: over the 100 MB
    workflow = only_step(load(), "publish", "Check the wheels against the index's rules")
    runner = runner_for(
        workflow, host, tmp_path / "w", inputs={}, vars={"ROCM_BUILD_INDEX_URL": index}
    )
    result = runner.run_job("publish")
    assert result.ok is ok, result.log
    if not ok:
        assert "PyPI refuses local versions::vecadd-1.0.0+rocm6.4" in result.log
        assert "Over PyPI's size limit::torch-2.9.0" in result.log
    publish = load()["jobs"]["publish"]
    assert publish["permissions"]["id-token"] == "write"
    uses = {s["uses"].split("@")[0]: s for s in publish["steps"] if "uses" in s}
    assert uses["pypa/gh-action-pypi-publish"]["if"] == "steps.index.outputs.kind == 'pypi'"


def walk(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in walk(k) + walk(v)]
    if isinstance(value, list):
        return [s for v in value for s in walk(v)]
    return [value] if isinstance(value, str) else []


def test_container_jobs_name_no_runner_host_paths() -> None:
    """In a container job ``${{ github.workspace }}`` and ``${{ runner.temp }}`` are the
    runner's paths, not the container's (actions/runner#2058): folders come from the shell's
    $GITHUB_WORKSPACE / $RUNNER_TEMP instead."""
    for name, job in load()["jobs"].items():
        if "container" not in job:
            continue
        exprs = [m for text in walk(job) for m in EXPR.findall(text)]
        host_paths = [e for e in exprs if re.search(r"\b(github|runner)\.(workspace|temp)\b", e)]
        assert not host_paths, f"{name} uses {host_paths}"


def test_every_variable_secret_and_input_is_documented() -> None:
    text = WORKFLOW.read_text()
    workflow = load()
    used_vars = set(
        re.findall(r"\bvars\.(\w+)", "\n".join(walk(workflow["jobs"]) + walk(workflow["env"])))
    )
    assert used_vars <= documented_vars(text)
    used_secrets = set(re.findall(r"\bsecrets\.(\w+)", "\n".join(walk(workflow["jobs"]))))
    assert used_secrets <= set(workflow["on"]["workflow_call"]["secrets"])
    dispatch = workflow["on"]["workflow_dispatch"]["inputs"]
    assert set(dispatch) == set(workflow["on"]["workflow_call"]["inputs"])
    docs = DOCS.read_text()
    for name in {*dispatch, *documented_vars(text), *used_secrets}:
        assert f"`{name}`" in docs, f"docs/ci-workflow.md does not name `{name}`"
    assert COPY in docs
    for fact in ("14 GB", "6 hours", "100 MB", "trusted publish", "id-token: write"):
        assert fact in docs, fact
