"""A project like the real torchvision and torchaudio: a pyproject.toml with tool settings only (no
[build-system] table), built with the pip build tool (pip wheel --no-build-isolation) in a fresh
build venv. Python 3.11's venvs come with setuptools 65, which has no bdist_wheel of its own."""

from __future__ import annotations

import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import CliRunner

from .conftest import PROJECTS, _git_repo

pytestmark = pytest.mark.slow


@pytest.mark.skipif(
    sys.version_info >= (3, 12), reason="venvs of Python 3.12+ come without setuptools"
)
def test_project_without_build_system_table_builds_in_a_fresh_venv(
    run_cli: CliRunner, tmp_path: Path, rocm_tree: Path
) -> None:
    root = tmp_path / "ws"
    _git_repo(PROJECTS / "toolonly", root / "src" / "toolonly")
    pyproject = tomllib.loads((root / "src" / "toolonly" / "pyproject.toml").read_text())
    assert set(pyproject) == {"tool"}
    (root / "rocm-build.toml").write_text(
        "[build]\ncache = 'none'\n\n"  # venv = "create": a fresh venv under the work dir
        "[projects.toolonly]\n"
        "origin = 'file:///nonexistent/toolonly.git'\n"  # never fetched: the test made it
        "build_tool = 'pip'\nlib_dir = 'toolonly'\ncmake_packages = ['hip']\n"
    )
    result = run_cli(
        ["build", "toolonly", "--rocm", str(rocm_tree), "--arch", "gfx90a"],
        cwd=root,
        env={"COLUMNS": "300"},
    )
    log = root / ".rocm-build" / "logs" / "build-toolonly.log"
    shown = result.stdout + result.stderr + (log.read_text() if log.is_file() else "")
    assert "invalid command 'bdist_wheel'" not in shown, shown[-3000:]
    assert result.returncode == 0, shown[-3000:]
    venv_python = root / ".rocm-build" / "venv" / "bin" / "python"
    assert venv_python.exists()  # built in the fresh venv rocm-build made
    (wheel,) = (root / "wheels").glob("toolonly-0.1.0-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert any(n.startswith("toolonly/_C.") and n.endswith(".so") for n in names), names
