"""Benchmark: a one-target fat wheel with and without pruning the libraries' device code.

The input is bench_bundle.py's: a HIP extension wheel (gfx90a) that needs Debian's 1.3 GB
``librocsparse.so.0`` (111 uncompressed offload bundles for gfx803, gfx900, gfx906, gfx908,
gfx90a:xnack+/-, gfx1030) and the HIP runtime of the Debian ROCm 5.2.3 tree. Each run is its
own child process, with the deflate cache off, at the same level:

  (f) fat, every target                 rocm-build bundle                (no --arch: all code)
  (k) fat, gfx90a, all device code      rocm-build bundle --arch gfx90a --keep-all-device-code
  (p) fat, gfx90a, pruned               rocm-build bundle --arch gfx90a
  (n) (p) again, output in place        the no-op re-bundle

Printed: wall time, CPU time, peak RSS and wheel size of each, and the ratios (p)/(f).

    python benchmarks/bench_prune.py [--level 6] [--skip f] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import bench_bundle  # noqa: E402

WORK = bench_bundle.WORK
NAMES = {
    "f": "fat, every target (no --arch)",
    "k": "fat, --arch gfx90a --keep-all-device-code",
    "p": "fat, --arch gfx90a (pruned)",
    "n": "(p) again, output in place (no-op)",
}
FLAGS = {"f": [], "k": ["--arch", "gfx90a", "--keep-all-device-code"], "p": ["--arch", "gfx90a"]}
FLAGS["n"] = FLAGS["p"]


def bundle(key: str, ctx: dict[str, str], out: Path, level: int) -> None:
    cmd = [sys.executable, "-m", "rocm_build", "-q", "bundle", ctx["wheel"], "--rocm", ctx["tree"]]
    cmd += ["--output-dir", str(out), "-z", str(level), *FLAGS[key]]
    env = {**os.environ, "PYTHONPATH": str(REPO), "ROCM_BUILD_BUNDLE_DEFLATE_CACHE": "none"}
    subprocess.run(cmd, cwd=WORK, env=env, check=True)


def measure(key: str, ctx: dict[str, str], out: Path, level: int) -> dict[str, float]:
    import resource

    start = time.monotonic()
    bundle(key, ctx, out, level)
    seconds = time.monotonic() - start
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "seconds": seconds,
        "cpu_seconds": kids.ru_utime + kids.ru_stime,
        "peak_mb": kids.ru_maxrss / 1024,
        "output_mb": sum(p.stat().st_size for p in out.glob("*.whl")) / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=6)
    parser.add_argument("--skip", default="", help="runs to skip, e.g. f,k")
    parser.add_argument("--keep", action="store_true", help="keep the outputs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ctx = bench_bundle.prepare()
    if args.child:
        key, out = args.child.split(":", 1)
        print(json.dumps(measure(key, ctx, Path(out), args.level)))
        return
    results: dict[str, dict[str, float]] = {}
    for key in NAMES:
        if key in args.skip.split(","):
            continue
        out = WORK / f"prune-{'p' if key == 'n' else key}"
        if key != "n":
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
        proc = subprocess.run(
            [sys.executable, __file__, "--level", str(args.level), "--child", f"{key}:{out}"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            print(f"({key}) failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
            sys.exit(1)
        r = results[key] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"({key}) {NAMES[key]}: {r['seconds']:.1f} s (CPU {r['cpu_seconds']:.1f} s), "
            f"peak {r['peak_mb']:.0f} MB, wheel {r['output_mb']:.1f} MB",
            flush=True,
        )
    f, p = results.get("f"), results.get("p")
    if f and p:
        print(f"\n(p)/(f) size: {p['output_mb'] / f['output_mb']:.0%} (goal <= 25%)")
        print(f"(p)/(f) bundle time: {p['seconds'] / f['seconds']:.0%} (goal <= 50%)")
    if p:
        print(f"(p) peak memory: {p['peak_mb']:.0f} MB (goal < 300 MB)")
    if "n" in results:
        print(f"(n) no-op re-bundle: {results['n']['seconds']:.2f} s (goal < 1 s)")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores, shared)")
    if not args.keep:
        for key in "fkp":
            shutil.rmtree(WORK / f"prune-{key}", ignore_errors=True)
    (WORK / "prune-results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
