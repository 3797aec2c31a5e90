"""Code objects for LLVM's generic processors (gfx9-4-generic ...) count for their members in
``inspect``'s coverage: ROCm 6.4's rocSOLVER carries only generic code objects."""

from __future__ import annotations

import json
from pathlib import Path

from rocm_build.binary import elf

from .helpers import cc_shared, device_code, fatbin_source, make_bundle, make_wheel

HIP = "hipv4-amdgcn-amd-amdhsa--"
HOST = "host-x86_64-unknown-linux-gnu-"


def _lib(out: Path, targets: list[str]) -> Path:
    entries = [(HOST, b""), *((HIP + t, device_code(n)) for n, t in enumerate(targets))]
    return cc_shared(out, fatbin_source([make_bundle(entries)]))


def test_inspect_counts_generic_code_for_its_members(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    generic = _lib(tmp_path / "libsolver.so", ["gfx9-4-generic", "gfx11-generic"])
    plain = _lib(tmp_path / "libblas.so", ["gfx942", "gfx1100"])
    assert elf.offload_targets(generic) == {"gfx9-4-generic", "gfx11-generic"}
    wheel = make_wheel(
        tmp_path / "dist",
        "kernels",
        "1.0",
        {"kernels/libsolver.so": generic, "kernels/libblas.so": plain},
    )
    ok = run_cli(
        ["--json", "inspect", str(wheel), "--require-arch", "gfx942,gfx1100"], cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    rows = {c["target"]: c for c in json.loads(ok.stdout)["coverage"]}
    assert set(rows) == {"gfx942", "gfx1100"}  # generic names are no rows of their own
    assert rows["gfx942"]["missing_in"] == []
    assert rows["gfx942"]["code"] == ["kernels/libblas.so", "kernels/libsolver.so"]
    assert rows["gfx942"]["code_bytes"] > rows["gfx942"]["data_bytes"] == 0
    # gfx90a is in neither generic family: missing from both libraries
    bad = run_cli(["--json", "inspect", str(wheel), "--require-arch", "gfx90a"], cwd=tmp_path)
    assert bad.returncode == 11
