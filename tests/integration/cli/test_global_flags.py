"""Global flags work after the command name too, and checkout's fetch jobs have their own flag."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import CliRunner
from tests.support.clierrors import one_line_error
from tests.support.wheels import tiny_wheel


def test_json_after_the_command_name(run_cli: CliRunner, tmp_path: Path) -> None:
    wheel = tiny_wheel(tmp_path)
    before = run_cli(["--json", "inspect", str(wheel)], cwd=tmp_path, check=True)
    after = run_cli(["inspect", str(wheel), "--json"], cwd=tmp_path, check=True)
    assert json.loads(after.stdout) == json.loads(before.stdout)


def test_quiet_verbose_and_config_after_the_command_name(
    run_cli: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "other.toml").write_text("[checkout]\ndepth = 7\n")
    quiet = run_cli(["config", "-q"], cwd=tmp_path, check=True)
    assert "  checkout.retries = 3  (default)" in quiet.stdout.splitlines(), quiet.stdout
    shown = run_cli(["config", "--config", "other.toml", "--json"], cwd=tmp_path, check=True)
    assert json.loads(shown.stdout)["settings"]["checkout.depth"] == 7
    # -v after the command shows every setting (stderr) before the command's own error.
    loud = run_cli(["checkout", "nosuch", "-v"], cwd=tmp_path)
    assert loud.returncode == 2
    assert "checkout.retries = 3  (default)" in loud.stderr, loud.stderr
    silent = run_cli(["checkout", "nosuch", "-q"], cwd=tmp_path)
    assert "settings" not in silent.stderr
    assert "unknown project 'nosuch'" in one_line_error(silent.stderr)


def test_fetch_jobs_and_the_hidden_old_spelling(run_cli: CliRunner, tmp_path: Path) -> None:
    new = run_cli(["checkout", "nosuch", "--fetch-jobs", "3"], cwd=tmp_path)
    assert "checkout.jobs = 3  (flag)" in new.stderr, new.stderr
    old = run_cli(["checkout", "nosuch", "--jobs", "4"], cwd=tmp_path)
    assert "checkout.jobs = 4  (flag)" in old.stderr, old.stderr
    # build's -j/--jobs is compile jobs: the old spelling says what it is now
    said = "warning: checkout --jobs is the old spelling of --fetch-jobs"
    assert said in old.stderr
    assert said not in new.stderr
    bad = run_cli(["checkout", "--fetch-jobs", "0"], cwd=tmp_path)
    assert bad.returncode == 2
    assert "flag --fetch-jobs: 'checkout.jobs' must be int (>= 1)" in one_line_error(bad.stderr)
    shown = run_cli(["checkout", "--help"], cwd=tmp_path, check=True).stdout
    assert "--fetch-jobs" in shown
    assert "--jobs" not in shown.replace("--fetch-jobs", "")


def test_debug_traceback_after_the_command_name(run_cli: CliRunner, tmp_path: Path) -> None:
    plain = run_cli(["checkout", "nosuch"], cwd=tmp_path)
    assert "Traceback" not in plain.stderr
    traced = run_cli(["checkout", "nosuch", "--debug-traceback"], cwd=tmp_path)
    assert traced.returncode == 2
    assert "Traceback" in traced.stderr
    assert "rocm-build: error: unknown project 'nosuch'" in traced.stderr
