"""rocm-build doctor against the real ROCm tree (no GPU on the test machine)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import CliRunner

WIDE = {"COLUMNS": "300"}


def test_doctor_reports_and_passes(rocm_tree: Path, tmp_path: Path, run_cli: CliRunner) -> None:
    (tmp_path / "rocm-build.toml").write_text('[projects.torch]\ncmake_packages = ["hip"]\n')
    args = ["doctor", "torch", "--rocm", str(rocm_tree), "--arch", "gfx90a;gfx1030"]
    result = run_cli(args, cwd=tmp_path, env=WIDE)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "5.2.3" in out
    assert "clang version 15" in out
    assert "gfx90a;gfx1030" in out
    assert "suggested jobs" in out
    # This machine's git (2.36 or newer) can repair a killed checkout; doctor says so.
    assert "git resume repair  ok (git fetch --refetch, git 2.36 or newer" in out
    data = json.loads(run_cli(["--json", *args], cwd=tmp_path, env=WIDE).stdout)
    assert data["rocm"]["version"] == "5.2.3"
    assert "gfx1030" in data["rocm"]["supported_targets"]
    assert data["gpus"] == []  # no GPU here: nothing faked
    assert data["machine"]["suggested_jobs"]["torch"] >= 1
    assert data["tools"]["git"]["path"]
    assert data["git_resume_repair"]["ok"] is True
    assert data["git_resume_repair"]["needs"] == "2.36"
    assert data["blockers"] == []


def test_doctor_fails_on_what_blocks_a_build(
    rocm_tree: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    # The default torch project needs rocBLAS, MIOpen, ... which the Debian tree lacks.
    result = run_cli(
        ["doctor", "torch", "--rocm", str(rocm_tree), "--arch", "gfx1100"], cwd=tmp_path, env=WIDE
    )
    assert result.returncode == 8
    assert "miopen" in result.stderr
    assert "cannot target gfx1100" in result.stderr
    result = run_cli(["doctor", "--rocm", str(rocm_tree)], cwd=tmp_path, env=WIDE)
    assert result.returncode != 0
    assert "pass --arch" in result.stderr


def test_doctor_checks_are_a_library_call(
    rocm_tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rocm_build import config
    from rocm_build.commands import doctor
    from rocm_build.common.errors import RocmTreeError
    from rocm_build.run import context

    cfg = config.load(
        cwd=tmp_path, env=dict(os.environ), flags={"arch": "gfx1100", "rocm": str(rocm_tree)}
    )
    report = doctor.check(context.resolve(cfg), cfg.selected_projects(["torch"]))
    assert capsys.readouterr() == ("", "")  # the CLI renders; the checks print nothing
    rows = {row.label: row for row in report.rows}
    assert rows["ROCm"].good is False  # the Debian tree lacks MIOpen, rocBLAS, ...
    assert rows["targets"].value == "gfx1100 (arch setting)"
    assert report.as_json()["blockers"] == [b.text for b in report.blockers]
    error = report.error()
    assert isinstance(error, RocmTreeError)
    assert "cannot target gfx1100" in str(error)


def test_doctor_names_the_train_floor_the_tree_misses(
    rocm_tree: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    # No release's LoadHIP.cmake confirms a floor (they are "unknown" built in): this one is the
    # user's, shaped as the one seen for 2.14. The tree is ROCm 5.2.3 without hipFile.
    (tmp_path / "rocm-build.toml").write_text(
        '[projects.torch]\ncmake_packages = ["hip"]\n'
        '[floors."2.14"]\nrocm = "7.14"\ntorch = ["hipfile"]\n'
    )
    args = ["doctor", "torch", "--rocm", str(rocm_tree), "--arch", "gfx90a"]
    result = run_cli([*args, "--train", "2.14"], cwd=tmp_path, env=WIDE)
    assert result.returncode == 8, result.stderr
    assert "release train 2.14 needs ROCm 7.14 or newer" in result.stderr
    assert "the tree is 5.2.3" in result.stderr
    assert "release train 2.14's torch needs CMake packages missing from lib/cmake: hipfile" in (
        result.stderr
    )
    assert "2.14: ROCm 7.14 or newer; torch needs hipfile" in result.stdout
    data = json.loads(run_cli(["--json", *args, "--train", "2.14"], cwd=tmp_path, env=WIDE).stdout)
    assert data["rocm"]["floor"]["met"] is False
    # A built-in train: its floor is not recorded, and doctor says why instead of passing silently.
    result = run_cli([*args, "--train", "2.9"], cwd=tmp_path, env=WIDE)
    assert result.returncode == 0, result.stderr
    assert "2.9: no ROCm floor known (v2.9.1's cmake/public/LoadHIP.cmake" in result.stdout
    assert "reference index" not in result.stdout  # rocm-build's own research words
    # The built-in 2.14 floor requires hipfile only from ROCm 7.14: a 5.2.3 tree passes it.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "rocm-build.toml").write_text('[projects.torch]\ncmake_packages = ["hip"]\n')
    result = run_cli([*args, "--train", "2.14"], cwd=plain, env=WIDE)
    assert result.returncode == 0, result.stderr
    assert "2.14: ROCm floor not recorded; torch needs hipfile (from ROCm 7.14)" in result.stdout


def test_doctor_counts_a_floor_package_only_from_its_rocm_version(
    rocm_tree: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    # The tree is ROCm 5.2.3 without hipFile or rocBLAS's CMake package.
    (tmp_path / "rocm-build.toml").write_text(
        '[projects.torch]\ncmake_packages = ["hip"]\n'
        '[floors."2.13"]\ntorch = ["hipfile>=7.14", "rocblas>=5.2"]\n'
    )
    args = ["doctor", "torch", "--rocm", str(rocm_tree), "--arch", "gfx90a", "--train", "2.13"]
    result = run_cli(args, cwd=tmp_path, env=WIDE)
    assert result.returncode == 8, result.stderr
    assert "missing from lib/cmake: rocblas (from ROCm 5.2)" in result.stderr
    assert "hipfile" not in result.stderr
    (tmp_path / "rocm-build.toml").write_text(
        '[projects.torch]\ncmake_packages = ["hip"]\n[floors."2.14"]\nrocm = "7.2"\n'
    )
    result = run_cli([*args[:-1], "2.14"], cwd=tmp_path, env=WIDE)
    assert result.returncode == 8, result.stderr
    assert "hipfile" not in result.stderr  # the built-in 2.14 table is replaced
    assert "release train 2.14 needs ROCm 7.2 or newer" in result.stderr


def test_every_blocking_row_says_why_and_the_tree_kind_is_named(
    rocm_tree: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    # The Debian tree lacks MIOpen, rocBLAS, ... and cannot target gfx1100: the ROCm row is "!!".
    args = ["doctor", "torch", "--rocm", str(rocm_tree), "--arch", "gfx1100"]
    result = run_cli(args, cwd=tmp_path, env=WIDE)
    assert result.returncode == 8
    (rocm,) = [line for line in result.stdout.splitlines() if line.split()[1:2] == ["ROCm"]]
    assert rocm.startswith("!!"), result.stdout
    # made by rocm-build rocm debian (its stamp is in the tree): not called a TheRock tree
    assert "(assembled from Debian packages by rocm-build rocm debian)" in rocm, rocm
    assert "therock" not in rocm.lower(), rocm
    assert ": blocks a build: torch needs CMake packages missing from lib/cmake: " in rocm, rocm
    assert "(and 1 more below)" in rocm, rocm
    assert "!! problem" in result.stdout
    assert "cannot target gfx1100" in result.stdout
    for line in result.stdout.splitlines():
        if line.startswith("!!"):
            label_and_value = line[2:].strip()
            assert len(label_and_value.split(None, 1)) == 2, line  # a value, never bare
            assert not label_and_value.endswith(("None", "?")), line
