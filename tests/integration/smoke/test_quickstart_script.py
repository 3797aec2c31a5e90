"""dev/quickstart: its scripts stay shellcheck-clean (shellcheck comes from
dev/apt-packages-test.txt), and a re-run keeps the user's work: the work folder's preparation
(dev/quickstart-prepare) never removes or rewrites what is there, and the checkout it builds from
is not moved off the user's commits."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import GIT_IDENTITY, REPO, CliRunner

EXAMPLE_PATCHES = REPO / "examples" / "vecadd" / "patches"


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
@pytest.mark.parametrize("script", ["quickstart", "quickstart-prepare"])
def test_quickstart_scripts_are_shellcheck_clean(script: str) -> None:
    result = subprocess.run(
        ["shellcheck", REPO / "dev" / script], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


def _prepare(work: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(REPO / "dev" / "quickstart-prepare"), str(work)],
        env={**os.environ, **GIT_IDENTITY},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        env={**os.environ, **GIT_IDENTITY},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_rerun_keeps_saved_patches_commits_and_settings(
    tmp_path: Path, run_cli: CliRunner, hipify_path: Path
) -> None:
    work = tmp_path / "work"
    upstream = work / "upstream" / "vecadd"
    first = _prepare(work)
    assert first.returncode == 0, first.stderr
    assert _files(work / "patches") == _files(EXAMPLE_PATCHES)
    upstream_head = _git(upstream, "rev-parse", "HEAD")

    def checkout() -> subprocess.CompletedProcess[str]:
        args = ["checkout", "--origin", f"vecadd=file://{upstream}"]
        return run_cli(args, cwd=work, env={"TORCH_HIPIFY_PATH": str(hipify_path)})

    done = checkout()
    assert done.returncode == 0, done.stderr
    # The user's work: a commit in the checkout, a setting, a file in the upstream repository.
    src = work / "src" / "vecadd"
    with (src / "setup.py").open("a") as f:
        f.write("# my change\n")
    _git(src, "commit", "-qam", "my change")
    mine = _git(src, "rev-parse", "HEAD")
    with (work / "rocm-build.toml").open("a") as f:
        f.write("# my setting\n")
    settings = (work / "rocm-build.toml").read_bytes()
    (upstream / "my-notes.txt").write_text("notes\n")

    refused = checkout()  # a checkout with the user's commit is not moved off it
    assert refused.returncode == 6, refused.stderr
    assert "save-patches vecadd" in refused.stderr
    assert _git(src, "rev-parse", "HEAD") == mine
    saved = run_cli(["save-patches", "vecadd"], cwd=work)
    assert saved.returncode == 0, saved.stderr
    patches = _files(work / "patches")
    assert any(name.endswith("my-change.patch") for name in patches)

    again = _prepare(work)
    assert again.returncode == 0, again.stderr
    assert _files(work / "patches") == patches
    assert (work / "rocm-build.toml").read_bytes() == settings
    assert (upstream / "my-notes.txt").is_file()  # not made again
    assert _git(upstream, "rev-parse", "HEAD") == upstream_head
    assert "kept your patches" in again.stdout
    assert f"kept your {work / 'rocm-build.toml'}" in again.stdout
    assert not list((work / "upstream").glob(".new.*"))  # its temporary folder is gone

    rerun = checkout()  # the saved series reproduces the user's commit: nothing to do
    assert rerun.returncode == 0, rerun.stderr
    assert _git(src, "rev-parse", "HEAD") == mine
    assert "# my change" in (src / "setup.py").read_text()


def test_upstream_with_the_users_commits_is_kept(tmp_path: Path) -> None:
    work = tmp_path / "work"
    upstream = work / "upstream" / "vecadd"
    assert _prepare(work).returncode == 0
    (upstream / "NEWS").write_text("1.1\n")
    _git(upstream, "add", "NEWS")
    _git(upstream, "commit", "-qm", "1.1")
    head = _git(upstream, "rev-parse", "HEAD")
    again = _prepare(work)
    assert again.returncode == 0, again.stderr
    assert _git(upstream, "rev-parse", "HEAD") == head
    assert f"kept {upstream}" in again.stdout
    assert again.stdout.count("\n") == 1  # one line, and no other (patches, settings unchanged)


def test_a_folder_in_the_upstream_place_stops_it(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "upstream" / "vecadd").mkdir(parents=True)
    (work / "upstream" / "vecadd" / "mine.txt").write_text("mine\n")
    done = _prepare(work)
    assert done.returncode == 1
    assert "is not a git repository with commits; move it away" in done.stderr
    assert (work / "upstream" / "vecadd" / "mine.txt").read_text() == "mine\n"
    assert not (work / "patches").exists()  # it stops before making anything else


@pytest.mark.slow
def test_the_try_it_line_says_what_its_result_means(
    run_cli, vecadd_wheel: Path, rocm_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The quick start's last line, run as printed on the real fat wheel (no GPU here): its
    output says that 100 is hipErrorNoDevice, no GPU, as expected, not a bare (100, 0)."""
    out = tmp_path / "wheels"
    res = run_cli(
        ["bundle", str(vecadd_wheel), "--rocm", str(rocm_tree), "--output-dir", str(out)],
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    (fat,) = out.glob("*.whl")
    script = (REPO / "dev" / "quickstart").read_text()
    (line,) = [ln for ln in script.splitlines() if ln.startswith('echo "try it:')]
    printed = subprocess.run(
        ["bash", "-c", f"fat={shlex.quote(str(fat))}\n{line}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    command = printed.split("try it:", 1)[1].strip()
    venv = str(tmp_path / "v")
    command = command.replace("/tmp/v", venv).replace("pip install", "pip install -q --no-index")
    ran = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    assert "hipErrorNoDevice (100): no GPU on this machine, as expected" in ran.stdout, ran.stdout
