"""A checkout journal gives a run authority over its own unfinished work only, proven by content.

A killed checkout leaves a journal; the user may then edit the checkout, commit in it, or find a
journal that is stale, hand-made or damaged. The next run may discard only what the interrupted
step itself wrote (the content of a tree rocm-build made or would make), never the user's edits or
commits, and its advice must work when followed (these tests follow it).
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from .sources_fixture import Project, checkout_state, commit_files, git, make_project, strays

pytestmark = pytest.mark.slow

JOURNAL = Path("src") / ".rocm-build-journal" / "proj.json"


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, Path, dict[str, object]]:
    base = tmp_path_factory.mktemp("stale")
    p = make_project(base)
    shutil.copytree(p.work, base / "initial", symlinks=True)
    p.rb("checkout")
    reference = checkout_state(p)
    return p, base / "initial", reference


@pytest.fixture
def project(made: tuple[Project, Path, dict[str, object]]) -> Project:
    p, initial, _ = made
    shutil.rmtree(p.work)
    shutil.copytree(initial, p.work, symlinks=True)
    return p


def _kill_at(p: Project, point: str) -> None:
    killed = p.rb("checkout", check=False, RB_FAULT_POINT=point)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert (p.work / JOURNAL).is_file()


def _one_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


@pytest.mark.parametrize("point", ["checkout.after-hipify", "checkout.before-hipify"])
def test_edits_after_a_kill_in_hipify_are_kept_and_the_advice_works(
    project: Project, made: tuple[Project, Path, dict[str, object]], point: str
) -> None:
    reference = made[2]
    _kill_at(project, point)
    # The user works in the checkout the killed run left: edits a tracked file, adds one.
    readme = project.src / "README.md"
    readme.write_text("my own edit\n")
    (project.src / "NOTES.txt").write_text("my notes\n")
    (project.src / "sub" / "mine.c").write_text("int mine;\n")

    again = project.rb("checkout", check=False)
    assert again.returncode == 6, again.stderr
    line = _one_line(again.stderr)
    assert "README.md" in line, line
    assert "stash" in line, line
    assert readme.read_text() == "my own edit\n"
    assert (project.src / "NOTES.txt").read_text() == "my notes\n"
    assert (project.src / "sub" / "mine.c").read_text() == "int mine;\n"
    # What hipify wrote before the kill is proven its own and set aside; the user's is not.
    status = git(project.src, "status", "--porcelain", "--ignore-submodules=all")
    assert sorted(line.split()[-1] for line in status.splitlines()) == [
        "NOTES.txt",
        "README.md",
    ], status

    # Follow the advice: stash, finish the checkout, take the changes back.
    for repo in (project.src, project.src / "sub"):
        git(repo, "stash", "push", "-u", "-q")
    done = project.rb("checkout", check=False)
    assert done.returncode == 0, done.stderr
    assert checkout_state(project) == reference
    assert strays(project) == []
    for repo in (project.src, project.src / "sub"):
        git(repo, "stash", "pop", "-q")
    assert readme.read_text() == "my own edit\n"
    assert (project.src / "NOTES.txt").read_text() == "my notes\n"
    assert (project.src / "sub" / "mine.c").read_text() == "int mine;\n"


def test_a_kill_in_hipify_without_user_changes_still_resumes(
    project: Project, made: tuple[Project, Path, dict[str, object]]
) -> None:
    _kill_at(project, "checkout.after-hipify")
    again = project.rb("checkout", check=False)
    assert again.returncode == 0, again.stderr
    assert checkout_state(project) == made[2]
    assert strays(project) == []


def _hand_made_journal(p: Project, step: str) -> None:
    heads = {".": git(p.src, "rev-parse", "HEAD"), "sub": git(p.src / "sub", "rev-parse", "HEAD")}
    data = {
        "format": 1,
        "project": "proj",
        "created": False,
        "target": heads["."],
        "pid": 1,
        "steps": [{"step": "begin", "heads": heads}, {"step": step, "heads": heads}],
    }
    (p.work / JOURNAL).parent.mkdir(parents=True, exist_ok=True)
    (p.work / JOURNAL).write_text(json.dumps(data))


@pytest.mark.parametrize("step", ["hipify", "checkout", "base-patches"])
def test_a_hand_made_journal_naming_the_users_head_loses_nothing(
    project: Project, made: tuple[Project, Path, dict[str, object]], step: str
) -> None:
    project.rb("checkout")
    commit_files(project.src, {"src/mine.c": "int mine;\n"}, "my own work")
    mine = git(project.src, "rev-parse", "HEAD")
    (project.src / "README.md").write_text("edited\n")
    _hand_made_journal(project, step)

    again = project.rb("checkout", check=False)
    assert again.returncode == 6, again.stderr
    line = _one_line(again.stderr)
    assert git(project.src, "rev-parse", "HEAD") == mine
    assert (project.src / "README.md").read_text() == "edited\n"
    assert "save-patches" not in line, line  # it would only say: run checkout first
    assert "branch" in line, line

    # Follow the advice: keep the commit on a branch, finish with --force.
    (project.src / "README.md").write_text("proj, patched\n")
    git(project.src, "branch", "my-work")
    forced = project.rb("checkout", "--force", check=False)
    assert forced.returncode == 0, forced.stderr
    assert checkout_state(project) == made[2]
    assert git(project.src, "rev-parse", "my-work") == mine


def test_save_patches_after_a_kill_points_to_a_checkout_that_finishes(project: Project) -> None:
    _kill_at(project, "checkout.after-hipify")
    saved = project.rb("save-patches", check=False)
    assert saved.returncode != 0
    assert "rocm-build checkout proj" in _one_line(saved.stderr)
    assert project.rb("checkout", check=False).returncode == 0
    assert project.rb("save-patches", check=False).returncode == 0


@pytest.mark.parametrize(
    "data",
    [
        {"format": 1, "steps": "x"},
        {"format": 1, "steps": [1, 2]},
        {"format": 1, "steps": [{"step": "hipify", "heads": ["a"]}]},
        {"format": 1, "steps": [{"step": 3, "heads": {}}]},
        {"format": 1, "steps": [{"step": "fetch", "heads": {".": 5}}], "target": "x"},
        {"format": 1, "steps": [], "created": "yes", "target": 7},
        ["format", 1],
    ],
)
def test_a_journal_of_the_wrong_types_is_one_line(project: Project, data: object) -> None:
    _kill_at(project, "checkout.after-hipify")
    (project.work / JOURNAL).write_text(json.dumps(data))
    for command in ("checkout", "save-patches"):
        res = project.rb(command, check=False)
        assert res.returncode == 6, res.stderr
        assert "journal" in _one_line(res.stderr)


def test_a_kill_while_hipify_is_checked_leaves_nothing_behind(project: Project) -> None:
    _kill_at(project, "checkout.after-hipify")
    (project.src / "README.md").write_text("my own edit\n")
    killed = project.rb("checkout", check=False, RB_FAULT_POINT="checkout.hipify-check")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    scratch = ".rocm-build-hipify-check-proj-"
    assert any(f.name.startswith(scratch) for f in project.src.parent.iterdir())
    again = project.rb("checkout", check=False)
    assert again.returncode == 6, again.stderr
    assert (project.src / "README.md").read_text() == "my own edit\n"
    assert not any(f.name.startswith(scratch) for f in project.src.parent.iterdir())
