"""Benchmark: a one-target fat wheel from a kpack-split tree against one from the unsplit tree.

The input is bench_bundle.py's: a HIP extension wheel (gfx90a) that NEEDs Debian's 1.3 GB
``librocsparse.so.0`` (111 uncompressed offload bundles, 7 targets) on the Debian ROCm 5.2.3
tree. A kpack-split copy of that tree is made once with tests/support/kpackwriter.py (rocSPARSE in
group ``blas_lib``, rocRAND in ``rand_lib``, as TheRock groups them; zstd per code object) and
cached beside bench_bundle.py's work folder, keyed by the writer's source. Then the same wheel is
bundled with ``--arch gfx90a``, alternating, ``--repeat`` times each, every run its own child
process with the deflate cache off, at the same level:

  (u) unsplit tree    rocm-build bundle --arch gfx90a   (prunes rocSPARSE's offload bundles)
  (k) kpack-split     rocm-build bundle --arch gfx90a   (carries the gfx90a archives, stored)

Printed: wall time, CPU time and peak RSS of each run, the medians and their ratio (goal: (k)
at least 3x faster), the wheels' sizes and their ratio, and what (k)'s wheel is made of: the
archives stored (no deflate pass over them) plus the host libraries deflated, against the
archives' sizes in the tree plus the host libraries deflated here by zlib at the same level.

    python benchmarks/bench_kpack.py [--level 6] [--repeat 3] [--keep]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import bench_bundle  # noqa: E402

WORK = bench_bundle.WORK
ARCH = "gfx90a"
NAMES = {"u": "unsplit tree (prunes bundles)", "k": "kpack-split tree (carries archives)"}


def split_tree(tree: Path) -> tuple[Path, float | None]:
    """The kpack-split copy of ``tree`` (cached beside the work folder) and the seconds the
    split took (None: it was cached)."""
    from tests.support import kpackwriter

    digest = hashlib.sha256(Path(kpackwriter.__file__).read_bytes())
    rocsparse = (tree / "lib" / "librocsparse.so.0").resolve()
    digest.update(f"{rocsparse.name} {rocsparse.stat().st_size}".encode())
    dest = WORK.parent / f"bundle-kpack-{digest.hexdigest()[:12]}"
    if (dest / "lib").is_dir():
        return dest, None
    for old in WORK.parent.glob("bundle-kpack-*"):
        shutil.rmtree(old, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix=".bundle-kpack.", dir=WORK.parent))
    try:
        start = time.monotonic()
        kpackwriter.split_tree(tree, work / "tree", kpackwriter.THEROCK_GROUPS)
        seconds = time.monotonic() - start
        (work / "tree").rename(dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest, seconds


def bundle(tree: str, wheel: str, out: Path, level: int) -> None:
    cmd = [sys.executable, "-m", "rocm_build", "-q", "bundle", wheel, "--rocm", tree]
    cmd += ["--output-dir", str(out), "-z", str(level), "--arch", ARCH]
    env = {**os.environ, "PYTHONPATH": str(REPO), "ROCM_BUILD_BUNDLE_DEFLATE_CACHE": "none"}
    subprocess.run(cmd, cwd=WORK, env=env, check=True)


def measure(tree: str, wheel: str, out: Path, level: int) -> dict[str, float]:
    start = time.monotonic()
    bundle(tree, wheel, out, level)
    seconds = time.monotonic() - start
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "seconds": seconds,
        "cpu_seconds": kids.ru_utime + kids.ru_stime,
        "peak_mb": kids.ru_maxrss / 1024,
        "output_mb": sum(p.stat().st_size for p in out.glob("*.whl")) / 1e6,
    }


def deflated(zf: zipfile.ZipFile, info: zipfile.ZipInfo, level: int) -> int:
    """A wheel member's bytes deflated by zlib at ``level`` in one stream (auditwheel's way)."""
    comp = zlib.compressobj(level, zlib.DEFLATED, -15)
    size = 0
    with zf.open(info) as fh:
        while block := fh.read(1 << 20):
            size += len(comp.compress(block))
    return size + len(comp.flush())


def anatomy(wheel: Path, split: Path, level: int) -> dict[str, float]:
    """What (k)'s wheel holds: archives (stored?), host libraries, the rest; and the same
    parts made here: the archives' files in the split tree, the wheel's libraries deflated by
    zlib (the wheel's deflater is libdeflate, about 1% smaller at level 6)."""
    archives = libraries = other = 0
    stored = True
    expected_archives = expected_libraries = 0
    names: list[str] = []
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            name = info.filename.rsplit("/", 1)[-1]
            if name.endswith(".kpack"):
                archives += info.compress_size
                stored &= info.compress_type == zipfile.ZIP_STORED
                expected_archives += (split / ".kpack" / name).stat().st_size
                names.append(name)
            elif "/lib/" in info.filename and ".so" in name:
                libraries += info.compress_size
                expected_libraries += deflated(zf, info, level)
            else:
                other += info.compress_size
    total = wheel.stat().st_size
    return {
        "total": total,
        "archives": archives,
        "archives_stored": float(stored),
        "archives_in_tree": expected_archives,
        "libraries": libraries,
        "libraries_zlib": expected_libraries,
        "other": other,
        "zip_overhead": total - archives - libraries - other,
        "archive_names": names,  # type: ignore[dict-item]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each, alternating")
    parser.add_argument("--keep", action="store_true", help="keep the output wheels")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ctx = bench_bundle.prepare()
    if args.child:
        tree, out = args.child.split(":", 1)
        print(json.dumps(measure(tree, ctx["wheel"], Path(out), args.level)))
        return
    split, split_seconds = split_tree(Path(ctx["tree"]))
    shown = "cached" if split_seconds is None else f"made in {split_seconds:.1f} s"
    archives = sorted((split / ".kpack").iterdir())
    print(
        f"kpack-split tree: {split.name} ({shown}): {len(archives)} archives, "
        f"{sum(p.stat().st_size for p in archives) / 1e6:.1f} MB; host librocsparse "
        f"{(split / 'lib/librocsparse.so.0').stat().st_size / 1e6:.1f} MB (unsplit "
        f"{Path(ctx['tree'], 'lib/librocsparse.so.0').stat().st_size / 1e6:.0f} MB)",
        flush=True,
    )
    trees = {"u": ctx["tree"], "k": str(split)}
    results: dict[str, list[dict[str, float]]] = {"u": [], "k": []}
    for i in range(args.repeat):
        for key in "uk":
            out = WORK / f"kpack-{key}"
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            proc = subprocess.run(
                [sys.executable, __file__, "--level", str(args.level), "--child",
                 f"{trees[key]}:{out}"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if proc.returncode != 0:
                print(f"({key}) failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
                sys.exit(1)
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            results[key].append(r)
            print(
                f"run {i + 1} ({key}) {NAMES[key]}: {r['seconds']:.1f} s (CPU "
                f"{r['cpu_seconds']:.1f} s), peak {r['peak_mb']:.0f} MB, wheel "
                f"{r['output_mb']:.1f} MB, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )

    def median(key: str, field: str) -> float:
        return statistics.median(r[field] for r in results[key])

    print(f"\nmedians of {args.repeat} (level {args.level}, deflate cache off):")
    print("| tree | wall | CPU | peak RSS | wheel |")
    print("| --- | --- | --- | --- | --- |")
    for key in "uk":
        print(
            f"| ({key}) {NAMES[key]} | {median(key, 'seconds'):.1f} s | "
            f"{median(key, 'cpu_seconds'):.1f} s | {median(key, 'peak_mb'):.0f} MB | "
            f"{median(key, 'output_mb'):.1f} MB |"
        )
    speed = median("u", "seconds") / median("k", "seconds")
    cpu = median("u", "cpu_seconds") / median("k", "cpu_seconds")
    size = median("k", "output_mb") / median("u", "output_mb")
    print(f"\n(k) faster by {speed:.2f}x wall, {cpu:.2f}x CPU (goal >= 3x)")
    print(f"(k)/(u) wheel size: {size:.1%}")
    (wheel,) = (WORK / "kpack-k").glob("*.whl")
    parts = anatomy(wheel, split, args.level)
    expected = parts["archives_in_tree"] + parts["libraries_zlib"] + parts["other"]
    print(
        f"(k) wheel {parts['total'] / 1e6:.2f} MB = archives {parts['archives'] / 1e6:.2f} MB "
        f"({', '.join(parts['archive_names'])}; stored: {bool(parts['archives_stored'])}; "
        f"{parts['archives_in_tree'] / 1e6:.2f} MB in the tree) + host libraries "
        f"{parts['libraries'] / 1e6:.2f} MB deflated (zlib {args.level} here: "
        f"{parts['libraries_zlib'] / 1e6:.2f} MB) + other members {parts['other'] / 1e6:.3f} MB "
        f"+ ZIP records {parts['zip_overhead'] / 1e6:.3f} MB"
    )
    print(
        f"host libraries deflated + archives stored: {expected / 1e6:.2f} MB, the wheel "
        f"{(parts['total'] / expected - 1):+.2%} from it"
    )
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores, shared)")
    (WORK / "kpack-results.json").write_text(
        json.dumps({"runs": results, "anatomy": parts, "split_seconds": split_seconds}, indent=1)
        + "\n"
    )
    if not args.keep:
        for key in "uk":
            shutil.rmtree(WORK / f"kpack-{key}", ignore_errors=True)


if __name__ == "__main__":
    main()
