"""A bad setting stops a command before it does any work, with the same one-line error (exit 2)
whether the value comes from rocm-build.toml, the environment or a flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import CliRunner
from tests.integration.bundle.helpers import make_wheel


def _error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("rocm-build: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


@pytest.fixture
def wheel(tmp_path: Path) -> Path:
    return make_wheel(tmp_path / "in", "pkg", "1.0", {"pkg/__init__.py": b"x = 1\n"})


def _nothing_written(cwd: Path) -> None:
    assert sorted(p.name for p in cwd.iterdir()) == ["rocm-build.toml"]


def test_bundle_stops_on_a_bad_file_value_before_any_work(
    run_cli: CliRunner, tmp_path: Path, rocm_tree: Path, wheel: Path
) -> None:
    cwd = tmp_path / "ws"
    cwd.mkdir()
    (cwd / "rocm-build.toml").write_text("[bundle]\ncompression_level = 42\n")
    result = run_cli(["bundle", str(wheel), "--rocm", str(rocm_tree)], cwd=cwd)
    assert result.returncode == 2, result.stdout + result.stderr
    line = _error_line(result.stderr)
    assert "rocm-build.toml: 'bundle.compression_level' must be int (0 to 9), got 42" in line
    _nothing_written(cwd)


def test_build_stops_on_a_bad_file_value_before_any_work(
    run_cli: CliRunner, tmp_path: Path, rocm_tree: Path
) -> None:
    cwd = tmp_path / "ws"
    (cwd / "src" / "torch").mkdir(parents=True)
    (cwd / "rocm-build.toml").write_text("jobs = -4\n")
    result = run_cli(["build", "torch", "--rocm", str(rocm_tree), "--arch", "gfx90a"], cwd=cwd)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "rocm-build.toml: 'jobs' must be int (>= 0), got -4" in _error_line(result.stderr)
    assert sorted(p.name for p in cwd.iterdir()) == ["rocm-build.toml", "src"]


@pytest.mark.parametrize(
    ("env", "args", "expected"),
    [
        (
            {"ROCM_BUILD_BUNDLE_COMPRESSION_LEVEL": "42"},
            [],
            "environment variable ROCM_BUILD_BUNDLE_COMPRESSION_LEVEL: "
            "'bundle.compression_level' must be int (0 to 9), got '42'",
        ),
        (
            {},
            ["-z", "42"],
            "flag --compression-level: 'bundle.compression_level' must be int (0 to 9), got '42'",
        ),
        (
            {},
            ["--platform", "macos"],
            "flag --platform: 'bundle.platform' must be one of auto, linux, windows, got 'macos'",
        ),
    ],
)
def test_environment_and_flag_values_get_the_same_error(
    run_cli: CliRunner,
    tmp_path: Path,
    wheel: Path,
    env: dict[str, str],
    args: list[str],
    expected: str,
) -> None:
    cwd = tmp_path / "ws"
    cwd.mkdir()
    (cwd / "rocm-build.toml").write_text("")
    result = run_cli(["bundle", str(wheel), *args], cwd=cwd, env=env)
    assert result.returncode == 2, result.stdout + result.stderr
    assert expected in _error_line(result.stderr)
    _nothing_written(cwd)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["checkout", "--jobs", "0"], "flag --jobs: 'checkout.jobs' must be int (>= 1), got '0'"),
        (["checkout", "--depth", "-1"], "flag --depth: 'checkout.depth' must be int (>= 0)"),
        (["build", "-j", "-4"], "flag --jobs: 'jobs' must be int (>= 0), got '-4'"),
        (["build", "--cache", "redis"], "flag --cache: 'build.cache' must be one of auto, ccache"),
        (["all", "--jobs", "x"], "flag --jobs: 'jobs' must be int (>= 0), got 'x'"),
    ],
)
def test_flags_use_the_settings_constraints(
    run_cli: CliRunner, tmp_path: Path, args: list[str], expected: str
) -> None:
    result = run_cli(args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    assert expected in _error_line(result.stderr)
    assert list(tmp_path.iterdir()) == []


def test_build_jobs_zero_means_automatic_as_in_the_file(
    run_cli: CliRunner, tmp_path: Path, rocm_tree: Path
) -> None:
    # 0 is the default ("from cores and memory"): the flag takes what the file takes, so the run
    # gets past the settings (to the next problem: this tree cannot build the real torch).
    args = ["build", "torch", "-j", "0", "--rocm", str(rocm_tree), "--arch", "gfx90a"]
    result = run_cli(args, cwd=tmp_path)
    assert "jobs = 0  (flag)" in result.stderr
    assert "'jobs' must be" not in result.stderr
    assert "-j, --jobs N" in run_cli(["build", "--help"], cwd=tmp_path, check=True).stdout
    assert "[0-9]" in run_cli(["bundle", "--help"], cwd=tmp_path, check=True).stdout
