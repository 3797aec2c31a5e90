"""A checkout that rocm-build built is not stuck: what the build wrote into the source tree
(``build/``, ``*.egg-info``, ``dist/``), untracked and not in the project's ``.gitignore``, is no
uncommitted work of the user's, so checking out another tag needs no ``--force``. An edit of the
user's is still one."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support import gitrepo

from .conftest import Workspace


def test_changing_the_tag_after_a_build_needs_no_force(
    workspace: Workspace, tmp_path: Path
) -> None:
    fixture = workspace.root / "src" / "torch"
    assert not (fixture / ".gitignore").exists()  # the build's outputs are not ignored by it
    upstream = tmp_path / "upstream-torch.git"
    gitrepo.git(tmp_path, "clone", "-q", "--bare", str(fixture), str(upstream))
    work = tmp_path / "work"
    gitrepo.git(tmp_path, "clone", "-q", str(upstream), str(work))
    (work / "NOTES.md").write_text("the next release\n")
    gitrepo.git(work, "add", "-A")
    gitrepo.git(work, "commit", "-q", "-m", "next")
    gitrepo.git(work, "tag", "-a", "-m", "v2.9.2", "v2.9.2")
    gitrepo.git(work, "push", "-q", "origin", "HEAD:refs/heads/main", "v2.9.2")
    shutil.rmtree(fixture)
    workspace.configure(torch=f'origin = "file://{upstream}"\n')

    def checkout(tag: str) -> subprocess.CompletedProcess[str]:
        return workspace.run_cli(
            ["checkout", "torch", "--no-hipify", "--ref", f"torch={tag}"],
            cwd=workspace.root,
            env=workspace.env,
        )

    res = checkout("v2.9.1")
    assert res.returncode == 0, res.stderr
    res = workspace.build("torch")
    assert res.returncode == 0, res.stderr
    made = [p.name for p in fixture.iterdir() if p.name == "build" or p.name.endswith(".egg-info")]
    assert made, "the fixture's build wrote nothing into its source tree"

    res = checkout("v2.9.2")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (fixture / "NOTES.md").is_file()
    # Another checkout still keeps the user's own edits.
    (fixture / "NOTES.md").write_text("an edit of mine\n")
    res = checkout("v2.9.1")
    assert res.returncode == 6, res.stdout + res.stderr
    assert "NOTES.md" in res.stderr


def test_build_outputs_are_listed_once_and_never_through_a_link(tmp_path: Path) -> None:
    from rocm_build.repo import git

    repo = tmp_path / "repo"
    repo.mkdir()
    gitrepo.git(repo, "init", "-q")
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    exclude.write_text("*.mine")  # the user's own line, without a newline
    git.exclude_build_outputs(repo)
    git.exclude_build_outputs(repo)
    lines = exclude.read_text().splitlines()
    assert lines[0] == "*.mine"
    assert sorted(lines[2:]) == sorted(git.BUILD_OUTPUTS)
    (repo / "build").mkdir()
    (repo / "build" / "x.o").write_bytes(b"")
    assert gitrepo.git(repo, "status", "--porcelain", "--untracked-files=all") == ""

    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    exclude.unlink()
    exclude.symlink_to(victim)
    git.exclude_build_outputs(repo)  # a warning, nothing written through the link
    assert victim.read_text() == "precious\n"
    assert exclude.is_symlink()
