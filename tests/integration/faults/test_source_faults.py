"""SIGKILL `checkout`, `save-patches` and `all` at every named fault point (and at a few random
instants), then run the same command again: it must finish the job without --force and give
exactly what an uninterrupted run gives. At every instant the patch folder is the old series or
the new one, byte for byte, and the next run leaves no temporary file behind."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .sources_fixture import (
    Project,
    checkout_state,
    commit_files,
    env_for,
    fault_points,
    git,
    kill_after,
    make_project,
    strays,
    tree_bytes,
)

pytestmark = pytest.mark.slow

SEED = 20240610
RANDOM_KILLS = 3
# A checkout over an existing one: the steps that differ from a first checkout.
UPDATE_POINTS = (
    "checkout.before-checkout",
    "checkout.after-checkout",
    "checkout.before-submodules",
    "checkout.patch-applied@1",
    "git.",
)


def _restore(p: Project, pristine: Path) -> None:
    shutil.rmtree(p.work)
    shutil.copytree(pristine, p.work, symlinks=True)


def _suite(
    p: Project,
    pristine: Path,
    args: tuple[str, ...],
    *,
    expect_rc: int = 0,
    pick: Callable[[list[str]], list[str]] = lambda points: points,
    min_points: int = 20,
    random_kills: int = RANDOM_KILLS,
    env: dict[str, str] | None = None,
) -> list[str]:
    """Kill ``rocm-build ARGS`` at each point ``pick`` keeps of those an uninterrupted run
    reaches (at least ``min_points`` are reached), re-run, compare. Returns the points tried."""
    env = env or {}
    log = p.base / "points.log"
    log.unlink(missing_ok=True)
    _restore(p, pristine)
    old_patches = tree_bytes(p.series)
    start = time.monotonic()
    ref_run = p.rb(*args, check=False, RB_FAULT_LOG=str(log), **env)
    ref_seconds = time.monotonic() - start
    assert ref_run.returncode == expect_rc, ref_run.stderr
    reference = checkout_state(p)
    assert strays(p) == []
    new_patches = reference["patches"]
    reached = fault_points(log)
    assert len(reached) >= min_points, reached
    points = pick(reached)

    def check_resumed(what: str) -> None:
        patches = tree_bytes(p.series)
        # The two-rename fallback has one gap, and only with its intent recorded: every
        # reader (checkout, save-patches) completes the swap before it looks.
        gap = not p.series.exists() and (p.series.parent / ".proj.swap.json").is_file()
        assert patches in (old_patches, new_patches) or gap, f"{what}: patch folder is neither"
        again = p.rb(*args, check=False, **env)
        assert again.returncode == expect_rc, (
            f"{what}: re-run exited {again.returncode}\n{again.stderr}"
        )
        assert "Traceback" not in again.stderr, again.stderr
        assert checkout_state(p) == reference, f"{what}: re-run differs from an uninterrupted run"
        assert strays(p) == [], what

    for point in points:
        _restore(p, pristine)
        killed = p.rb(*args, check=False, RB_FAULT_POINT=point, **env)
        assert killed.returncode == -signal.SIGKILL, f"{point} not reached: {killed.stderr}"
        check_resumed(point)

    rng = random.Random(SEED)
    for _ in range(random_kills):
        _restore(p, pristine)
        delay = rng.uniform(0.3, max(0.4, ref_seconds))
        kill_after(p.popen(*args, **env), delay)
        check_resumed(f"random kill after {delay:.2f}s")
    return points


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Project, Path]:
    base = tmp_path_factory.mktemp("faults")
    p = make_project(base)
    shutil.copytree(p.work, base / "initial", symlinks=True)
    return p, base / "initial"


@pytest.fixture
def project(made: tuple[Project, Path]) -> Project:
    """The project with its saved series and no checkout, whatever earlier tests did."""
    p, initial = made
    _restore(p, initial)
    return p


def test_checkout_resumes_after_a_kill_at_every_point(project: Project, tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    shutil.copytree(project.work, pristine, symlinks=True)
    points = _suite(project, pristine, ("checkout",))
    for name in ("checkout.before-fetch", "checkout.before-hipify", "checkout.patch-applied@2"):
        assert any(pt.startswith(name) for pt in points), name


def test_checkout_over_an_existing_checkout_resumes(project: Project, tmp_path: Path) -> None:
    """A re-checkout that changes the series (update path: checkout -f over the old state)."""
    project.rb("checkout", "--no-patches")
    pristine = tmp_path / "pristine"
    shutil.copytree(project.work, pristine, symlinks=True)
    _suite(
        project,
        pristine,
        ("checkout",),
        # The steps that differ from a first checkout; the others are covered above.
        pick=lambda pts: [n for n in pts if n.startswith(UPDATE_POINTS)],
        random_kills=1,
    )


def _with_new_commits(project: Project, tmp_path: Path, name: str) -> Path:
    project.rb("checkout")
    commit_files(project.src, {"NOTES": "a new base change\n"}, "hipified: notes")
    commit_files(project.src / "sub", {"s.hip": "int s() { return hip() + 2; }\n"}, "hipified: two")
    pristine = tmp_path / name
    shutil.copytree(project.work, pristine, symlinks=True)
    return pristine


def test_save_patches_resumes_and_the_series_is_old_or_new(
    project: Project, tmp_path: Path
) -> None:
    pristine = _with_new_commits(project, tmp_path, "pristine")
    points = _suite(project, pristine, ("save-patches",))
    assert "save-patches.exchanged@1" in points


def test_save_patches_fallback_swap_is_completed_by_the_next_run(
    project: Project, tmp_path: Path
) -> None:
    """Where renameat2(RENAME_EXCHANGE) is missing: two renames, journaled."""
    pristine = _with_new_commits(project, tmp_path, "pristine")
    points = _suite(
        project,
        pristine,
        ("save-patches",),
        pick=lambda pts: [
            n
            for n in pts
            if n.startswith(("save-patches.staged", "save-patches.swap", "save-patches.half"))
        ],
        random_kills=1,
        env={"RB_FAULT_NO_EXCHANGE": "1"},
    )
    assert "save-patches.half-swapped@1" in points


def test_all_resumes_at_source_points_and_between_stages(project: Project, tmp_path: Path) -> None:
    """`all` with a ROCm folder that has no tree in it: checkout runs, build stops (exit 8),
    the same way each time; the source side must come out the same after any kill."""
    rocm = tmp_path / "rocm"
    rocm.mkdir()
    pristine = tmp_path / "pristine"
    shutil.copytree(project.work, pristine, symlinks=True)
    args = ("all", "--rocm", str(rocm), "--arch", "gfx90a", "--no-smoke")
    points: list[Any] = _suite(
        project,
        pristine,
        args,
        expect_rc=8,
        # Every point between stages; of the checkout stage's (all tried one by one by the
        # checkout test above) every third, to keep the suite short.
        pick=lambda pts: [n for i, n in enumerate(pts) if n.startswith("all.") or i % 3 == 0],
        random_kills=2,
    )
    assert "all.after-checkout@1" in points
    assert "all.before-build@1" in points


def _am_in_progress(repo: Path, patch: Path) -> None:
    """A real `git am` that stopped half way (the patch does not apply): .git/rebase-apply."""
    res = subprocess.run(
        ["git", "am", "--3way", str(patch)],
        cwd=repo,
        env=env_for(repo),
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode != 0
    gitdir = Path(git(repo, "rev-parse", "--absolute-git-dir"))
    assert (gitdir / "rebase-apply").is_dir()


def test_checkout_after_a_crash_inside_git_am(project: Project, tmp_path: Path) -> None:
    pristine = tmp_path / "pristine"
    shutil.copytree(project.work, pristine, symlinks=True)
    project.rb("checkout")
    reference = checkout_state(project)
    root_patch = next((project.series / "hipified").glob("*.patch"))
    for flags in ((), ("--force",)):
        # Killed in the middle of the sub's `git am`: an am in progress and a stale index.lock.
        _restore(project, pristine)
        killed = project.rb("checkout", check=False, RB_FAULT_POINT="checkout.patch-applied@2")
        assert killed.returncode == -signal.SIGKILL
        _am_in_progress(project.src / "sub", root_patch)
        (project.src / ".git" / "modules" / "sub" / "index.lock").write_bytes(b"")
        again = project.rb("checkout", *flags, check=False)
        assert again.returncode == 0, again.stderr
        assert checkout_state(project) == reference
        assert strays(project) == []

    # Without a journal the lock file may be a live git's: one line, exit 6, nothing removed.
    (project.src / ".git" / "index.lock").write_bytes(b"")
    _am_in_progress(project.src / "sub", root_patch)
    refused = project.rb("checkout", "--force", "--no-patches", check=False)
    assert refused.returncode == 6, refused.stderr
    assert "index.lock exists" in refused.stderr
    assert "Traceback" not in refused.stderr
    (project.src / ".git" / "index.lock").unlink()
    # --force discards the am in progress (local work the user asked to drop).
    forced = project.rb("checkout", "--force", "--no-patches", check=False)
    assert forced.returncode == 0, forced.stderr
    assert strays(project) == []
    project.rb("checkout")
    assert checkout_state(project) == reference
    assert strays(project) == []


def test_checkout_after_a_kill_inside_the_submodule_update(
    project: Project, tmp_path: Path
) -> None:
    """What a killed `git submodule update` leaves: a submodule whose git folder is missing,
    or one cloned without a commit checked out yet."""
    pristine = tmp_path / "pristine"
    shutil.copytree(project.work, pristine, symlinks=True)
    project.rb("checkout")
    reference = checkout_state(project)
    for half_clone in ("missing git folder", "no commit yet"):
        _restore(project, pristine)
        point = "checkout.before-submodules@1"
        assert project.rb("checkout", check=False, RB_FAULT_POINT=point).returncode == -9
        sub = project.src / "sub"
        sub.mkdir(exist_ok=True)
        (sub / ".git").write_text("gitdir: ../.git/modules/sub\n")
        if half_clone == "no commit yet":
            modules = project.src / ".git" / "modules" / "sub"
            modules.mkdir(parents=True)
            git(modules, "init", "-q")
        again = project.rb("checkout", check=False)
        assert again.returncode == 0, f"{half_clone}: {again.stderr}"
        assert checkout_state(project) == reference, half_clone


def test_checkout_killed_inside_git_init_resumes(project: Project) -> None:
    """A kill while ``git init`` writes the new repository (its ``.git`` has no HEAD yet): the
    re-run removes that husk (no commit can be in it, the work tree is empty) and checks out;
    found by the random kills above at 0.70 s."""
    killed = project.rb("checkout", check=False, RB_FAULT_POINT="checkout.journal-begun")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    husk = project.src / ".git"
    husk.mkdir(parents=True)
    (husk / "description").write_text("Unnamed repository\n")
    (husk / "hooks").mkdir()
    again = project.rb("checkout", check=False)
    assert again.returncode == 0, again.stderr
    assert (project.src / ".git" / "HEAD").is_file()
