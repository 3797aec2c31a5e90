"""Benchmark: three ways to ship the full-size torch-shaped wheel (ROCm 6.4 from Debian sid).

The input is bench_fullsize.py's (tests/integration/modern/fullsize_wheel.py; the sid tree and
root). Each scheme is produced in its own child process, in one run, all at the same deflate
level, next to auditwheel repair (bench_fullsize.py's runner, through auditwheel's API):

  (a) auditwheel repair                    the reference: NEEDED closure only, no data
  (f) fat, every target                    rocm-build bundle --arch <every target of the tree>
  (g) fat, gfx942                          rocm-build bundle --arch gfx942 (pruned)
  (k) fat, gfx1100, every target's code    rocm-build bundle --arch gfx1100 --keep-all-device-code
  (p) fat, gfx1100, pruned                 rocm-build bundle --arch gfx1100
  (s) split, every target                  rocm-build bundle --split-arch --arch <every target>
  (t) thin                                 rocm-build bundle --mode thin --target-family F
  (r) ROCm packages for thin, gfx942       rocm-build rocm wheels --arch gfx942 --target-family F

Printed: wall time, CPU time and peak RSS of each; the size of every wheel; what a publisher
uploads and what a user with one GPU (gfx942, and gfx1100 for the split scheme) downloads in each
scheme; and, from ``inspect`` of the host wheel, the device code of other targets that the host
wheel carries inside its libraries. Needs root (the sid root). Takes minutes of both cores.

    python benchmarks/bench_schemes.py [--level 6] [--skip a] [--timeout 3600] [--keep]
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
FAMILY = "gfx94X-dcgpu"  # the thin wheel's libraries package: ROCm's family name for gfx942
NAMES = {
    "a": "auditwheel repair (NEEDED closure, no data)",
    "f": "fat, every target",
    "g": "fat, gfx942 (pruned)",
    "k": "fat, gfx1100, every target's device code",
    "p": "fat, gfx1100, pruned",
    "s": "split: host + one device wheel per target",
    "t": f"thin (Requires-Dist rocm-sdk-core, rocm-sdk-libraries-{FAMILY})",
    "r": f"rocm wheels --arch gfx942 --target-family {FAMILY}",
}


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
    if key == "a":
        bench_fullsize.auditwheel_repair(ctx, out, level)
    # sid's rocBLAS, rocSPARSE and rocRAND have no gfx942 code, and no library has code for all
    # 34 targets: those runs would stop at the coverage check (exit 11)
    elif key == "f":
        _cli(ctx, *bundle, "--arch", ctx["arch"], "--allow-missing-arch")
    elif key == "g":
        _cli(ctx, *bundle, "--arch", "gfx942", "--allow-missing-arch")
    elif key == "k":
        _cli(ctx, *bundle, "--arch", "gfx1100", "--keep-all-device-code")
    elif key == "p":
        _cli(ctx, *bundle, "--arch", "gfx1100")
    elif key == "s":
        _cli(ctx, *bundle, "--arch", ctx["arch"], "--split-arch", "--allow-missing-arch")
    elif key == "t":
        _cli(ctx, *bundle, "--mode", "thin", "--target-family", FAMILY)
    elif key == "r":
        _cli(ctx, "rocm", "wheels", ctx["tree"], *z, "--arch", "gfx942", "--target-family", FAMILY)


def child(key: str, out: Path, level: int) -> dict[str, object]:
    ctx = json.loads((WORK / "ctx.json").read_text())
    facts: dict[str, object] = {**bench_fullsize.measure(lambda: produce(key, ctx, out, level))}
    facts["wheels"] = {p.name: p.stat().st_size for p in sorted(out.glob("*.whl"))}
    return facts


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _pick(wheels: dict[str, int], prefix: str) -> int:
    return sum(size for name, size in wheels.items() if name.startswith(prefix))


def other_targets_in_host(host: Path, target: str) -> tuple[int, int]:
    """Device code bytes (uncompressed) in the host wheel's libraries: for ``target``, for the
    other targets (what a one-GPU user downloads and never runs)."""
    shown = subprocess.run(
        [sys.executable, "-m", "rocm_build", "--json", "inspect", str(host)],
        capture_output=True, text=True, check=True, cwd=WORK,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    coverage = json.loads(shown.stdout)["coverage"]
    mine = sum(r["code_bytes"] for r in coverage if r["target"] == target)
    return mine, sum(r["code_bytes"] for r in coverage if r["target"] != target)


def report(results: dict[str, dict[str, object]]) -> None:
    wheels = {k: dict(r["wheels"]) for k, r in results.items()}  # type: ignore[call-overload]
    print("\nwheels:")
    for key, found in wheels.items():
        for name, size in found.items():
            print(f"  ({key}) {name}: {_mb(size)}")
    print("\nscheme: publisher uploads / one gfx942 user downloads (time to produce):")

    def line(label: str, upload: int, download: int, keys: str) -> None:
        secs = sum(float(results[k]["seconds"]) for k in keys if k in results)  # type: ignore[arg-type]
        print(f"  {label}: {_mb(upload)} / {_mb(download)}  ({secs:.1f} s)")

    if "f" in wheels:
        size = sum(wheels["f"].values())
        line("fat, every target", size, size, "f")
    if "g" in wheels:
        size = sum(wheels["g"].values())
        line("fat, gfx942 (upload: this, for each target)", size, size, "g")
    for key, label in (("k", "fat, gfx1100, every target's code"), ("p", "fat, gfx1100, pruned")):
        if key in wheels:
            size = sum(wheels[key].values())
            line(f"{label} (a gfx1100 user)", size, size, key)
    if "s" in wheels:
        s = wheels["s"]
        host = _pick(s, "torch-")
        line("split", sum(s.values()), host + _pick(s, "amd_torch_device_gfx942-"), "s")
        print(f"    gfx1100 user: {_mb(host + _pick(s, 'amd_torch_device_gfx1100-'))}")
    if "t" in wheels and "r" in wheels:
        thin = sum(wheels["t"].values())
        rocm = sum(wheels["r"].values())
        line("thin (the ROCm packages come from ROCm's index)", thin, thin + rocm, "tr")
    if "a" in results:
        a = results["a"]
        print(f"  auditwheel repair (no data, no dlopen'ed libraries): "
              f"{_mb(sum(wheels['a'].values()))} ({float(a['seconds']):.1f} s)")  # type: ignore[arg-type]  # fmt: skip
    if "s" in wheels:
        host_path = next((WORK / "out-s").glob("torch-*.whl"), None)
        if host_path is not None:
            mine, others = other_targets_in_host(host_path, "gfx942")
            print(f"host wheel's libraries: device code {_mb(mine)} for gfx942, {_mb(others)} "
                  "for the other targets (uncompressed; stays in the host wheel)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--level", type=int, default=6)
    parser.add_argument("--skip", default="", help="schemes to skip, e.g. a,f")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per scheme")
    parser.add_argument("--keep", action="store_true", help="keep the outputs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        key, out = args.child.split(":", 1)
        print(json.dumps(child(key, Path(out), args.level)))
        return
    ctx = bench_fullsize.prepare()
    WORK.mkdir(parents=True, exist_ok=True)
    ctx["cwd"] = str(WORK)
    (WORK / "ctx.json").write_text(json.dumps(ctx))
    print(f"input: {ctx['wheel']}\nall targets: {ctx['arch']}", flush=True)
    print(f"load average before: {os.getloadavg()}", flush=True)
    results: dict[str, dict[str, object]] = {}
    loads = [os.getloadavg()[0]]
    for key in NAMES:
        if key in args.skip.split(","):
            continue
        out = WORK / f"out-{key}"
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
