"""dev/quickstart stays shellcheck-clean (shellcheck comes from dev/apt-packages.txt)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_quickstart_is_shellcheck_clean() -> None:
    result = subprocess.run(
        ["shellcheck", REPO / "dev" / "quickstart"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout


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
