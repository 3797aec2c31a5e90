"""Smoke on packages that print when they are imported: the probe's result travels apart from the
package's own output, so a valid wheel passes, and a failing import or a probe that dies is still
reported. Real fat wheels (the vecadd example, grafted) with a changed ``__init__.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CliRunner

from .conftest import TARGETS, graft

pytestmark = pytest.mark.slow

INIT = '''"""vecadd, with a package that talks on import."""

import sys

print("vecadd: loading kernels for", "gfx90a;gfx1030")
print('{"not": "the probe result"}')
print("vecadd: a warning on stderr", file=sys.stderr)

from ._vecadd import add, device_count, runtime_version

__all__ = ["add", "device_count", "runtime_version"]
'''


@pytest.fixture(scope="module")
def fat_wheel(
    tmp_path_factory: pytest.TempPathFactory, vecadd_wheel: Path, rocm_tree: Path
) -> Path:
    dest = tmp_path_factory.mktemp("fat")
    return graft(vecadd_wheel, rocm_tree, dest, ext_rpath="$ORIGIN/lib", package="vecadd")


def with_init(wheel: Path, dest: Path, text: str) -> Path:
    """``wheel`` with ``vecadd/__init__.py`` replaced (``wheel pack`` rewrites RECORD)."""
    work = dest / "unpacked"
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", work, wheel], check=True)
    (root,) = work.iterdir()
    (root / "vecadd" / "__init__.py").write_text(text)
    out = dest / "wheels"
    out.mkdir()
    subprocess.run([sys.executable, "-m", "wheel", "pack", "-d", out, root], check=True)
    (changed,) = out.glob("*.whl")
    return changed


def smoke(run_cli: CliRunner, cwd: Path, wheel: Path, offline_wheels: Path):
    args = ["--arch", TARGETS, "--offline", "--find-links", str(offline_wheels)]
    return run_cli(["--json", "smoke", str(wheel), *args], cwd=cwd)


def test_package_that_prints_on_import_passes(
    run_cli: CliRunner, tmp_path: Path, fat_wheel: Path, offline_wheels: Path
) -> None:
    wheel = with_init(fat_wheel, tmp_path, INIT)
    result = smoke(run_cli, tmp_path, wheel, offline_wheels)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["ok"]
    assert data["failed"] == 0
    (probe,) = data["facts"]["probes"].values()
    assert probe["imported"]["vecadd"].endswith("/site-packages/vecadd/__init__.py")
    assert probe["hip"]["rc"] == 100  # hipErrorNoDevice, from the bundled runtime


def test_failing_import_of_a_printing_package_is_reported(
    run_cli: CliRunner, tmp_path: Path, fat_wheel: Path, offline_wheels: Path
) -> None:
    text = INIT.replace("from ._vecadd", "raise ImportError('planted: no kernels')\nfrom ._vecadd")
    wheel = with_init(fat_wheel, tmp_path, text)
    result = smoke(run_cli, tmp_path, wheel, offline_wheels)
    assert result.returncode == 12, result.stdout + result.stderr
    data = json.loads(result.stdout)
    failures = {f["test"].rsplit("::", 1)[-1]: f["message"] for f in data["failures"]}
    assert "ImportError: planted: no kernels" in failures["test_imports[vecadd]"]


@pytest.mark.parametrize(
    ("ending", "expected"),
    [
        ("os._exit(3)", "crashed (exit 3)"),
        ("os._exit(0)", "ended without a result (exit 0)"),
    ],
)
def test_probe_that_dies_is_reported_with_the_package_output(
    run_cli: CliRunner,
    tmp_path: Path,
    fat_wheel: Path,
    offline_wheels: Path,
    ending: str,
    expected: str,
) -> None:
    text = INIT.replace("from ._vecadd", f"import os\n{ending}\nfrom ._vecadd")
    wheel = with_init(fat_wheel, tmp_path, text)
    result = smoke(run_cli, tmp_path, wheel, offline_wheels)
    assert result.returncode == 12, result.stdout + result.stderr
    data = json.loads(result.stdout)
    failures = {f["test"].rsplit("::", 1)[-1]: f["message"] for f in data["failures"]}
    message = failures["test_imports[vecadd]"]
    assert f"probe importing vecadd {expected}" in message
    assert "vecadd: loading kernels for" in message  # the package's own output, for the user
