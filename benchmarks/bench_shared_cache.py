"""Shared compiler cache benchmark: a cold build vs the same build in another folder with an empty
local cache, served from a Redis server (Debian's redis-server on loopback, started here).

Builds the HIP fixture of the CI tests (tests/integration/ci/hipproject: a kernel for two gfx
targets and a host file) with the ROCm tree's clang through ccache, configured by
``compilercache.resolve_cache("ccache", "redis://...")``, and times ``cmake --build`` both times.

    python benchmarks/bench_shared_cache.py [--rocm DIR] [--repeat 3]

Without --rocm it assembles the Debian ROCm tree (rocm_build.rocm.debtree) under benchmarks/_work.
Target: the build served from Redis takes under 20% of the cold build, with no misses.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from rocm_build.building import cachestats, compilercache  # noqa: E402

FIXTURE = REPO / "tests" / "integration" / "ci" / "hipproject"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"redis-server did not answer on port {port}")


def build(
    project: Path, compiler_cache: compilercache.CompilerCache, env: dict[str, str], rocm: Path
) -> float:
    full = {**env, **compiler_cache.env}
    out = project / "build"
    subprocess.run(
        [
            "cmake", "-G", "Ninja", "-S", str(project), "-B", str(out),
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DCMAKE_CXX_COMPILER={rocm / 'lib' / 'llvm' / 'bin' / 'clang++'}",
            f"-DROCM_TREE={rocm}", "-DGPU_TARGETS=gfx90a;gfx1030",
        ],
        env=full, check=True, capture_output=True,
    )  # fmt: skip
    cachestats.zero_stats(compiler_cache, env)
    start = time.monotonic()
    subprocess.run(["cmake", "--build", str(out)], env=full, check=True, capture_output=True)
    return time.monotonic() - start


def once(rocm: Path, env: dict[str, str]) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        (tmp / "redis").mkdir()
        port = free_port()
        server = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(port),
             "--dir", str(tmp / "redis"), "--save", ""],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_for(port)
            url = f"redis://127.0.0.1:{port}"
            times = []
            for local in ("local-1", "local-2"):
                c = compilercache.resolve_cache(
                    "ccache", url, env, cache_dir=tmp / local, base_dir=tmp
                )
                project = Path(shutil.copytree(FIXTURE, tmp / f"checkout-{local}"))
                times.append(build(project, c, env, rocm))
                stats = cachestats.cache_stats(c, env)
                if local == "local-2" and (stats["misses"] or not stats["remote_hits"]):
                    raise SystemExit(f"expected only remote hits, got {stats}")
            return times[0], times[1]
        finally:
            server.terminate()
            server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rocm", type=Path, help="ROCm tree (default: the Debian tree)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rocm = args.rocm
    if rocm is None:
        from rocm_build.rocm import debtree

        work = HERE / "_work"
        rocm = debtree.assemble(work / "rocm-debian", cache=work)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "SCCACHE_"))}
    runs = [once(rocm.resolve(), env) for _ in range(args.repeat)]
    cold = statistics.median(r[0] for r in runs)
    warm = statistics.median(r[1] for r in runs)
    print(f"cold build:                        {cold:6.2f} s (median of {args.repeat})")
    print(f"other folder, served from Redis:   {warm:6.2f} s")
    print(f"ratio:                             {warm / cold:6.1%}  (target < 20%)")


if __name__ == "__main__":
    main()
