"""CMake finds ROCm in a tree `rocm debian` made: the HIP language (Debian's hip-lang, which asks
for AMDDeviceLibs), hsa-runtime64 and amd_comgr by their CMake package files, and a HIP library
built for gfx90a links the tree's libraries. As Debian ships them, these files climb one folder
above the tree and name its libraries under lib/x86_64-linux-gnu: configuring fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rocm_build.binary import elf

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.21)
project(probe LANGUAGES CXX HIP)
find_package(hsa-runtime64 CONFIG REQUIRED)
find_package(amd_comgr CONFIG REQUIRED)
add_library(probe SHARED probe.hip)
target_link_libraries(probe PRIVATE hip-lang::amdhip64 hsa-runtime64::hsa-runtime64 amd_comgr)
get_target_property(where hip-lang::amdhip64 IMPORTED_LOCATION_RELEASE)
message(STATUS "PROBE ${where}")
"""
SOURCE = "#include <hip/hip_runtime.h>\n__global__ void k(float* x) { x[0] = 1.0f; }\n"


@pytest.mark.skipif(shutil.which("cmake") is None, reason="needs cmake (dev/apt-packages-test.txt)")
def test_cmake_finds_hip_and_its_packages_in_the_tree(rocm_tree: Path, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CMAKELISTS)
    (src / "probe.hip").write_text(SOURCE)
    env = {
        **os.environ,
        "CMAKE_PREFIX_PATH": str(rocm_tree),
        "ROCM_PATH": str(rocm_tree),
        "HIP_DEVICE_LIB_PATH": str(rocm_tree / "amdgcn" / "bitcode"),
    }
    build = tmp_path / "build"
    configure = [
        "cmake", "-S", str(src), "-B", str(build), "-G", "Ninja",
        f"-DCMAKE_HIP_COMPILER={rocm_tree / 'llvm' / 'bin' / 'clang++'}",
        "-DCMAKE_HIP_ARCHITECTURES=gfx90a",
    ]  # fmt: skip
    done = subprocess.run(configure, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (where,) = [line for line in done.stdout.splitlines() if "PROBE " in line]
    assert where.split("PROBE ", 1)[1].startswith(f"{rocm_tree}/lib/libamdhip64.so.")
    done = subprocess.run(
        ["cmake", "--build", str(build)], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    library = build / "libprobe.so"
    needed = set(elf.read_elf(library).needed)
    assert {"libhsa-runtime64.so.1", "libamdhip64.so.5"} <= needed
    assert any(n.startswith("libamd_comgr.so.") for n in needed)
    assert elf.offload_targets(library) == {"gfx90a"}
