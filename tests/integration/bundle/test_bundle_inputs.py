"""What ``bundle`` is handed besides its wheels (issue 30): a ``--with`` wheel that is no torch
wheel, and ELF files whose NEEDED entries are paths. One line and a documented exit code."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import CliRunner

from .helpers import make_wheel
from .test_untrusted_zips import one_error


def test_with_a_wheel_that_is_not_torch_is_refused(
    run_cli: CliRunner, rocm_tree: Path, tmp_path: Path
) -> None:
    """``--with`` takes torch's fat wheel; another wheel was silently ignored (exit 0)."""
    dist = tmp_path / "dist"
    vision = make_wheel(dist, "torchvision", "0.24.0", {"torchvision/__init__.py": b""})
    other = make_wheel(dist, "numpy", "2.0.0", {"numpy/__init__.py": b""})
    out = tmp_path / "out"
    args = ["bundle", str(vision), "--with", str(other), "--rocm", str(rocm_tree)]
    res = run_cli([*args, "--output-dir", str(out)], cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    one_error(res, other.name, "not a torch wheel")
    assert not out.exists() or not list(out.iterdir())
