"""Benchmark: the deflaters of ``bundle.deflater`` side by side on real ROCm device code.

For each deflater and level: one core's speed (input bytes per CPU second of this thread) and the
size, deflating bench_scaling.py's sample (64 MiB of Debian's librocsparse.so.0) as the wheel
writer does: 4 MiB pieces, each primed with the 32 KiB before it, all but the last ending in a
sync flush (libdeflate: its splice scan instead). The size is against what auditwheel writes:
Python's zipfile, one zlib stream per file, at level 6. The best of ``--repeat`` runs. Two more
rows of libdeflate at level 6 place its splice scan: the scan run by libz's inflate (before it
ran zlib-ng's), and no scan at all (pieces that could not be joined: the bound).

    python benchmarks/bench_deflaters.py [--sample PATH] [--repeat 3] [--only zlib:6,libdeflate:5]

``--only`` runs just the rows it names (deflater:level; the scan rows are left out), and adds a
last column: size against the first row's.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import bench_scaling  # noqa: E402

LEVELS = {"zlib": (1, 3, 5, 6, 9), "zlib-ng": (1, 3, 5, 6, 9), "isal": (1, 2, 4, 6)}
LEVELS["libdeflate"] = (1, 3, 5, 6, 9)


@contextmanager
def _scan(how: str) -> Iterator[None]:
    """libdeflate's splice scan run by libz's inflate (``zlib``), or skipped (``none``)."""
    from rocm_build.wheel import rawdeflate

    original, seal = rawdeflate._final_block, rawdeflate._seal
    if how == "zlib":
        rawdeflate._final_block = functools.partial(original, scan="zlib")  # type: ignore[assignment]
    else:
        rawdeflate._final_block = lambda piece, size: (0, len(piece) * 8)  # type: ignore[assignment]
        rawdeflate._seal = lambda piece, start, end: piece  # type: ignore[assignment]
    try:
        yield
    finally:
        rawdeflate._final_block = original  # type: ignore[assignment]
        rawdeflate._seal = seal


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=Path, help="as bench_scaling.py's --sample")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", help="rows to run, e.g. zlib:6,libdeflate:5,libdeflate:6")
    args = parser.parse_args()
    only = [tuple(x.split(":")) for x in args.only.split(",")] if args.only else None
    from rocm_build.wheel import rawdeflate

    sample = bench_scaling.load_sample(args.sample)
    reference = bench_scaling.zipfile_size(sample, 6)
    print(f"sample: {len(sample) / 2**20:.0f} MiB; auditwheel (zipfile, zlib 6): {reference} bytes")
    rows: list[tuple[str, str, float, int]] = []
    for name, levels in LEVELS.items():
        if rawdeflate.implementation(name) != name:
            print(f"{name}: not installed here")
            continue
        for level in levels:
            if only is not None and (name, str(level)) not in only:
                continue
            runs = [bench_scaling.one_core_speed(sample, name, level) for _ in range(args.repeat)]
            shown = (
                f"{level} (ISA-L {rawdeflate.isal_level(level)})" if name == "isal" else str(level)
            )
            rows.append((name, shown, max(r[0] for r in runs), runs[0][1]))
            print(f"  {name} {shown}: {rows[-1][2] / 1e6:.1f} MB/s", flush=True)
    if only is not None:
        rows.sort(key=lambda row: only.index((row[0], row[1])))
        first = rows[0]
        print(
            f"\n| deflater | level | MB/s on one core | vs {first[0]} {first[1]} | size vs "
            f"auditwheel | size vs {first[0]} {first[1]} |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        for name, shown, speed, size in rows:
            print(
                f"| {name} | {shown} | {speed / 1e6:.1f} | {speed / first[2]:.2f}x | "
                f"{100 * (size / reference - 1):+.2f}% | {100 * (size / first[3] - 1):+.3f}% |"
            )
        return
    if rawdeflate.implementation("libdeflate") == "libdeflate":
        for how, label in (("zlib", "scan by libz's inflate"), ("none", "no scan: the bound")):
            with _scan(how):
                runs = [
                    bench_scaling.one_core_speed(sample, "libdeflate", 6)
                    for _ in range(args.repeat)
                ]
            rows.append((f"libdeflate ({label})", "6", max(r[0] for r in runs), runs[0][1]))
            print(f"  {rows[-1][0]} 6: {rows[-1][2] / 1e6:.1f} MB/s", flush=True)
    base = next(speed for name, level, speed, _ in rows if (name, level) == ("zlib", "6"))
    print("\n| deflater | level | MB/s on one core | vs zlib 6 | size vs auditwheel |")
    print("| --- | --- | --- | --- | --- |")
    for name, shown, speed, size in rows:
        print(
            f"| {name} | {shown} | {speed / 1e6:.1f} | {speed / base:.2f}x | "
            f"{100 * (size / reference - 1):+.2f}% |"
        )


if __name__ == "__main__":
    main()
