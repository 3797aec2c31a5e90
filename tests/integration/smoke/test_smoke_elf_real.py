"""The smoke suite's stdlib ELF reader on a real shared object made by the C compiler."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "smoke-tests"))

import smoke_elf

from tests.unit.test_smoke_elf import bundle


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_reads_dynamic_section_and_fatbin_of_a_real_library(tmp_path: Path) -> None:
    # A real shared object whose .hip_fatbin section holds two bundles back to back.
    blob = bundle(["hipv4-amdgcn-amd-amdhsa--gfx90a"]) + bundle(
        ["hipv4-amdgcn-amd-amdhsa--gfx1030", "hipv4-amdgcn-amd-amdhsa--gfx90a"]
    )
    data = ", ".join(str(b) for b in blob)
    src = tmp_path / "k.c"
    src.write_text(
        '__attribute__((section(".hip_fatbin"), used)) '
        f"static const unsigned char fatbin[] = {{{data}}};\nint f(void) {{ return 1; }}\n"
    )
    lib = tmp_path / "libk.so"
    subprocess.run(
        [
            "cc",
            "-shared",
            "-fPIC",
            "-o",
            lib,
            src,
            "-Wl,-soname,libk.so.1",
            "-Wl,-rpath,$ORIGIN/../lib",
            "-Wl,--disable-new-dtags",
            "-Wl,--no-as-needed",
            "-lm",
        ],
        check=True,
    )
    info = smoke_elf.read(lib)
    assert info is not None
    assert info.soname == "libk.so.1"
    assert "libm.so.6" in info.needed
    assert info.rpath == ["$ORIGIN/../lib"]
    assert info.runpath == []
    assert info.has_fatbin
    assert info.targets == {"gfx90a", "gfx1030"}
    assert not info.is_device_code
