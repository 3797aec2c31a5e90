"""ROCm 6.4 from Debian sid, assembled in TheRock's layout; inspected only (its programs need a
newer glibc than the host may have)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from rocm_build.binary import elf
from rocm_build.rocm import dist

pytestmark = pytest.mark.slow


def _soname(path: Path) -> str | None:
    return elf.read_elf(path.resolve()).soname


def test_version_sonames_and_targets(sid_tree: Path) -> None:
    tree = dist.open_tree(sid_tree)
    assert tree.layout == "debian"  # TheRock's arrangement, made by rocm debian
    assert re.fullmatch(r"6\.4\.\d+", tree.version), tree.version
    assert _soname(sid_tree / "lib/libamdhip64.so") == "libamdhip64.so.6"
    assert _soname(sid_tree / "lib/libamd_comgr.so") == "libamd_comgr.so.3"
    assert _soname(sid_tree / "lib/librocblas.so") == "librocblas.so.4"
    # gfx942, gfx1100 and gfx1201 have device libraries; family bitcode is no target name.
    for target in ("gfx942", "gfx1100", "gfx1201"):
        assert tree.supports(target), tree.bitcode_targets
    assert all(re.fullmatch(r"gfx[0-9a-f]+", t) for t in tree.bitcode_targets)
    assert tree.hipcc is not None
    assert (sid_tree / "lib/llvm/bin/clang").exists()
    # rocBLAS kernels in TheRock's place, and still where Debian's rocBLAS looks for them.
    kernels = {
        m.group(0)
        for p in (sid_tree / "lib/rocblas/library").iterdir()
        if (m := re.search(r"gfx[0-9a-f]+", p.name))
    }
    assert "gfx1100" in kernels
    versioned = next((sid_tree / "lib/rocblas").glob("*/library"))
    assert versioned.resolve() == (sid_tree / "lib/rocblas/library").resolve()
    assert any((sid_tree / "lib/hipblaslt/library").glob("*gfx1201*"))
    # Nothing of the tree resolves a non-glibc library from the system.
    sysdeps = {p.name for p in (sid_tree / "lib/rocm_sysdeps/lib").iterdir()}
    for name in ("libnuma.so.1", "libelf.so.1", "libdrm.so.2", "libdrm_amdgpu.so.1"):
        assert name in sysdeps
    provided = sysdeps | {p.name for p in (sid_tree / "lib").glob("lib*.so*")}
    provided |= {p.name for p in (sid_tree / "lib/llvm/lib").glob("lib*.so*")}
    system = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"}
    for lib in (sid_tree / "lib").glob("lib*.so.*"):
        if lib.is_symlink() or not elf.is_elf(lib):
            continue
        unresolved = set(elf.read_elf(lib).needed) - provided - system
        assert not unresolved, (lib.name, unresolved)


def test_cli_reuses_the_tree_and_doctor_passes_torch_except_what_sid_lacks(
    sid_tree: Path, run_cli: Any, tmp_path: Path
) -> None:
    again = run_cli(["--json", "rocm", "debian", str(sid_tree), "--release", "sid"], cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["version"].startswith("6.4.")

    result = run_cli(
        ["--json", "doctor", "--rocm", str(sid_tree), "--arch", "gfx942;gfx1100;gfx1201", "torch"],
        cwd=tmp_path,
    )
    report = json.loads(result.stdout)
    problems = report["rocm"]["problems"]
    glibc = tuple(int(x) for x in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
    if glibc < (2, 38):
        # sid's clang cannot run on this machine (its glibc is older): doctor says so and where
        # it runs; nothing else is missing for torch
        (problem,) = problems
        assert "needs a newer C library than this machine has (GLIBC_2.38 not found)" in problem
        assert "rocm run ROOT" in problem
        assert len(report["blockers"]) == 1, report["blockers"]
    else:
        assert problems == [], problems
        assert report["blockers"] == [], report["blockers"]
    warnings = "\n".join(report["rocm"]["warnings"])
    assert "rccl" in warnings
    assert "USE_NCCL=0" in warnings
    assert "roctracer64" in warnings
    assert "USE_KINETO=0" in warnings
    assert "hipsparselt" in warnings
