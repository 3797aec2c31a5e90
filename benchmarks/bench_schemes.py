"""Benchmark: three ways to ship the full-size torch-shaped wheel (ROCm 6.4 from Debian sid).

The input is bench_fullsize.py's (tests/integration/modern/fullsize_wheel.py; the sid tree and
root). Each scheme is produced in its own child process, in one run, all at the same deflate
level, the deflate cache off (``--deflate-cache`` leaves it on), next to auditwheel repair
(bench_fullsize.py's runner, through auditwheel's API):

  (a) auditwheel repair                    the reference: NEEDED closure only, no data
  (f) fat, every target                    rocm-build bundle --arch <every target of the tree>
  (g) fat, gfx942, pruned                  rocm-build bundle --arch gfx942
  (k) fat, gfx1100, every target's code    rocm-build bundle --arch gfx1100 --keep-all-device-code
  (p) fat, gfx1100, pruned                 rocm-build bundle --arch gfx1100
  (n) (p) again, output in place           the no-op re-bundle
  (x) fat, gfx11 family, pruned            rocm-build bundle --arch gfx110X
  (s) split, every target                  rocm-build bundle --split-arch --arch <every target>
  (h) split, gfx11 family                  rocm-build bundle --split-arch --arch gfx110X
  (t) thin                                 rocm-build bundle --mode thin --target-family gfx110X
  (r) ROCm packages for thin, gfx1100      rocm-build rocm wheels --arch gfx1100 --target-family
                                           gfx110X (core + the pruned libraries package)

Printed: wall time, CPU time and peak RSS of each; the size of every wheel; what a publisher
uploads and what a user with one gfx1100 downloads in each scheme; and, from ``inspect`` of the
host wheels, the device code of other targets that a host wheel carries inside its libraries.
Needs root (the sid root). Takes minutes of both cores.

    python benchmarks/bench_schemes.py [--level 6] [--skip a,g] [--timeout 3600] [--keep]
        [--deflate-cache]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import bench_fullsize  # noqa: E402

WORK = HERE / "_work" / "schemes"
FAMILY = "gfx110X"  # the gfx11 family: gfx1100, gfx1101, gfx1102, gfx1103 (rocm-build's name)
USER = "gfx1100"  # the one-GPU user the downloads are counted for
NAMES = {
    "a": "auditwheel repair (NEEDED closure, no data)",
    "f": "fat, every target",
    "g": "fat, gfx942 (pruned)",
    "k": "fat, gfx1100, every target's device code",
    "p": "fat, gfx1100, pruned",
    "n": "(p) again, output in place (no-op)",
    "x": f"fat, {FAMILY} (pruned)",
    "s": "split: host + one device wheel per target",
    "h": f"split, {FAMILY}: host (pruned) + one device wheel per target",
    "t": f"thin (Requires-Dist rocm-sdk-core, rocm-sdk-libraries-{FAMILY})",
    "r": f"rocm wheels --arch {USER} --target-family {FAMILY}",
}
#: runs that write into another run's output folder
SAME_OUT = {"n": "p"}


def _cli(ctx: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "rocm_build", "-q", *args],
        cwd=ctx["cwd"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )


def produce(key: str, ctx: dict[str, str], out: Path, level: int) -> None:
    z = ["-z", str(level), "--output-dir", str(out)]
    bundle = ["bundle", ctx["wheel"], "--rocm", ctx["tree"], *z]
    # sid's rocBLAS, rocSPARSE and rocRAND have no gfx942 (nor gfx1103) code, and no library has
    # code for all 34 targets: those runs would stop at the coverage check (exit 11)
    missing = "--allow-missing-arch"
    if key == "a":
        bench_fullsize.auditwheel_repair(ctx, out, level)
    elif key == "f":
        _cli(ctx, *bundle, "--arch", ctx["arch"], missing)
    elif key == "g":
        _cli(ctx, *bundle, "--arch", "gfx942", missing)
    elif key == "k":
        _cli(ctx, *bundle, "--arch", USER, "--keep-all-device-code")
    elif key in "pn":
        _cli(ctx, *bundle, "--arch", USER)
    elif key == "x":
        _cli(ctx, *bundle, "--arch", FAMILY, missing)
    elif key == "s":
        _cli(ctx, *bundle, "--arch", ctx["arch"], "--split-arch", missing)
    elif key == "h":
        _cli(ctx, *bundle, "--arch", FAMILY, "--split-arch", missing)
    elif key == "t":
        _cli(ctx, *bundle, "--mode", "thin", "--target-family", FAMILY)
    elif key == "r":
        _cli(ctx, "rocm", "wheels", ctx["tree"], *z, "--arch", USER, "--target-family", FAMILY)


def child(key: str, out: Path, level: int) -> dict[str, object]:
    ctx = json.loads((WORK / "ctx.json").read_text())
    facts: dict[str, object] = {**bench_fullsize.measure(lambda: produce(key, ctx, out, level))}
    facts["wheels"] = {p.name: p.stat().st_size for p in sorted(out.glob("*.whl"))}
    return facts


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.0f} kB"


def _pick(wheels: dict[str, int], prefix: str) -> int:
    return sum(size for name, size in wheels.items() if name.startswith(prefix))


def code_in_host(host: Path, target: str) -> tuple[int, int]:
    """Device code bytes (code objects, uncompressed) in the host wheel's ELF files: those that
    serve ``target`` (by bundle's rule: its own, its feature variants, its generic processor's)
    and the rest, which a one-GPU user downloads and never runs. Each code object counts once
    (``inspect``'s per-target figures count a generic one for every processor it serves)."""
    from rocm_build.bundle import prune
    from rocm_build.wheel.analyze import analyze_path

    mine = other = 0
    for member in analyze_path(host).code_members:
        for b in member.bundles:
            for e in b.entries:
                if not e.target:
                    continue
                if prune.keeps_entry(e.bundle_id, [target]):
                    mine += e.size
                else:
                    other += e.size
    return mine, other


def report(results: dict[str, dict[str, object]]) -> None:
    wheels = {k: dict(r["wheels"]) for k, r in results.items() if k not in SAME_OUT}  # type: ignore[call-overload]
    print("\nwheels:")
    for key, found in wheels.items():
        for name, size in found.items():
            print(f"  ({key}) {name}: {_mb(size)}")

    def secs(keys: str) -> float:
        return sum(float(results[k]["seconds"]) for k in keys if k in results)  # type: ignore[arg-type]

    def line(label: str, upload: int, download: int, keys: str) -> None:
        print(f"  {label}: {_mb(upload)} / {_mb(download)}  ({secs(keys):.1f} s)")

    print(f"\nscheme: publisher uploads / one {USER} user downloads (time to produce):")
    for key, label in (
        ("f", "fat, every target"),
        ("k", f"fat, {USER}, every target's code"),
        ("p", f"fat, {USER}, pruned (upload: this, for each target)"),
        ("x", f"fat, {FAMILY}, pruned (upload: this, for each family)"),
    ):
        if key in wheels:
            size = sum(wheels[key].values())
            line(label, size, size, key)
    for key, label in (("s", "split, every target"), ("h", f"split, {FAMILY}")):
        if key in wheels:
            found = wheels[key]
            host, device = _pick(found, "torch-"), _pick(found, f"amd_torch_device_{USER}-")
            line(label, sum(found.values()), host + device, key)
            print(f"    host {_mb(host)} + device-{USER} {_mb(device)}")
    if "t" in wheels and "r" in wheels:
        thin, rocm = sum(wheels["t"].values()), wheels["r"]
        line("thin (ROCm's packages from ROCm's index)", thin, thin + sum(rocm.values()), "tr")
        core, libs = _pick(rocm, "rocm_sdk_core-"), _pick(rocm, "rocm_sdk_libraries_")
        meta = _pick(rocm, "rocm-")
        print(f"    thin {_mb(thin)} + core {_mb(core)} + libraries {_mb(libs)} + rocm {_mb(meta)}")
    if "g" in wheels:
        size = sum(wheels["g"].values())
        print(f"  fat, gfx942, pruned (a gfx942 user): {_mb(size)} ({secs('g'):.1f} s)")
    if "a" in wheels:
        size = sum(wheels["a"].values())
        print(
            f"  auditwheel repair (no data, no dlopened libraries): {_mb(size)} ({secs('a'):.1f} s)"
        )
    if "n" in results:
        print(f"  (n) no-op re-bundle of (p): {secs('n'):.2f} s (goal < 1 s)")
    if "f" in wheels:
        f = sum(wheels["f"].values())
        for key in "kpx":
            if key in wheels:
                size, time = sum(wheels[key].values()) / f, secs(key) / secs("f")
                print(f"  ({key})/(f): size {size:.0%}, bundle time {time:.0%}")
    for key in "sh":
        host_path = next((WORK / f"out-{key}").glob("torch-*.whl"), None)
        if key in wheels and host_path is not None:
            mine, others = code_in_host(host_path, USER)
            print(
                f"({key}) host wheel's libraries: device code {_mb(mine)} for {USER}, "
                f"{_mb(others)} for the other targets (uncompressed)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=6)
    parser.add_argument("--skip", default="", help="schemes to skip, e.g. a,f")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per scheme")
    parser.add_argument("--keep", action="store_true", help="keep the outputs")
    parser.add_argument(
        "--deflate-cache", action="store_true", help="leave the deflate cache on (default: off)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        key, out = args.child.split(":", 1)
        print(json.dumps(child(key, Path(out), args.level)))
        return
    if not args.deflate_cache:  # each run deflates what it writes: no run reuses another's work
        os.environ["ROCM_BUILD_BUNDLE_DEFLATE_CACHE"] = "none"
    ctx = bench_fullsize.prepare()
    WORK.mkdir(parents=True, exist_ok=True)
    ctx["cwd"] = str(WORK)
    (WORK / "ctx.json").write_text(json.dumps(ctx))
    print(f"input: {ctx['wheel']}\nall targets: {ctx['arch']}", flush=True)
    print(f"load average before: {os.getloadavg()}", flush=True)
    print(f"deflate cache: {os.environ.get('ROCM_BUILD_BUNDLE_DEFLATE_CACHE', 'on')}", flush=True)
    results: dict[str, dict[str, object]] = {}
    loads = [os.getloadavg()[0]]
    for key in NAMES:
        if key in args.skip.split(","):
            continue
        out = WORK / f"out-{SAME_OUT.get(key, key)}"
        if key not in SAME_OUT:
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
        spec = f"{key}:{out}"
        found = bench_fullsize.run_child(__file__, f"({key}) {NAMES[key]}", spec, args, loads)
        if found is None:
            continue
        results[key] = r = found
        total = sum(dict(r["wheels"]).values())  # type: ignore[call-overload]
        print(
            f"({key}) {NAMES[key]}: {float(r['seconds']):.1f} s "  # type: ignore[arg-type]
            f"(CPU {float(r['cpu_seconds']):.1f} s), peak {float(r['peak_mb']):.0f} MB, "  # type: ignore[arg-type]
            f"{len(r['wheels'])} wheels, {_mb(total)}",  # type: ignore[arg-type]
            flush=True,
        )
    report(results)
    print(
        f"load average (1 min) before and after each scheme: {', '.join(f'{x:.1f}' for x in loads)}"
    )
    (WORK / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    if not args.keep:
        for key in NAMES:
            shutil.rmtree(WORK / f"out-{key}", ignore_errors=True)


if __name__ == "__main__":
    main()
