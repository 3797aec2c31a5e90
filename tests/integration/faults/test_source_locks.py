"""Two real runs on one checkout or patch folder: the second waits, saying for what, or with
--no-wait stops at once with exit 13; never an interleaving, never a traceback."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rocm_build.common import locks

from .sources_fixture import (
    Gate,
    Project,
    checkout_state,
    commit_files,
    make_project,
    read_until,
    tree_bytes,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return make_project(tmp_path_factory.mktemp("locks"))


def test_second_checkout_waits_or_stops_with_no_wait(project: Project) -> None:
    shutil.rmtree(project.work / "src", ignore_errors=True)
    # The first run holds the checkout until the test lets its hipify step go on.
    gate = Gate(project.base / "gate")
    first = project.popen("checkout", **gate.env())
    second: subprocess.Popen[str] | None = None
    try:
        gate.wait_started(first)
        stopped = project.rb("--no-wait", "checkout", check=False)
        assert stopped.returncode == 13, stopped.stderr
        assert f"the checkout {project.src} is in use by rocm-build pid {first.pid}" in (
            stopped.stderr
        )
        assert "Traceback" not in stopped.stderr
        # Also as a setting (environment), as the README says.
        env_stopped = project.rb("checkout", check=False, ROCM_BUILD_NO_WAIT="1")
        assert env_stopped.returncode == 13, env_stopped.stderr

        second = project.popen("checkout")
        read_until(second, f"waiting for the checkout {project.src}")
        gate.open()
        _, err2 = second.communicate(timeout=120)
        assert second.returncode == 0, err2
        _, err1 = first.communicate(timeout=60)
        assert first.returncode == 0, err1
    finally:
        gate.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
            if proc is not None:
                proc.communicate()
    # The second found the first's finished work: nothing redone, nothing interleaved.
    state = checkout_state(project)
    assert project.rb("checkout").returncode == 0
    assert checkout_state(project) == state


def test_two_save_patches_at_once_never_traceback(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.rmtree(project.work / "src", ignore_errors=True)
    project.rb("checkout")
    commit_files(project.src, {"NOTES": "notes\n"}, "hipified: notes")
    # Another run (this test process) holds the patch folder.
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(project.base / "run"))
    with locks.hold(project.series, "the patch folder"):
        stopped = project.rb("--no-wait", "save-patches", check=False)
        assert stopped.returncode == 13, stopped.stderr
        assert f"the patch folder {project.series} is in use by rocm-build pid" in stopped.stderr
        waiting = project.popen("save-patches")
        read_until(waiting, f"waiting for the patch folder {project.series}")
        assert waiting.poll() is None  # it waits
    _, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    for _ in range(3):
        runs = [project.popen("save-patches") for _ in range(2)]
        results = [(r.communicate(timeout=120), r.returncode) for r in runs]
        for (_out, err), code in results:
            assert code == 0, err
            assert "Traceback" not in err
    saved = tree_bytes(project.series)
    assert any(name.endswith("-hipified-notes.patch") for name in saved)
    assert [p.name for p in project.series.parent.iterdir() if p.name.startswith(".")] == []
    # The saved series is the checkout: a checkout is up to date.
    again = project.rb("checkout")
    assert "up to date" in again.stdout or again.stdout == ""
