"""TheRock's family strings through the command line: ``matrix --arch-groups`` and ``doctor
--arch`` take each as written, with exactly its members (issue 31 item 6, issue 33)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CliRunner
from tests.support.therock import THEROCK_FAMILIES


def test_matrix_takes_every_therock_family_string(tmp_path: Path, run_cli: CliRunner) -> None:
    groups = ",".join(THEROCK_FAMILIES)
    args = ["--json", "matrix", "--arch-groups", groups, "--python", "3.12", "--train", "2.10"]
    result = run_cli([*args, "--rocm", "https://therock.example/r.tar.gz"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    jobs = json.loads(result.stdout)["include"]
    assert {j["arch_group"]: tuple(j["arch"].split(";")) for j in jobs} == THEROCK_FAMILIES


@pytest.mark.parametrize(
    "family",
    ["gfx950-dcgpu", "gfx950-all", "dcgpu-all", "gfx110X-dgpu", "gfx110X-igpu", "gfx125X-dcgpu"],
)
def test_doctor_takes_the_strings_it_refused_or_widened(
    family: str, rocm_tree: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    result = run_cli(["--json", "doctor", "--rocm", str(rocm_tree), "--arch", family], cwd=tmp_path)
    data = json.loads(result.stdout)  # the tree (ROCm 5.2) may block the build; not the name
    assert data["targets"] == {"names": list(THEROCK_FAMILIES[family]), "from": "arch setting"}
    assert "not a known target" not in result.stderr
