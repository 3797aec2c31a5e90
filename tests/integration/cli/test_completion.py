"""Shell completion as the install page documents it: each line it gives makes the shell's script,
and the script's completions answer (click's, through the real entry point's name)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import REPO


def _complete(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run(
        [sys.executable, "-m", "rocm_build"], env=full, capture_output=True, text=True, check=False
    )


def test_the_documented_lines_make_the_completion_scripts() -> None:
    page = (REPO / "docs" / "install.md").read_text()
    shells = re.findall(r"_ROCM_BUILD_COMPLETE=(\w+)_source rocm-build", page)
    assert sorted(shells) == ["bash", "fish", "zsh"], shells
    # the name the page uses is the entry point's
    assert 'rocm-build = "rocm_build.cli:main"' in (REPO / "pyproject.toml").read_text()
    for shell in shells:
        res = _complete({"_ROCM_BUILD_COMPLETE": f"{shell}_source"})
        assert res.returncode == 0, res.stderr
        assert "_ROCM_BUILD_COMPLETE" in res.stdout, (shell, res.stdout)
        assert "rocm_build" in res.stdout or "rocm-build" in res.stdout


def test_bash_completes_commands_and_options() -> None:
    env = {
        "_ROCM_BUILD_COMPLETE": "bash_complete",
        "COMP_WORDS": "rocm-build bu",
        "COMP_CWORD": "1",
    }
    assert _complete(env).stdout.split() == ["plain,build", "plain,bundle"]
    env |= {"COMP_WORDS": "rocm-build all --dry", "COMP_CWORD": "2"}
    assert _complete(env).stdout.split() == ["plain,--dry-run"]
