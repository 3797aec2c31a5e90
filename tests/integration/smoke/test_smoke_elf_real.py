"""The smoke suite's stdlib ELF reader on a real shared object made by the C compiler."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "rocm_build" / "smoke" / "suite"))

import smoke_elf

from tests.support.hiplib import bare_hip_library
from tests.support.offloadbundle import offload_bundle


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_reads_dynamic_section_and_fatbin_of_a_real_library(tmp_path: Path) -> None:
    # A real shared object whose .hip_fatbin section holds two bundles back to back.
    blob = offload_bundle(["hipv4-amdgcn-amd-amdhsa--gfx90a"]) + offload_bundle(
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


def test_reads_compressed_bundles(tmp_path: Path, rocm_tree: Path, clang19_bin: Path) -> None:
    pytest.importorskip("zstandard")
    # two translation units: two CCOB bundles in one section
    lib = bare_hip_library(
        clang19_bin / "clang++",
        rocm_tree,
        tmp_path / "libpacked.so",
        ["gfx942", "gfx1100"],
        ["-nogpulib", "-nogpuinc", "--offload-compress"],
        units=2,
    )
    assert b"CCOB" in lib.read_bytes()
    info = smoke_elf.read(lib)
    assert info is not None
    assert info.targets == {"gfx942", "gfx1100"}
    assert info.unreadable_bundles == 0
