"""``torch.version.git_version`` of a torch built from a checkout with a committed hipify: the
upstream commit (as TheRock's CI gets it with --no-commit-hipify), not the local commit."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rocm_build.building import gitversion
from tests.conftest import GIT_IDENTITY

from .conftest import Workspace, read_member


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_IDENTITY}
    res = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return res.stdout.strip()


def _hipify(repo: Path) -> tuple[str, str]:
    """Tag the checkout as rocm-build's checkout does: the fetched commit, then a hipify commit."""
    upstream = _git(repo, "rev-parse", "HEAD")
    _git(repo, "tag", "-f", "ROCM_BUILD_UPSTREAM")
    (repo / "csrc" / "hipified.hip").write_text("// hipify output\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "DO NOT SUBMIT: HIPIFY")
    _git(repo, "tag", "-f", "ROCM_BUILD_HIPIFY")
    return upstream, _git(repo, "rev-parse", "HEAD")


@pytest.mark.slow
def test_release_build_names_the_upstream_commit(workspace: Workspace) -> None:
    src = workspace.root / "src" / "torch"
    upstream, hipify = _hipify(src)
    result = workspace.build("torch")
    assert result.returncode == 0, result.stderr
    text = read_member(workspace.wheel("torch"), "torch/version.py").decode()
    assert f"git_version = '{upstream}'" in text
    assert hipify not in text
    assert "__version__ = '2.9.1+rocm5.2'" in text  # the release tag's version, untouched
    (note,) = [n for n in workspace.report()["projects"]["torch"]["notes"] if "git_version" in n]  # type: ignore[index]
    assert upstream in note
    assert hipify in note


def test_only_upstream_and_its_hipify_name_upstream(tmp_path: Path) -> None:
    repo = tmp_path / "torch"
    (repo / "csrc").mkdir(parents=True)
    (repo / "version.txt").write_text("2.9.0a0\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "upstream")
    assert gitversion.upstream_commit(repo) is None  # not a checkout rocm-build made
    upstream, _ = _hipify(repo)
    assert gitversion.upstream_commit(repo) == upstream
    (repo / "version.txt").write_text("changed\n")
    assert gitversion.upstream_commit(repo) is None  # an uncommitted change
    _git(repo, "commit", "-qam", "a hipified patch")
    assert gitversion.upstream_commit(repo) is None  # a patch after hipify
    _git(repo, "checkout", "-q", "ROCM_BUILD_UPSTREAM")
    assert gitversion.upstream_commit(repo) == upstream  # no hipify commit at all
