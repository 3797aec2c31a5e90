"""torch/lib/libamdhip64.so in a fat torch: an alias stub of the bundled HIP runtime (a tiny ELF
whose only content is a NEEDED entry for libamdhip64.so.N and an $ORIGIN search path), never a
second copy. Triton's AMD backend dlopen()s that exact file name and dlsym()s HIP's functions
through the handle; the loader answers from the stub's NEEDED library, the one runtime torch
loads too. Then the real ``triton`` 3.9.0 wheel from the registry, installed beside the fat torch
fixture in a clean venv with no ROCm reachable: its HIP lookup resolves into torch/lib, and it
compiles a kernel ahead of time for gfx942, gfx90a and gfx1100. No GPU is used (none exists here);
the HIP runtime reports "no device", which is what a machine without one says."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rocm_build.binary import elf

from .conftest import make_venv, pip_install
from .torchwheels import bundled_torch, triton_wheel

pytestmark = pytest.mark.slow


# dlopen() the stub by its path, as Triton's driver does, and dlsym() HIP through the handle.
PROBE = r"""
import ctypes, json, os, sys, sysconfig
order = sys.argv[1]
site = sysconfig.get_paths()["purelib"]
stub_path = os.path.join(site, "torch", "lib", "libamdhip64.so")
if order == "torch-first":
    import torch
hip = ctypes.CDLL(stub_path, mode=os.RTLD_LAZY | os.RTLD_LOCAL)
version = ctypes.c_int(-1)
status = hip.hipRuntimeGetVersion(ctypes.byref(version))
count = ctypes.c_int(-1)
count_status = hip.hipGetDeviceCount(ctypes.byref(count))
if order == "stub-first":
    import torch
maps = {line.split()[-1] for line in open("/proc/self/maps") if "libamdhip64" in line}
print(json.dumps({"status": status, "version": version.value, "count_status": count_status,
                  "maps": sorted(maps)}))
"""

TRITON_PROBE = r"""
import json, sys
order = sys.argv[1]
if order == "torch-first":
    import torch
import triton
from triton.backends.amd import driver
found = driver._get_path_to_hip_runtime_dylib()
if order == "triton-first":
    import torch
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
import triton.language as tl

@triton.jit
def add(x, y, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(out + i, tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)

sizes = {}
for arch, warp in (("gfx942", 64), ("gfx90a", 64), ("gfx1100", 32)):
    src = ASTSource(add, signature={"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32",
                                    "BLOCK": "constexpr"}, constexprs={"BLOCK": 64})
    compiled = triton.compile(src, target=GPUTarget("hip", arch, warp))
    sizes[arch] = len(compiled.asm["hsaco"])
print(json.dumps({"found": found, "hsaco": sizes}))
"""


@pytest.fixture
def fat_torch(hip_ext_so: Path, tree_copy: Path, tmp_path: Path, run_cli) -> Path:  # type: ignore[no-untyped-def]
    return bundled_torch(run_cli, hip_ext_so, tree_copy, tmp_path)


def _clean_venv(tmp_path: Path, tree: Path, *wheels: Path) -> Path:
    python = make_venv(tmp_path / "venv")
    for wheel in wheels:
        pip_install(python, wheel)
    shutil.move(str(tree), str(tree.with_name("rocm-out-of-reach")))  # no ROCm reachable
    return python


def _run(python: Path, code: str, *args: str, cwd: Path) -> dict[str, object]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(cwd)}  # no ROCM_PATH, HIP_PATH, LD_LIBRARY_PATH
    script = cwd / "probe.py"  # @triton.jit reads its function's source from a file
    script.write_text(code)
    res = subprocess.run(
        [str(python), str(script), *args], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    data: dict[str, object] = json.loads(res.stdout.strip().splitlines()[-1])
    return data


def test_fat_torch_carries_libamdhip64_so_as_an_alias_stub(
    fat_torch: Path, tree_copy: Path, tmp_path: Path
) -> None:
    with zipfile.ZipFile(fat_torch) as zf:
        names = zf.namelist()
        stub = tmp_path / "libamdhip64.so"
        stub.write_bytes(zf.read("torch/lib/libamdhip64.so"))
        real_size = zf.getinfo("torch/lib/libamdhip64.so.5").file_size
    assert names.count("torch/lib/libamdhip64.so.5") == 1
    info = elf.read_elf(stub)
    assert list(info.needed) == ["libamdhip64.so.5"]
    assert stub.stat().st_size < 64 * 1024 < real_size  # not a second copy
    python = _clean_venv(tmp_path, tree_copy, fat_torch)
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    lib = Path(site) / "torch" / "lib"
    for order in ("stub-first", "torch-first"):
        got = _run(python, PROBE, order, cwd=tmp_path)
        assert got["status"] == 0, got  # hipRuntimeGetVersion through the stub's handle
        assert int(got["version"]) > 0, got  # type: ignore[call-overload]
        assert got["count_status"] == 100, got  # hipErrorNoDevice: no GPU here
        # One runtime in the process, the wheel's (and the few-kB stub that NEEDs it).
        assert got["maps"] == [str(lib / "libamdhip64.so"), str(lib / "libamdhip64.so.5")], got


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the cached triton wheel is cp311")
def test_real_triton_finds_hip_in_torch_lib_and_compiles_ahead_of_time(
    fat_torch: Path, tree_copy: Path, tmp_path: Path
) -> None:
    python = _clean_venv(tmp_path, tree_copy, fat_torch, triton_wheel(tmp_path))
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    lib = Path(site) / "torch" / "lib"
    for order in ("triton-first", "torch-first"):
        got = _run(python, TRITON_PROBE, order, cwd=tmp_path)
        found = Path(str(got["found"]))
        # Before torch: Triton's own search finds the stub; after: the loaded runtime itself.
        assert found.parent == lib, got
        assert found.name.startswith("libamdhip64.so"), got
        sizes = got["hsaco"]
        assert isinstance(sizes, dict)
        assert set(sizes) == {"gfx942", "gfx90a", "gfx1100"}, got
        assert all(int(v) > 0 for v in sizes.values()), got
