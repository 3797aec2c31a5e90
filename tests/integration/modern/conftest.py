"""A modern ROCm (6.4 from Debian sid) tree and a sid root to run its programs in.

The tree lands in the tests' cache (RB_TEST_CACHE, else ~/.cache/rocm-build-tests); the .debs it
is made from in the user's rocm-build cache, so a machine that keeps its caches downloads nothing
again.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import _test_cache


@pytest.fixture(scope="session")
def sid_tree() -> Path:
    from rocm_build.rocm import debtree

    return debtree.assemble(_test_cache() / "rocm-sid", release="sid")


@pytest.fixture(scope="session")
def sid_root() -> Path:
    """A Debian sid root (mmdebstrap, as root), cached between runs."""
    import os

    from rocm_build.rocm import sysroot

    if os.geteuid() != 0:
        pytest.skip("making and entering a root needs root (mmdebstrap, mount, chroot)")
    root, _ = sysroot.make_root(_test_cache() / "sid-root", release="sid")
    return root


KERNELS = (
    """#include <hip/hip_runtime.h>
__global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" int device_count_status(int* n) { return (int)hipGetDeviceCount(n); }
""",
    """#include <hip/hip_runtime.h>
extern "C" int rocrand_create_generator(void**, int);
__global__ void shift(float* x) { x[threadIdx.x] += 3.0f; }
extern "C" int rand_status(void) { void* g = 0; return rocrand_create_generator(&g, 400); }
""",
)
#: exact, generic and xnack± targets (generic ones need code object v6: clang 21's default)
PACKED = ["gfx1100", "gfx11-generic", "gfx942", "gfx9-4-generic", "gfx90a:xnack+"]
PACKED += ["gfx90a:xnack-", "gfx1030"]


@pytest.fixture(scope="session")
def packed(
    sid_tree: Path, sid_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, Path]:
    """A HIP library (two translation units: two bundles) that NEEDs rocRAND and HIP, compiled
    by the sid tree's hipcc in the sid root with --offload-compress: compressed bundle format
    v2 and v3. Session-scoped: test_prune_sid.py and test_kpack_writer_sid.py read it, and
    compiling it for seven targets twice takes about a minute."""
    from rocm_build.rocm import sysroot

    work = tmp_path_factory.mktemp("packed")
    for i, source in enumerate(KERNELS):
        (work / f"tu{i}.hip").write_text(source)
    tree = str(sid_tree)
    out = {}
    for version in (2, 3):
        cmd = [f"{tree}/bin/hipcc", *(f"--offload-arch={a}" for a in PACKED), "--offload-compress"]
        cmd += ["-O1", "-fPIC", "-shared", "tu0.hip", "tu1.hip", f"-L{tree}/lib", "-lrocrand"]
        cmd += ["-lamdhip64", "-o", f"libv{version}.so"]
        env = {**os.environ, "HIP_PLATFORM": "amd", "ROCM_PATH": tree}
        env["COMPRESSED_BUNDLE_FORMAT_VERSION"] = str(version)
        assert sysroot.run(sid_root, cmd, binds=[sid_tree.resolve()], cwd=work, env=env) == 0
        out[version] = work / f"libv{version}.so"
    return out
