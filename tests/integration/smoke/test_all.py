"""rocm-build all on the vecadd example, end to end: a local git repository with history,
checkout with the base patch, the project's own hipify step and the hipified patch, a build for
two gfx targets with the Debian ROCm tree, the real bundle, and smoke in a fresh environment.
Interrupted in bundle, then failing in smoke, then finishing: each run redoes only what is not
done yet."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import GIT_IDENTITY, REPO, CliRunner
from tests.support.gitrepo import make_example_repo

from .conftest import EXAMPLE

pytestmark = pytest.mark.slow


def stage_lines(stderr: str) -> dict[str, str]:
    out = {}
    for line in stderr.splitlines():
        if line.startswith("[") and "/4] " in line and ":" in line:
            stage, _, rest = line.split("] ", 1)[1].partition(":")
            out[stage] = rest.strip()
    return out


def test_all_runs_every_stage_and_resumes(
    run_cli: CliRunner,
    tmp_path: Path,
    rocm_tree: Path,
    hipify_path: Path,
    offline_wheels: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EXAMPLE / "rocm-build.toml", work)
    shutil.copytree(EXAMPLE / "patches", work / "patches")
    origin = make_example_repo(tmp_path / "vecadd-repo")
    args = [
        "all",
        "--origin",
        f"vecadd={origin}",
        "--rocm",
        str(rocm_tree),
        "--find-links",
        str(offline_wheels),
    ]
    env = {
        **os.environ,
        **GIT_IDENTITY,
        "PYTHONPATH": str(REPO),
        "TORCH_HIPIFY_PATH": str(hipify_path),
        # Level 1 keeps the bundled libLLVM quick to compress; the content is the same.
        "ROCM_BUILD_BUNDLE_COMPRESSION_LEVEL": "1",
    }
    for name in ("ROCM_PATH", "ROCM_HOME", "PYTORCH_ROCM_ARCH"):
        env.pop(name, None)
    stamps = work / ".rocm-build" / "stamps"

    # 1. Interrupted (Ctrl-C) once the build is done, while bundling.
    first = subprocess.Popen(
        [sys.executable, "-m", "rocm_build", *args],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 600
    while not (stamps / "build.json").exists() and first.poll() is None:
        assert time.monotonic() < deadline, "build did not finish"
        time.sleep(0.05)
    first.send_signal(signal.SIGINT)
    _, err1 = first.communicate(timeout=300)
    assert first.returncode != 0, err1
    assert not (stamps / "bundle.json").exists()
    built = json.loads((stamps / "build.json").read_text())["outputs"]
    (built_wheel,) = [Path(o["path"]) for o in built]
    built_mtime = built_wheel.stat().st_mtime_ns
    report = json.loads((work / ".rocm-build" / "run-report.json").read_text())
    assert report["ok"] is False
    assert report["failed_stage"] == "bundle"

    # 2. Resumes at bundle; smoke fails (an interpreter that does not exist).
    second = run_cli([*args, "--python", str(tmp_path / "no-such-python")], cwd=work, env=env)
    assert second.returncode == 3, second.stderr
    lines = stage_lines(second.stderr)
    assert lines["build"].startswith("skipped")
    assert lines["bundle"].startswith("done")
    assert "smoke failed:" in second.stderr
    assert "run `rocm-build all` again" in second.stderr
    assert built_wheel.stat().st_mtime_ns == built_mtime
    (fat_wheel,) = [
        Path(o["path"]) for o in json.loads((stamps / "bundle.json").read_text())["outputs"]
    ]
    fat_mtime = fat_wheel.stat().st_mtime_ns
    # built and fat wheels apart: the fat one in the wheelhouse's folder of its targets
    assert built_wheel.parent == work / "wheels"
    assert fat_wheel.parent == work / "wheelhouse" / "gfx1030_gfx90a"
    assert [p.name for p in (work / "wheels").glob("*.whl")] == [built_wheel.name]

    # 3. Finishes: only smoke runs, on the real fat wheel, with the example's two targets.
    third = run_cli(["--json", *args], cwd=work, env=env)
    assert third.returncode == 0, third.stderr
    data = json.loads(third.stdout)
    assert [(s["stage"], s["status"]) for s in data["stages"]] == [
        ("checkout", "skipped"),
        ("build", "skipped"),
        ("bundle", "skipped"),
        ("smoke", "ran"),
    ]
    assert fat_wheel.stat().st_mtime_ns == fat_mtime
    # smoke says how many tests ran, not only that it ran
    assert data["stages"][-1]["reason"].startswith(
        f"{data['smoke']['passed'] + data['smoke']['skipped']} tests: "
    )
    assert data["ok"] is True
    assert data["targets"] == ["gfx90a", "gfx1030"]
    (src,) = data["sources"]
    assert src["hipify"] is True
    assert [p["file"] for p in src["patches"]] == [
        "base/0001-Launch-256-thread-blocks.patch",
        "hipified/0001-Declare-the-kernel-s-launch-bounds.patch",
    ]
    (fat,) = data["wheels"]["bundled"]
    assert fat["path"] == str(fat_wheel)  # the run report names the real path
    assert fat["name"].startswith("vecadd-1.0.0+rocm5.2-cp")
    assert "manylinux" in fat["name"]
    assert len(fat["sha256"]) == 64
    smoke = data["smoke"]
    assert smoke["ok"] is True
    assert smoke["failed"] == 0
    assert smoke["code_object_targets"] == {"vecadd": ["gfx1030", "gfx90a"]}
    assert smoke["hip"]["rc"] == 100
    assert "/site-packages/vecadd/lib/" in smoke["hip"]["path"]
    markdown = Path(data["markdown"]).read_text()
    assert "# rocm-build run: passed" in markdown
    assert "| smoke | ran |" in markdown

    # The checkout holds the hipify commit between the two patches.
    log = subprocess.run(
        ["git", "log", "--format=%s"],
        cwd=work / "src" / "vecadd",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert log[0] == "Declare the kernel's launch bounds"
    assert log[1].startswith("rocm-build: hipify")
    assert log[2] == "Launch 256-thread blocks"

    # 4. Nothing to do: every stage skipped.
    fourth = run_cli(args, cwd=work, env=env)
    assert fourth.returncode == 0, fourth.stderr
    assert all(v.startswith("skipped") for v in stage_lines(fourth.stderr).values())

    # 5. The developer loop right after a build: the build's outputs in the checkout are not
    #    taken for unsaved work, so save-patches keeps the series as it is.
    patch_files = sorted((work / "patches").rglob("*.patch"))
    before = {p: p.read_bytes() for p in patch_files}
    saved = run_cli(["save-patches", "vecadd"], cwd=work, env=env)
    assert saved.returncode == 0, saved.stderr
    assert sorted((work / "patches").rglob("*.patch")) == patch_files
    assert {p: p.read_bytes() for p in patch_files} == before


def test_all_says_what_it_did_quietly_redone_and_dry(
    run_cli: CliRunner,
    tmp_path: Path,
    rocm_tree: Path,
    hipify_path: Path,
    offline_wheels: Path,
) -> None:
    """-q still names the results; --redo that keeps the same wheels says so; --dry-run says
    per stage what it would do and changes nothing. (Every check is made, then all are told.)"""
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EXAMPLE / "rocm-build.toml", work)
    shutil.copytree(EXAMPLE / "patches", work / "patches")
    origin = make_example_repo(tmp_path / "vecadd-repo")
    args = ["all", "--origin", f"vecadd={origin}", "--rocm", str(rocm_tree), "--no-smoke"]
    args += ["--find-links", str(offline_wheels)]
    env = {"TORCH_HIPIFY_PATH": str(hipify_path), "ROCM_BUILD_BUNDLE_COMPRESSION_LEVEL": "1"}
    first = run_cli(args, cwd=work, env=env)
    assert first.returncode == 0, first.stderr
    wrong: list[str] = []
    report_md = work / ".rocm-build" / "run-report.md"

    # -q: no stage lines, but the fat wheel and the run report, one line each
    quiet = run_cli(["-q", *args], cwd=work, env=env)
    assert quiet.returncode == 0, quiet.stderr
    lines = quiet.stdout.splitlines()
    fats = list((work / "wheelhouse").glob("*/*.whl"))
    if len(lines) != 2 or [lines[0]] != [str(f) for f in fats] or lines[1] != str(report_md):
        wrong.append(f"-q all printed {quiet.stdout!r}")

    # --redo: build and bundle run again, and keep the same wheels: not a bare "ran"
    redo = run_cli([*args, "--redo"], cwd=work, env=env)
    assert redo.returncode == 0, redo.stderr
    said = stage_lines(redo.stderr)
    for stage in ("build", "bundle"):
        if "(output unchanged: " not in said.get(stage, ""):
            wrong.append(f"--redo {stage}: {said.get(stage)!r}")
    summary = [line.strip() for line in redo.stdout.splitlines() if line.strip()]
    if not any(s.startswith("build: ran (") and "output unchanged" in s for s in summary):
        wrong.append(f"--redo summary: {redo.stdout!r}")

    # --dry-run: each stage and what it would do; nothing written
    stamps = work / ".rocm-build" / "stamps"
    before = {p.name: p.stat().st_mtime_ns for p in [*stamps.iterdir(), report_md]}
    dry = run_cli([*args, "--dry-run"], cwd=work, env=env)
    if dry.returncode != 0:
        wrong.append(f"all --dry-run: exit {dry.returncode}: {dry.stderr[-400:]}")
    else:
        out = dry.stdout
        for want in ("checkout:", "build: would be skipped", "bundle: would be skipped"):
            if want not in out:
                wrong.append(f"all --dry-run has no {want!r}: {out!r}")
        if "smoke: not run (--no-smoke)" not in out:
            wrong.append(f"all --dry-run smoke line: {out!r}")
        after = {p.name: p.stat().st_mtime_ns for p in [*stamps.iterdir(), report_md]}
        if after != before:
            wrong.append("all --dry-run wrote files")
    # a changed setting: the dry run names the stage that would run and why
    dry2 = run_cli([*args, "--dry-run", "--cache", "none"], cwd=work, env=env)
    if "build: would run: its inputs changed (settings)" not in dry2.stdout:
        wrong.append(f"all --dry-run --cache none: {dry2.stdout!r} {dry2.stderr[-300:]!r}")
    assert not wrong, "\n".join(wrong)
