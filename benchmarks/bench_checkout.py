"""Checkout benchmark: a fresh checkout vs a re-run on unchanged inputs.

Generates (once, cached in benchmarks/_work) an upstream of about 20,000 files with 5 submodules
(one nested), a fixture hipify script and a small base/hipified patch series, served over file://.
Then times, in this process, ``sources.execute`` for a fresh checkout and for a re-run, and the
same two through the CLI as separate processes (what a user sees, interpreter start included).

    python benchmarks/bench_checkout.py [--files 20000] [--submodules 5] [--repeat 3]

Target: the re-run takes under 2 s and under 5% of the fresh checkout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

from rocm_build import config, sources  # noqa: E402
from rocm_build.run import context  # noqa: E402

IDENTITY = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@localhost.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@localhost.invalid",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z",
}

HIPIFY = """\
import pathlib
for cu in sorted(pathlib.Path.cwd().glob("src/d0/*.cu"))[:50]:
    cu.with_suffix(".hip").write_text(cu.read_text().replace("cuda", "hip"))
sub = pathlib.Path("third_party/sub0/s0.cu")
sub.with_suffix(".hip").write_text(sub.read_text().replace("cuda", "hip"))
"""


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, **IDENTITY, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def fill(repo: Path, prefix: str, count: int, per_dir: int = 500) -> None:
    body = "// generated source {i}\n" + "int f_{i}(int x) {{ return cudaThing(x) + {i}; }}\n" * 20
    for i in range(count):
        d = repo / "src" / f"d{i // per_dir}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{prefix}{i}.cu").write_text(body.format(i=i))


def generate(base: Path, files: int, submodules: int) -> Path:
    stamp = base / f"done-{files}-{submodules}"
    if stamp.exists():
        return base / "up"
    shutil.rmtree(base, ignore_errors=True)
    up = base / "up"
    per_sub = files // (4 * submodules)
    root_files = files - per_sub * submodules
    subs: list[Path] = []
    nested = up / "nested"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    fill(nested, "n", 50)
    git(nested, "add", "-A")
    git(nested, "commit", "-q", "-m", "nested")
    for s in range(submodules):
        sub = up / f"sub{s}"
        sub.mkdir(parents=True)
        git(sub, "init", "-q")
        fill(sub, f"s{s}_", per_sub)
        (sub / f"s{s}.cu").write_text("int cuda_sub(void) { return 0; }\n")
        git(sub, "add", "-A")
        git(sub, "commit", "-q", "-m", f"sub{s}")
        if s == 0:
            git(sub, "submodule", "add", "-q", nested.as_uri(), "third_party/nested")
            git(sub, "commit", "-q", "-m", "nested submodule")
        subs.append(sub)
    root = up / "proj"
    root.mkdir()
    git(root, "init", "-q")
    fill(root, "r", root_files)
    (root / "tools").mkdir()
    (root / "tools/hipify.py").write_text(HIPIFY)
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "root")
    for s, sub in enumerate(subs):
        git(root, "submodule", "add", "-q", sub.as_uri(), f"third_party/sub{s}")
    git(root, "commit", "-q", "-m", "submodules")
    git(root, "tag", "v1")
    stamp.write_text("ok\n")
    return up


def write_patches(work: Path, up: Path) -> None:
    """A real base series (root and a submodule) made with git format-patch."""
    root = work / "patches" / "bench" / "proj"
    shutil.rmtree(root, ignore_errors=True)
    for origin, rel, target in (
        ("proj", "src/d1/r500.cu", "base"),
        ("proj", "src/d2/r1000.cu", "base"),
        ("sub1", "src/d0/s1_0.cu", "third_party/sub1/base"),
    ):
        scratch = work / "scratch"
        shutil.rmtree(scratch, ignore_errors=True)
        git(work, "clone", "-q", "--depth", "1", (up / origin).as_uri(), str(scratch))
        path = scratch / rel
        path.write_text(path.read_text() + "// patched\n")
        git(scratch, "commit", "-q", "-am", f"patch {rel}")
        dest = root / target
        dest.mkdir(parents=True, exist_ok=True)
        n = len(list(dest.glob("*.patch"))) + 1
        (dest / f"{n:04d}-patch.patch").write_text(
            git(scratch, "format-patch", "-1", "--stdout") + "\n"
        )
        shutil.rmtree(scratch)


def configure(work: Path, up: Path) -> None:
    (work / "rocm-build.toml").write_text(
        f'patchset = "bench"\n\n[projects.proj]\norigin = "{(up / "proj").as_uri()}"\n'
        'ref = "v1"\nhipify = ["{python}", "tools/hipify.py"]\n'
    )


def in_process(work: Path) -> float:
    cfg = config.load(cwd=work, env={})
    start = time.perf_counter()
    sources.execute(sources.plan(context.resolve(cfg), ["proj"]))
    return time.perf_counter() - start


def cli(work: Path) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCM_BUILD_")}
    env["PYTHONPATH"] = str(REPO)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "rocm_build", "-q", "checkout", "proj"],
        cwd=work,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=20000)
    parser.add_argument("--submodules", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    base = HERE / "_work" / "checkout"
    t0 = time.perf_counter()
    up = generate(base, args.files, args.submodules)
    took = time.perf_counter() - t0
    print(f"upstream: {args.files} files, {args.submodules} submodules ({took:.1f}s)")
    fresh_in: list[float] = []
    rerun_in: list[float] = []
    fresh_cli: list[float] = []
    rerun_cli: list[float] = []
    for _ in range(args.repeat):
        for mode, fresh_list, rerun_list, runner in (
            ("in-process", fresh_in, rerun_in, in_process),
            ("cli", fresh_cli, rerun_cli, cli),
        ):
            work = base / f"work-{mode}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            configure(work, up)
            write_patches(work, up)
            fresh_list.append(runner(work))
            rerun_list.append(runner(work))
    for label, fresh, rerun in (
        ("in-process (sources.execute)", fresh_in, rerun_in),
        ("CLI process (rocm-build checkout)", fresh_cli, rerun_cli),
    ):
        f, r = statistics.median(fresh), statistics.median(rerun)
        print(f"{label}: fresh {f:.2f}s, re-run {r:.3f}s, ratio {100 * r / f:.1f}%")
    r = statistics.median(rerun_cli)
    f = statistics.median(fresh_cli)
    ok = r < 2.0 and r / f < 0.05
    print(f"target (re-run < 2 s and < 5% of fresh, CLI): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
