"""``torch.version.git_version`` of a torch built from a checkout with a committed hipify: the
upstream commit (as TheRock's CI gets it with --no-commit-hipify), not the local commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build.building import gitversion
from tests.support.gitrepo import git

from .conftest import Workspace, read_member


def _hipify(repo: Path) -> tuple[str, str]:
    """Tag the checkout as rocm-build's checkout does: the fetched commit, then a hipify commit."""
    upstream = git(repo, "rev-parse", "HEAD")
    git(repo, "tag", "-f", "ROCM_BUILD_UPSTREAM")
    (repo / "csrc" / "hipified.hip").write_text("// hipify output\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "DO NOT SUBMIT: HIPIFY")
    git(repo, "tag", "-f", "ROCM_BUILD_HIPIFY")
    return upstream, git(repo, "rev-parse", "HEAD")


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
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "upstream")
    assert gitversion.upstream_commit(repo) is None  # not a checkout rocm-build made
    upstream, _ = _hipify(repo)
    assert gitversion.upstream_commit(repo) == upstream
    (repo / "version.txt").write_text("changed\n")
    assert gitversion.upstream_commit(repo) is None  # an uncommitted change
    git(repo, "commit", "-qam", "a hipified patch")
    assert gitversion.upstream_commit(repo) is None  # a patch after hipify
    git(repo, "checkout", "-q", "ROCM_BUILD_UPSTREAM")
    assert gitversion.upstream_commit(repo) == upstream  # no hipify commit at all
