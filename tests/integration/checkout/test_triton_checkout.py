"""The triton project: its ref comes from the checked-out torch's pin files (the commit, or with
triton.release the branch release/X.Y.x of the pinned version), from ROCm's fork or upstream as
triton.repo says; it is checked out after torch and pinned in the manifest like the others."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.integration.tritonfix.repos import TritonRepos, make_repos
from tests.support.gitrepo import git

from .conftest import Runner


@pytest.fixture
def repos(tmp_path: Path) -> TritonRepos:
    return make_repos(tmp_path / "upstream")


@pytest.fixture
def tw(tmp_path: Path, repos: TritonRepos) -> Path:
    work = tmp_path / "tw"
    work.mkdir()
    (work / "rocm-build.toml").write_text(
        textwrap.dedent(
            f"""\
            [checkout]
            retry_delay = 0.0
            retries = 1
            patches = false

            [triton]
            fork_url = "{repos.fork.as_uri()}"
            upstream_url = "{repos.upstream.as_uri()}"

            [projects.torch]
            origin = "{repos.torch.as_uri()}"
            ref = "v2.99.0"
            hipify = []
            """
        )
    )
    return work


def _manifest(work: Path) -> dict[str, dict[str, str]]:
    data = json.loads((work / "src" / "rocm-build-sources.json").read_text())
    return data["projects"]  # type: ignore[no-any-return]


def _error(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("rocm-build: error:")]
    return line


def test_triton_checked_out_at_torchs_pin_from_the_fork(
    run_cli: Runner, tw: Path, repos: TritonRepos
) -> None:
    # Named before torch: still checked out after it (its ref is in torch's checkout).
    res = run_cli(["checkout", "triton", "torch"], cwd=tw)
    assert res.returncode == 0, res.stderr
    pin = repos.commits["fork_pin"]
    assert git(tw / "src" / "triton", "rev-parse", "HEAD^{commit}") == pin
    assert (tw / "src/triton/python/triton/__init__.py").read_text() == 'ORIGIN = "fork"\n'
    entry = _manifest(tw)["triton"]
    assert entry["commit"] == pin
    assert entry["ref"] == pin
    assert entry["origin"] == repos.fork.as_uri()
    # The manifest replays it like any project.
    replay = tw / "replay"
    replay.mkdir()
    (replay / "rocm-build.toml").write_text((tw / "rocm-build.toml").read_text())
    res = run_cli(
        ["checkout", "--manifest", str(tw / "src" / "rocm-build-sources.json")], cwd=replay
    )
    assert res.returncode == 0, res.stderr
    assert git(replay / "src" / "triton", "rev-parse", "HEAD^{commit}") == pin


@pytest.mark.parametrize("by", ["flag", "environment"])
def test_release_takes_the_release_branch_of_the_pinned_version(
    run_cli: Runner, tw: Path, repos: TritonRepos, by: str
) -> None:
    env = {"ROCM_BUILD_TRITON_REPO": "upstream"}
    args = ["checkout", "torch", "triton"]
    if by == "flag":
        args.append("--release")
    else:
        env["ROCM_BUILD_TRITON_RELEASE"] = "1"
    res = run_cli(args, cwd=tw, env=env)
    assert res.returncode == 0, res.stderr
    entry = _manifest(tw)["triton"]
    assert entry["ref"] == "release/3.5.x"
    assert entry["origin"] == repos.upstream.as_uri()
    assert entry["commit"] == repos.commits["upstream_first"]


def test_a_pin_the_upstream_repository_lacks_is_one_line(run_cli: Runner, tw: Path) -> None:
    # The fork's pin is not a commit of upstream Triton.
    env = {"ROCM_BUILD_TRITON_REPO": "upstream"}
    res = run_cli(["checkout", "torch", "triton"], cwd=tw, env=env)
    assert res.returncode == 2, res.stderr
    line = _error(res.stderr)
    assert "is not on" in line, line
    assert ".ci/docker/ci_commit_pins/triton.txt" in line, line
    assert not (tw / "src" / "triton").exists()
    assert "triton" not in _manifest(tw)


def test_a_torch_without_pin_files_is_one_line(run_cli: Runner, tw: Path) -> None:
    res = run_cli(["checkout", "torch", "triton", "--ref", "torch=v2.98.0"], cwd=tw)
    assert res.returncode == 2, res.stderr
    line = _error(res.stderr)
    assert "has no Triton pin" in line, line
    assert "--ref triton=REF" in line, line
    assert not (tw / "src" / "triton").exists()


def test_triton_alone_needs_a_torch_checkout(run_cli: Runner, tw: Path) -> None:
    res = run_cli(["checkout", "triton"], cwd=tw)
    assert res.returncode == 2, res.stderr
    assert "check out torch first" in _error(res.stderr)


def test_an_explicit_ref_wins(run_cli: Runner, tw: Path, repos: TritonRepos) -> None:
    first = repos.commits["fork_first"]
    res = run_cli(["checkout", "torch", "triton", "--ref", f"triton={first}"], cwd=tw)
    assert res.returncode == 0, res.stderr
    assert _manifest(tw)["triton"]["commit"] == first
