"""Config files and names that are not what they claim: one line and exit 2, never a traceback,
never a wait on a FIFO, never a folder named after a path."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import CliRunner
from tests.support.clierrors import one_line_error


def test_deeply_nested_config_is_one_line(run_cli: CliRunner, tmp_path: Path) -> None:
    """tomllib recurses per level: 10,000 nested arrays or inline tables are exit 2, not 70."""
    for name, text in (
        ("arrays", "a = " + "[" * 10_000 + "]" * 10_000 + "\n"),
        ("tables", "a = " + "{b = " * 10_000 + "1" + "}" * 10_000 + "\n"),
    ):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "rocm-build.toml").write_text(text, encoding="utf-8")
        result = run_cli(["config"], cwd=folder)
        assert result.returncode == 2, result.stderr
        line = one_line_error(result.stderr)
        assert "rocm-build.toml" in line
        assert "nested too deeply" in line


def test_config_that_is_no_regular_file_is_named(run_cli: CliRunner, tmp_path: Path) -> None:
    """``--config /dev/zero`` or a FIFO (nobody writes to it: the run must not wait) is refused
    as what it is, not called missing; a huge file is refused by its size."""
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.toml"
    with huge.open("wb") as file:
        file.truncate(64 << 20)
    for given, kind in (
        ("/dev/zero", "is a device"),
        (str(fifo), "is a FIFO"),
        (str(huge), "larger than"),
    ):
        result = run_cli(["--config", given, "config"], cwd=tmp_path, timeout=60)
        assert result.returncode == 2, result.stderr
        line = one_line_error(result.stderr)
        assert kind in line, line
        assert "does not exist" not in line
    missing = run_cli(["--config", "nothing.toml", "config"], cwd=tmp_path)
    assert missing.returncode == 2
    assert "does not exist" in one_line_error(missing.stderr)


def test_names_that_become_folders_are_plain(run_cli: CliRunner, tmp_path: Path) -> None:
    """A project, release train or patch series name becomes a folder name: one that is a path
    (``../../evil``, ``a/b``, leading '.') is refused at config time, with nothing created."""
    cases = {
        "project": '[projects."../../evil"]\norigin = "file:///nowhere.git"\n',
        "train": '[trains."../up"]\ntorch = "v1"\n',
        "patches": '[projects.mine]\norigin = "file:///nowhere.git"\npatches = "../x"\n',
    }
    for name, text in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "rocm-build.toml").write_text(text, encoding="utf-8")
        result = run_cli(["config"], cwd=folder)
        assert result.returncode == 2, result.stderr
        assert "must be a plain name" in one_line_error(result.stderr)
    work = tmp_path / "work"
    work.mkdir()
    for args in (
        ["checkout", "--patchset", "../x", "torch"],
        ["checkout", "--patchset", ".hidden", "torch"],
        ["save-patches", "--patchset", "a/b", "torch"],
        ["checkout", "--train", "../x", "torch"],
    ):
        result = run_cli(args, cwd=work)
        assert result.returncode == 2, (args, result.stderr)
        assert "must be a plain name" in one_line_error(result.stderr), args
    assert not any(work.iterdir())
    ok = run_cli(["config"], cwd=work, env={"ROCM_BUILD_PATCHSET": "my-fix_2.9"}, check=True)
    assert "  patchset = 'my-fix_2.9'  (environment)" in ok.stdout.splitlines(), ok.stdout
