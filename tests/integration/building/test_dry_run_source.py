"""`build --dry-run` says which source each project's checkout came from: torch checked out by
rocm-build from its own repository (source = upstream) and then from a fork at the train's
release branch (source = fork), both real git repositories served over file://."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.gitrepo import git

from .conftest import Workspace


def _source_line(out: str) -> str:
    return next(ln.strip() for ln in out.splitlines() if ln.strip().startswith("source:"))


def test_dry_run_names_the_upstream_or_fork_a_checkout_came_from(
    workspace: Workspace, tmp_path: Path
) -> None:
    fixture = workspace.root / "src" / "torch"
    upstream = tmp_path / "upstream-torch.git"
    fork = tmp_path / "fork-torch.git"
    git(tmp_path, "clone", "-q", "--bare", str(fixture), str(upstream))
    git(tmp_path, "clone", "-q", "--bare", str(fixture), str(fork))
    # The fork's release branch: the release's commit plus one of ROCm's own.
    work = tmp_path / "fork-work"
    git(tmp_path, "clone", "-q", str(fork), str(work))
    (work / "ROCM_NOTES.md").write_text("a backport\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "backport")
    git(work, "push", "-q", "origin", "HEAD:refs/heads/release/2.9")
    fork_head = git(work, "rev-parse", "HEAD")
    shutil.rmtree(fixture)
    workspace.configure(
        torch=f'origin = "file://{upstream}"\n\n[forks.torch]\norigin = "file://{fork}"\n'
        'ref = "release/{train}"\n'
    )
    env = {"ROCM_BUILD_TRAIN": "2.9"}

    def checkout(source: str) -> None:
        res = workspace.run_cli(
            ["checkout", "torch", "--no-hipify"],
            cwd=workspace.root,
            env={**workspace.env, **env, "ROCM_BUILD_SOURCE": source},
        )
        assert res.returncode == 0, res.stderr

    def dry_run(source: str) -> str:
        res = workspace.build("torch", "--dry-run", env={**env, "ROCM_BUILD_SOURCE": source})
        assert res.returncode == 0, res.stderr
        return _source_line(res.stdout)

    checkout("upstream")
    tag_commit = git(upstream, "rev-parse", "v2.9.1^{commit}")
    assert dry_run("upstream") == (
        f"source:  upstream: file://{upstream}, tag v2.9.1 at {tag_commit[:12]}, no patches"
    )
    # A run whose settings name the other source says so, and how to switch.
    assert dry_run("fork").endswith("(this run's source is fork: run checkout again to switch)")

    checkout("fork")
    assert dry_run("fork") == (
        f"source:  fork: file://{fork}, branch release/2.9 at {fork_head[:12]}, no patches"
    )
    res = workspace.build(
        "torch", "--dry-run", env={**env, "ROCM_BUILD_SOURCE": "fork"}, as_json=True
    )
    assert res.returncode == 0, res.stderr
    (project,) = json.loads(res.stdout)["projects"]
    assert project["checkout"]["kind"] == "fork"


def test_dry_run_says_when_rocm_build_did_not_make_the_checkout(workspace: Workspace) -> None:
    """The workspace's checkouts are copied in, not made by `checkout`: no manifest entry."""
    res = workspace.build("torch", "--dry-run")
    assert res.returncode == 0, res.stderr
    line = _source_line(res.stdout)
    assert line.startswith("source:  not recorded: ")
    assert "a checkout rocm-build did not make" in line
