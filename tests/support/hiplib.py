"""Small HIP libraries compiled for tests: translation units of a bare kernel (no ROCm headers
or device libraries needed, so Debian's clang 19 builds them too) linked into one shared
library whose ``.hip_fatbin`` holds one offload bundle per unit."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

#: A kernel for clang without ROCm's headers or device libraries (see debtree.assemble_clang19);
#: ``{n}`` numbers the translation unit.
BARE = """
#define __global__ __attribute__((global))
typedef struct {{ unsigned x, y, z; }} dim3;
typedef struct ihipStream_t *hipStream_t;
extern "C" int hipLaunchKernel(const void *f, dim3 g, dim3 b, void **a, unsigned long s,
                               hipStream_t st);
__global__ void kern{n}(float *x) {{ x[__builtin_amdgcn_workitem_id_x()] *= {n}.0f; }}
"""


def bare_hip_library(
    clang: Path,
    tree: Path,
    out: Path,
    archs: Sequence[str],
    extra: Sequence[str] = (),
    *,
    units: int = 3,
    source: str = BARE,
) -> Path:
    """``out``: ``units`` translation units of ``source`` (``tu<n>.hip`` beside it) compiled by
    ``clang`` for ``archs`` with ``extra`` flags, linked against ``tree``'s HIP runtime."""
    out.parent.mkdir(parents=True, exist_ok=True)
    sources = []
    for n in range(1, units + 1):
        src = out.parent / f"tu{n}.hip"
        src.write_text(source.format(n=n))
        sources.append(str(src))
    cmd = [str(clang), "-x", "hip", *extra, *(f"--offload-arch={a}" for a in archs)]
    cmd += ["-fPIC", "-shared", *sources, f"-L{tree}/lib", "-lamdhip64", "-o", str(out)]
    subprocess.run(cmd, check=True, env={"PATH": "/usr/bin:/bin", "HIP_PLATFORM": "amd"})
    return out
