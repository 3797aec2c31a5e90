"""`rocm-build matrix` as a user runs it: output formats, settings from files, errors."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import CliRunner


def test_json_by_default_and_github_on_request(run_cli: CliRunner, tmp_path: Path) -> None:
    args = ["matrix", "--python", "3.12", "--train", "2.9,2.10", "--arch-groups", "gfx94X",
            "--rocm", "https://dist.example/therock-{group}.tar.gz"]  # fmt: skip
    as_json = run_cli(args, cwd=tmp_path, check=True)
    data = json.loads(as_json.stdout)
    assert [j["name"] for j in data["include"]] == ["py3.12-2.9-gfx94X", "py3.12-2.10-gfx94X"]
    github = run_cli([*args, "--format", "github"], cwd=tmp_path, check=True)
    assert github.stdout.count("\n") == 1
    assert json.loads(github.stdout.removeprefix("matrix=")) == data
    # The settings in force go to stderr, so stdout stays machine-readable.
    assert "matrix.trains" in github.stderr


def test_settings_from_rocm_build_toml(run_cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "rocm-build.toml").write_text(
        '[matrix]\npythons = ["3.13"]\narch_groups = ["mi300=gfx942;gfx950"]\n'
        'rocm = "/srv/rocm/{group}"\n'
    )
    result = run_cli(["--json", "matrix"], cwd=tmp_path, check=True)
    (job,) = json.loads(result.stdout)["include"]
    assert (job["python"], job["arch"], job["rocm"]) == ("3.13", "gfx942;gfx950", "/srv/rocm/mi300")


def test_bad_group_exits_2_with_a_hint(run_cli: CliRunner, tmp_path: Path) -> None:
    result = run_cli(["matrix", "--arch-groups", "gfx110X,gfx9422"], cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown gfx target or family 'gfx9422'" in result.stderr
    assert "did you mean 'gfx942'" in result.stderr
    assert result.stdout == ""


def test_error_messages_keep_their_brackets(run_cli: CliRunner, tmp_path: Path) -> None:
    """Config errors quote sections such as [matrix]; they must not be eaten as markup."""
    (tmp_path / "rocm-build.toml").write_text("[matrix]\npythonz = []\n")
    result = run_cli(["matrix"], cwd=tmp_path)
    assert result.returncode == 2
    assert "[matrix]" in result.stderr
    assert "did you mean 'pythons'" in result.stderr


def test_no_tree_exits_2_saying_what_to_give(run_cli: CliRunner, tmp_path: Path) -> None:
    result = run_cli(["matrix", "--format", "github"], cwd=tmp_path)
    assert result.returncode == 2
    assert "the matrix names no ROCm tree" in result.stderr
    assert "--rocm URL" in result.stderr
    assert result.stdout == ""
