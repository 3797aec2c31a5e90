"""The real ROCm tree from Debian's packages compiles HIP and resolves nothing from the system."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

KERNEL = r"""
#include <hip/hip_runtime.h>
__global__ void add(float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] += b[i];
}
extern "C" int device_count(int* count) { return (int)hipGetDeviceCount(count); }
"""

PROBE = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
count = ctypes.c_int(-1)
err = lib.device_count(ctypes.byref(count))
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
print(json.dumps({"err": err, "count": count.value, "maps": maps}))
"""


def _offload_ids(path: Path) -> list[str]:
    with path.open("rb") as fh:
        data = ELFFile(fh).get_section_by_name(".hip_fatbin").data()
    assert data.startswith(b"__CLANG_OFFLOAD_BUNDLE__")
    count = int.from_bytes(data[24:32], "little")
    ids, pos = [], 32
    for _ in range(count):
        size = int.from_bytes(data[pos + 16 : pos + 24], "little")
        ids.append(data[pos + 24 : pos + 24 + size].decode())
        pos += 24 + size
    return ids


@pytest.mark.slow
def test_tree_compiles_hip_and_loads_only_its_own_libraries(
    rocm_tree: Path, tmp_path: Path
) -> None:
    src = tmp_path / "k.hip"
    src.write_text(KERNEL)
    lib = tmp_path / "libk.so"
    subprocess.run(
        [
            rocm_tree / "bin/amdclang++",
            "-x",
            "hip",
            "--offload-arch=gfx90a",
            "--offload-arch=gfx1030",
            "-fPIC",
            "-shared",
            f"--rocm-path={rocm_tree}",
            f"-L{rocm_tree}/lib",
            "-lamdhip64",
            f"-Wl,-rpath,{rocm_tree}/lib",
            src,
            "-o",
            lib,
        ],
        check=True,
        env={"PATH": "/usr/bin:/bin", "HIP_PLATFORM": "amd"},
    )
    ids = _offload_ids(lib)
    assert any("gfx90a" in i for i in ids)
    assert any("gfx1030" in i for i in ids)

    out = subprocess.run(
        [sys.executable, "-c", PROBE, lib],
        check=True,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    result = json.loads(out.stdout)
    assert result["err"] == 100  # hipErrorNoDevice: the runtime loaded, there is no GPU here
    assert result["count"] == 0
    rocm_libs = [m for m in result["maps"] if "libamdhip64" in m or "libhsa" in m or "libnuma" in m]
    assert len(rocm_libs) >= 3
    tree = str(rocm_tree.resolve())
    assert all(m.startswith(tree) for m in rocm_libs), rocm_libs
