"""dev/quickstart stays shellcheck-clean (shellcheck comes from dev/apt-packages.txt)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import REPO


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_quickstart_is_shellcheck_clean() -> None:
    result = subprocess.run(
        ["shellcheck", REPO / "dev" / "quickstart"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout
