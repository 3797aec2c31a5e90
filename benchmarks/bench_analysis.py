"""Benchmark: reading a wheel's libraries in place (what the bundle's plan, ``inspect`` and the
build's wheel check do now) against unpacking each to a scratch folder and reading the copy
(what they did before).

(v) in place: ``analyze`` through member views (blocks inflated on demand, RECORD checked on
    the way, nothing written);
(u) unpacked: each ELF member extracted (RECORD checked while it is written) to a temporary
    folder, then read from the copy (ELF facts, offload bundles), the copy deleted.

Both read every ELF member's facts and device code. Inputs:
  (r) a wheel holding bench_bundle.py's tree's ``librocsparse.so.0`` (Debian's 1.3 GB library,
      111 offload bundles), deflated at level 6 by zipfile (made once, kept in _work/analysis);
  (t) a real torch wheel: ``--torch PATH``, else the test cache's CPU torch wheel when there.
Each run is a child process (wall, CPU, peak RSS from wait4), alternated, ``--repeat`` times.

    python benchmarks/bench_analysis.py [--torch PATH] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

import bench_bundle  # noqa: E402

WORK = HERE / "_work" / "analysis"

CHILD = r"""
import sys, tempfile
from pathlib import Path
from rocm_build.binary import elf
from rocm_build.wheel.analyze import analyze_path, may_be_elf
from rocm_build.wheel.wheelread import WheelReader

mode, wheel = sys.argv[1], Path(sys.argv[2])
if mode == "v":
    a = analyze_path(wheel)
    print(len(a.elves), sum(len(m.bundles) for m in a.elves.values()))
else:
    found = bundles = 0
    with WheelReader(wheel) as reader, tempfile.TemporaryDirectory() as tmp:
        for m in reader.members:
            if not may_be_elf(m.name) or m.file_size < 64:
                continue
            if reader.head(m.name, 4) != elf.ELF_MAGIC:
                continue
            copy = reader.extract(m.name, Path(tmp), "elf")
            info = elf.read_elf(copy)
            if info.is_host:
                found += 1
                bundles += len(elf.offload_bundles(copy)) if info.has_fatbin else 0
            copy.unlink()
    print(found, bundles)
"""


def rocsparse_wheel() -> Path:
    wheel = WORK / "sparselib-1.0-cp311-cp311-linux_x86_64.whl"
    if wheel.is_file():
        return wheel
    lib = bench_bundle.WORK / "tree" / "lib" / "librocsparse.so.0.1"
    if not lib.is_file():
        raise SystemExit(f"{lib} is missing: run benchmarks/bench_bundle.py once first")
    WORK.mkdir(parents=True, exist_ok=True)
    print(f"making {wheel.name} (1.3 GB deflated at level 6, once)", flush=True)
    part = wheel.with_suffix(".part")
    make = (  # in a child: this process stays small, so its children's peak RSS is theirs
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "from test_smoke_plan import make_wheel; "
        "make_wheel(Path(sys.argv[2]), {'sparselib/lib/librocsparse.so.0': "
        "Path(sys.argv[3]).read_bytes()})"
    )
    unit = str(REPO / "tests" / "unit")
    subprocess.run([sys.executable, "-c", make, unit, str(part), str(lib)], check=True)
    part.rename(wheel)
    return wheel


def run(mode: str, wheel: Path) -> tuple[float, float, float, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    start = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(wheel)], env=env, stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    out = child.stdout.read().strip()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.monotonic() - start
    if status:
        raise SystemExit(f"{mode} on {wheel.name} failed ({status})")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", type=Path, help="a torch wheel (default: the test cache's)")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    wheels = {"r": rocsparse_wheel()}
    cache = Path(os.environ.get("RB_TEST_CACHE", Path.home() / ".cache" / "rocm-build-tests"))
    found = sorted((cache / "torch-hipify" / "wheels").glob("torch-*.whl"))
    if args.torch or found:
        wheels["t"] = args.torch or found[-1]
    print(f"load average at the start: {os.getloadavg()[0]:.1f}")
    print("| wheel | approach | run | wall | CPU | peak RSS | ELF files, bundles |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for key, wheel in wheels.items():
        size = zipfile.ZipFile(wheel).infolist()
        raw = sum(i.file_size for i in size) / 1e6
        label = f"({key}) {wheel.name} ({wheel.stat().st_size / 1e6:.0f} MB, {raw:.0f} MB inflated)"
        for n in range(args.repeat):
            for mode in ("u", "v"):
                wall, cpu, rss, out = run(mode, wheel)
                name = "(v) in place" if mode == "v" else "(u) unpacked"
                print(f"| {label} | {name} | {n + 1} | {wall:.2f} s | {cpu:.2f} s | {rss:.0f} MB "
                      f"| {out} |", flush=True)  # fmt: skip
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
