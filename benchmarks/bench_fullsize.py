"""Benchmark: bundling a torch-shaped wheel that needs ROCm 6.4's math libraries (full size).

The input is the wheel of tests/integration/modern/fullsize_wheel.py: ``torch/lib/libtorch_hip.so``
(hipcc/clang 21 in the sid root, gfx942;gfx1100;gfx1201) NEEDs rocBLAS, hipBLAS, hipBLASLt,
MIOpen, rocSPARSE, hipSPARSE, rocFFT, hipFFT, rocRAND, hipRAND, rocSOLVER, hipSOLVER, roctx and
HIP from the sid tree (``rocm-build rocm debian DIR --release sid``). The approach runners are
bench_bundle.py's, in one run, at the same deflate level:

  (a) auditwheel repair            the NEEDED closure only (it knows no dlopen list, no data);
                                   through its API, as its CLI refuses sid's glibc 2.38+ symbols
  (b) the release-script approach  unzip, copy the libraries rocm-build bundles and the data
                                   files of the targets (a grep over the data folders), patchelf,
                                   RECORD, zip -r
  (c) rocm-build bundle            every target the tree has (--arch), deflate cache empty (cold)
  (w) (c) warm                     a rebuilt wheel (libtorch_hip.so changed) bundled again with
                                   the deflate cache (c) filled: what a user's next bundle costs
  (l) rocm-build bundle, like (a)  the NEEDED closure only (no data trees, no dlopen list: a
                                   rocm-build.toml in its folder says so), cache empty
  (g) rocm-build bundle            gfx942 alone, pruned: the one-target wheel against (c)'s
                                   (cache empty)
  (e) (c) again, output in place   the no-op

Each runs in its own child process with a timeout; wall time, CPU time (user + sys, children
included), peak RSS and output size are printed, then the ratios. Needs root (the sid root).

    python benchmarks/bench_fullsize.py [--level 6] [--skip a,b] [--timeout 3600]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import bench_bundle  # noqa: E402

WORK = HERE / "_work" / "fullsize"
NAMES = {
    "a": "auditwheel repair (NEEDED closure, no data)",
    "b": "release-script approach (unzip, cp libs + data, patchelf, RECORD, zip -r)",
    "c": "rocm-build bundle, every target, cold (deflate cache empty)",
    "w": "rocm-build bundle, every target, warm (rebuilt wheel, cache of (c))",
    "l": "rocm-build bundle, NEEDED closure only (like (a)), cold",
    "g": "rocm-build bundle, gfx942, cold",
    "e": "rocm-build bundle again, output in place",
}


def prepare() -> dict[str, str]:
    from rocm_build import config
    from rocm_build.bundle.data import select_data
    from rocm_build.rocm import debtree, dist, sysroot
    from tests.integration.modern.fullsize_wheel import build_wheel

    cache = bench_bundle.cache_dir()
    tree = debtree.assemble(cache / "rocm-sid", release="sid")
    root, _ = sysroot.make_root(cache / "sid-root", release="sid")
    wheel = build_wheel(cache, tree, root)
    cfg = config.from_environment()
    targets = [t for t in dist.open_tree(tree).bitcode_targets if t in cfg.known_targets]
    WORK.mkdir(parents=True, exist_ok=True)
    ext = sorted(
        n for n in _members(wheel) if n.endswith(".so") and n.startswith(("torch/_C", "torch/lib/"))
    )
    ctx = {
        "tree": str(tree),
        "wheel": str(wheel),
        "arch": ";".join(targets),
        "cwd": str(WORK),
        "lib_dir": "torch/lib",
        "ext": ",".join(ext),
        "dlopen": "default",
        # no library of sid has code for all 34 targets, and rocBLAS, rocSPARSE and rocRAND
        # none for gfx942: without this, (c) and (g) stop at the coverage check (exit 11)
        "bundle_flags": "--allow-missing-arch",
    }
    # (b) copies the data files rocm-build picks, as the scripts' grep over the folder does
    libs = bench_bundle.closure(tree, wheel, ctx)
    data, _ = select_data(tree, cfg.bundle.data_trees, "torch/lib", [p.name for p in libs], targets)
    listing = WORK / "data-files.tsv"
    listing.write_text("".join(f"{d.source}\t{d.arcname}\n" for d in data))
    ctx["data_list"] = str(listing)
    return ctx


def _members(wheel: Path) -> list[str]:
    import zipfile

    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def auditwheel_repair(ctx: dict[str, str], out: Path, level: int) -> None:
    """auditwheel's own repair (analysis, grafting, patchelf, zip) through its API: its CLI
    refuses this wheel before any work, as sid's libraries need glibc 2.38+ (and libm
    GLIBC_2.43), newer than any manylinux policy. The same repair to its highest policy's
    library list, with the tag left alone (--no-update-tags)."""
    from auditwheel.architecture import Architecture
    from auditwheel.libc import Libc
    from auditwheel.patcher import ElfPatcher
    from auditwheel.repair import repair_wheel
    from auditwheel.wheel_abi import analyze_wheel_abi

    tree = Path(ctx["tree"])
    os.environ["LD_LIBRARY_PATH"] = f"{tree}/lib:{tree}/lib/rocm_sysdeps/lib"
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    wheel = Path(ctx["wheel"])
    abi = analyze_wheel_abi(
        Libc.GLIBC,
        Architecture.x86_64,
        wheel,
        frozenset(),
        disable_isa_ext_check=True,
        allow_graft=True,
    )
    policy = abi.policies.highest
    repair_wheel(
        abi,
        wheel,
        abis=[policy.name],
        lib_sdir=".libs",
        out_dir=out,
        update_tags=False,
        patcher=ElfPatcher.get_patcher("patchelf", policy.name),
        strip=False,
        zip_compression_level=level,
    )


#: The deflate cache folder of each rocm-build run; emptied before the cold ones.
CACHES = {"c": "cache-c", "w": "cache-c", "e": "cache-c", "l": "cache-l", "g": "cache-g"}


def rebuilt_wheel(wheel: Path) -> Path:
    """The input as a rebuild leaves it: the same members, but the main library's bytes
    changed (one byte appended), so bundling it again is no no-op."""
    from rocm_build.wheel.wheelfile import WheelReader, WheelWriter

    out = WORK / "rebuilt" / wheel.name
    scratch = WORK / "rebuilt-scratch"
    with WheelReader(wheel) as reader, WheelWriter(out, reader.dist_info) as writer:
        for m in reader.members:
            if m.is_dir or m.name == f"{reader.dist_info}/RECORD":
                continue
            if m.name.endswith("/libtorch_hip.so"):
                path = reader.extract(m.name, scratch, "libtorch_hip.so")
                with path.open("ab") as fh:
                    fh.write(b"\0")
                writer.add_file(m.name, path, m.mode or 0o755)
            else:
                writer.copy_member(reader, m.name)
        writer.commit()
    shutil.rmtree(scratch, ignore_errors=True)
    return out


def child(key: str, out: Path, level: int) -> dict[str, float]:
    ctx = json.loads((WORK / "ctx.json").read_text())
    if key in CACHES:
        os.environ["ROCM_BUILD_BUNDLE_DEFLATE_CACHE"] = str(WORK / CACHES[key])
    if key == "g":
        ctx["arch"] = "gfx942"
    if key == "w":
        ctx["wheel"] = str(WORK / "rebuilt" / Path(ctx["wheel"]).name)
    if key == "l":
        like = WORK / "like"
        like.mkdir(exist_ok=True)
        (like / "rocm-build.toml").write_text("[bundle]\ndata_trees = []\ndlopen_libs = []\n")
        ctx["cwd"] = str(like)
    fn = {"a": auditwheel_repair, "b": bench_bundle.approach_b}.get(key, bench_bundle.approach_c)
    bench_bundle.WORK = WORK
    facts = measure(lambda: fn(ctx, out, level))
    facts["output_mb"] = sum(p.stat().st_size for p in out.glob("*.whl")) / 1e6
    return facts


def measure(work: Callable[[], object]) -> dict[str, float]:
    """Wall seconds of ``work()``, and this process's CPU seconds and peak RSS (MB) with its
    children's: one approach per child process, so these are the approach's own."""
    import resource

    start = time.monotonic()
    work()
    seconds = time.monotonic() - start
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "seconds": seconds,
        "cpu_seconds": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
        "peak_mb": max(me.ru_maxrss, kids.ru_maxrss) / 1024,
    }


def phases(level: int, sample: int = 8) -> dict[str, float]:
    """Where (c)'s time goes, per byte it moves: reading the sources, sha256 + CRC-32 (on the
    writer's workers, piece by piece), deflate (every ``sample``-th 4 MiB chunk, scaled up),
    writing the output size to the same disk (with fsync). Seconds of one core each, measured
    here."""
    import hashlib

    from rocm_build.wheel import rawdeflate

    ctx = json.loads((WORK / "ctx.json").read_text())
    bench_bundle.WORK = WORK
    libs = bench_bundle.closure(Path(ctx["tree"]), Path(ctx["wheel"]), ctx)
    data = [line.split("\t")[0] for line in Path(ctx["data_list"]).read_text().splitlines()]
    files = [p.resolve() for p in libs] + [Path(d) for d in data]
    chunk = 4 << 20
    out: dict[str, float] = {
        "bytes": 0, "read": 0, "hash": 0, "deflate": 0, "deflated": 0, "splice": 0
    }  # fmt: skip
    for i, path in enumerate(files):
        with path.open("rb") as fh:
            n = 0
            while True:
                t = time.monotonic()
                block = fh.read(chunk)
                out["read"] += time.monotonic() - t
                if not block:
                    break
                t = time.process_time()
                hashlib.sha256(block).digest()
                rawdeflate.crc32(block)
                out["hash"] += time.process_time() - t
                if (i + n) % sample == 0:
                    t = time.process_time()
                    piece = rawdeflate.compress(block, level, True)
                    out["deflate"] += (time.process_time() - t) * sample
                    out["deflated"] += len(piece) * sample
                    # a piece that is not a member's last is spliced: its final block found
                    t = time.process_time()
                    rawdeflate.compress(block, level, False)
                    out["splice"] += (time.process_time() - t) * sample
                out["bytes"] += len(block)
                n += 1
    buf = os.urandom(chunk)
    target = WORK / "write-probe"
    t = time.monotonic()
    with target.open("wb") as fh:
        for _ in range(int(out["deflated"]) // chunk):
            fh.write(buf)
        fh.flush()
        os.fsync(fh.fileno())
    out["write"] = time.monotonic() - t
    target.unlink()
    return out


def run_child(
    script: str, label: str, spec: str, args: argparse.Namespace, loads: list[float]
) -> dict[str, Any] | None:
    """Run ``script --child spec`` in its own process (its own peak RSS and CPU time), with
    ``args.timeout``; returns its JSON result, or None after saying why there is none."""
    cmd = [sys.executable, script, "--level", str(args.level), "--child", spec]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, check=False, timeout=args.timeout
        )
    except subprocess.TimeoutExpired:
        print(f"{label}: timed out after {args.timeout:.0f} s", flush=True)
        return None
    loads.append(os.getloadavg()[0])
    if proc.returncode != 0:
        print(f"{label} failed:\n{proc.stderr[-3000:]}", file=sys.stderr, flush=True)
        return None
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=6)
    parser.add_argument("--skip", default="", help="approaches to skip, e.g. a,b")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per approach")
    parser.add_argument("--keep", action="store_true", help="keep the outputs")
    parser.add_argument(
        "--phases", action="store_true", help="only measure where (c)'s time goes (after a run)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phases:
        r = phases(args.level)
        gb = r["bytes"] / 1e9
        print(
            f"(c) moves {gb:.2f} GB -> about {r['deflated'] / 1e9:.2f} GB at level {args.level}; "
            f"one core's seconds: read {r['read']:.1f} s, sha256 + CRC-32 {r['hash']:.1f} s, "
            f"deflate {r['deflate']:.1f} s (libdeflate, sampled; with the splice scan of a "
            f"non-last piece {r['splice']:.1f} s), write + fsync {r['write']:.1f} s"
        )
        return
    if args.child:
        key, out = args.child.split(":", 1)
        print(json.dumps(child(key, Path(out), args.level)))
        return
    ctx = prepare()
    (WORK / "ctx.json").write_text(json.dumps(ctx))
    print(f"input: {ctx['wheel']}\nall targets: {ctx['arch']}", flush=True)
    results: dict[str, dict[str, float]] = {}
    loads = [os.getloadavg()[0]]
    for key in NAMES:
        if key in args.skip.split(","):
            continue
        out = WORK / f"out-{'c' if key == 'e' else key}"
        if key != "e":
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
        if key in ("c", "l", "g"):
            shutil.rmtree(WORK / CACHES[key], ignore_errors=True)
        if key == "w":
            rebuilt_wheel(Path(ctx["wheel"]))
        found = run_child(__file__, f"({key}) {NAMES[key]}", f"{key}:{out}", args, loads)
        if found is None:
            continue
        results[key] = r = found
        print(
            f"({key}) {NAMES[key]}: {r['seconds']:.1f} s (CPU {r['cpu_seconds']:.1f} s), "
            f"peak {r['peak_mb']:.0f} MB, output {r['output_mb']:.0f} MB",
            flush=True,
        )
    c = results.get("c")
    print()
    for mine in "cwl":
        for key, label in (("a", "auditwheel"), ("b", "release script")):
            if mine in results and key in results:
                ratio = results[key]["seconds"] / results[mine]["seconds"]
                cpu = results[key]["cpu_seconds"] / results[mine]["cpu_seconds"]
                print(
                    f"({mine}) vs {label}: {ratio:.2f}x faster wall, {cpu:.2f}x CPU (target >= 3x)"
                )
    if c:
        peak = max(results[k]["peak_mb"] for k in "cwlge" if k in results)
        print(f"rocm-build peak memory: {peak:.0f} MB (target <= 300 MB)")
    if c and "g" in results:
        g = results["g"]
        print(
            f"one target against all: {g['output_mb']:.0f} MB / {c['output_mb']:.0f} MB "
            f"= {g['output_mb'] / c['output_mb']:.0%}"
        )
    if "e" in results:
        print(f"(e) re-bundle no-op: {results['e']['seconds']:.2f} s (target < 1 s)")
    shown = ", ".join(f"{x:.1f}" for x in loads)
    print(f"load average (1 min) before and after each approach: {shown}")
    if not args.keep:
        for key in "abcgwl":
            shutil.rmtree(WORK / f"out-{key}", ignore_errors=True)
        shutil.rmtree(WORK / "rebuilt", ignore_errors=True)
    (WORK / "results.json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
