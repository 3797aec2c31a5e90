"""An upstream ``.gitmodules`` is hostile input: a submodule name or path that git refuses (a
``..`` component, an absolute name) must never name a folder rocm-build deletes. git ignores
such an entry, so a first checkout looks clean; the resume after a kill removes half-cloned
submodules by their names and paths, which is where a crafted one would lead out of the
checkout. Through the real CLI: a plain checkout, and a checkout killed before its submodule
update and run again, with ``--no-hipify`` too."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.gitrepo import git

from .sources_fixture import Project, commit_files

BAIT = b"precious: not the tool's\n"


def _hostile_project(base: Path, attack: str) -> tuple[Project, Path]:
    """``proj`` with a real submodule ``sub`` and one crafted ``.gitmodules`` entry that points
    at ``base/elsewhere`` (a folder holding a bait file)."""
    elsewhere = base / "elsewhere"
    elsewhere.mkdir(parents=True)
    (elsewhere / "victim").write_bytes(BAIT)
    (elsewhere / ".git").mkdir()  # what a half-cloned submodule at a crafted path would have
    up = base / "upstream"
    sub, proj = up / "sub", up / "proj"
    for repo in (sub, proj):
        repo.mkdir(parents=True)
        git(repo, "init", "-q")
    commit_files(sub, {"s.txt": "sub\n"}, "sub: first")
    commit_files(proj, {"README.md": "proj\n"}, "proj: first")
    git(proj, "submodule", "add", "-q", sub.as_uri(), "sub")
    # <work>/src/proj/.git/modules/NAME: five '..' lead to <base>.
    name, path = {
        "dotdot-name": ("../../../../../elsewhere", "ghost"),
        "absolute-name": (str(elsewhere), "ghost"),
        "dotdot-path": ("ghost", "../../../elsewhere"),
    }[attack]
    with (proj / ".gitmodules").open("a") as f:
        f.write(f'[submodule "{name}"]\n\tpath = {path}\n\turl = ./nowhere\n')
    git(proj, "add", ".gitmodules")
    git(proj, "commit", "-q", "-m", "proj: add sub")
    git(proj, "tag", "v1")
    work = base / "work"
    work.mkdir()
    (work / "rocm-build.toml").write_text(
        f'patchset = "t"\ndefault_projects = ["proj"]\n'
        f"[checkout]\nretries = 1\nretry_delay = 0.0\n"
        f'[projects.proj]\norigin = "{proj.as_uri()}"\nref = "v1"\n'
        f'hipify = ["{{python}}", "-c", "pass"]\n'
    )
    return Project(base, work), elsewhere


def _refused(res: subprocess.CompletedProcess[str], elsewhere: Path) -> None:
    rc, err = res.returncode, res.stderr
    assert (elsewhere / "victim").read_bytes() == BAIT, err
    assert rc == 15, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert "git refuses" in lines[-1], err
    assert "Traceback" not in err


@pytest.mark.parametrize("attack", ["dotdot-name", "absolute-name", "dotdot-path"])
@pytest.mark.parametrize("hipify", [True, False])
def test_crafted_gitmodules_never_deletes_outside_the_checkout(
    tmp_path: Path, attack: str, hipify: bool
) -> None:
    p, elsewhere = _hostile_project(tmp_path / "resumed", attack)
    args = ("checkout",) if hipify else ("checkout", "--no-hipify")
    # A run killed after its submodule update (git made .git/modules, through which a '..'
    # name leads out), then the advised re-run (the resume). Refused before the kill point now.
    killed = p.rb(*args, check=False, RB_FAULT_POINT="checkout.before-tag@1")
    assert killed.returncode in (-9, 15), killed.stderr
    _refused(p.rb(*args, check=False), elsewhere)
    assert (p.src / ".git").is_dir()  # the checkout itself is left for the user to look at
    # git ignores the entry, so an uninterrupted run would look clean: refused at once.
    p, elsewhere = _hostile_project(tmp_path / "plain", attack)
    _refused(p.rb(*args, check=False), elsewhere)
