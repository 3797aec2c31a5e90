"""git's version and whether it can repair a killed checkout's object store (`git fetch
--refetch`, git 2.36): parsed from `git --version` as each platform's git prints it, decided
without an old git binary; doctor says it on a line of its own."""

from __future__ import annotations

import pytest

from rocm_build.commands import doctor
from rocm_build.repo import git


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("git version 2.39.5\n", (2, 39, 5)),
        ("git version 2.39.3 (Apple Git-146)", (2, 39, 3)),
        ("git version 2.45.1.windows.1", (2, 45, 1)),
        ("git version 2.36.0.rc1", (2, 36, 0)),
        ("git version 2.35", (2, 35, 0)),
        ("git version 3.0.0", (3, 0, 0)),
        ("", None),
        ("hub version 2.14.2", None),
        ("git: command not found", None),
    ],
)
def test_parse_version(text: str, want: tuple[int, int, int] | None) -> None:
    assert git.parse_version(text) == want


def test_refetch_needs_git_2_36() -> None:
    assert git.REFETCH_VERSION == (2, 36)
    assert git.refetch_problem((2, 36, 0)) == ""
    assert git.refetch_problem((2, 43, 0)) == ""
    assert git.refetch_problem((3, 0, 0)) == ""
    # An unknown version is left to git: it names what it lacks itself.
    assert git.refetch_problem(None) == ""
    problem = git.refetch_problem((2, 35, 9))
    assert problem == (
        "git 2.35.9 is older than 2.36, which `git fetch --refetch` needs: "
        "install git 2.36 or newer"
    )
    assert "\n" not in problem
    assert git.refetch_problem((1, 99, 0)).startswith("git 1.99.0 is older than 2.36")


def test_doctor_says_whether_git_can_repair_a_killed_checkout() -> None:
    old = doctor._resume_repair("git version 2.34.1")
    assert old is not None
    assert old["ok"] is False
    assert old["needs"] == "2.36"
    assert old["text"].startswith("too old: a killed checkout's damaged object store cannot")
    assert "install git 2.36 or newer" in old["text"]
    new = doctor._resume_repair("git version 2.39.5")
    assert new is not None
    assert new["ok"] is True
    assert new["text"].startswith("ok")
    assert doctor._resume_repair(None) is None  # no git: the git row already blocks


def test_doctor_rows_put_the_repair_line_under_git_as_a_note_when_too_old() -> None:
    report = {
        "python": "3.12.0",
        "tools": {"git": {"path": "/usr/bin/git", "version": "git version 2.34.1"}},
        "git_resume_repair": doctor._resume_repair("git version 2.34.1"),
        "gpus": [],
        "blockers": [],
        "machine": {
            "cores": 2,
            "memory_available_gib": 4.0,
            "disk_free_gib": 100.0,
            "suggested_jobs": {},
        },
    }
    rows = doctor._rows(report, 100 << 30)
    labels = [r.label for r in rows]
    assert labels[1:3] == ["git", "git resume repair"]
    assert rows[2].good is None  # a note: a checkout works, only its repair after a kill does not


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("third_party/pybind11", False),
        ("a..b", False),
        ("..foo/bar", False),
        ("", True),
        ("..", True),
        ("../../x", True),
        ("a/../b", True),
        ("a\\..\\b", True),
        ("a/..", True),
        ("/etc", True),
        ("\\x", True),
        ("a\nb", True),
    ],
)
def test_submodule_names_git_refuses(name: str, bad: bool) -> None:
    # git's check_submodule_name ('..' components, '/' and '\' separators), and absolute names.
    assert bool(git.submodule_name_problem(name)) is bad


@pytest.mark.parametrize(
    ("path", "bad"),
    [
        ("libs/sub1", False),
        ("third_party/x.y", False),
        ("", True),
        ("/abs", True),
        ("../up", True),
        ("a/./b", True),
        ("a//b", True),
        ("a/", True),
        ("x/.GIT", True),
    ],
)
def test_submodule_paths_outside_the_work_tree(path: str, bad: bool) -> None:
    assert bool(git.submodule_path_problem(path)) is bad
