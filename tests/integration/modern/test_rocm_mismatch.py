"""bundle across ROCm versions, on two real trees: a wheel built against ROCm 5.2 (Debian 12's
tree) and bundled from ROCm 6.4 (sid's). Nothing here loads a sid library (that needs the sid
root); the bundle only reads them."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.integration.bundle.helpers import cc_shared, make_wheel

pytestmark = pytest.mark.slow

#: keeps the bundles small: of the libraries ROCm dlopens, only hiprtc's builtins
SMALL = {"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": "libhiprtc-builtins.so*"}


def _bundle(run_cli, cwd: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_cli(["--json", "bundle", "-z", "1", *args], cwd=cwd, env=SMALL)


def _hsa_wheel(rocm_tree: Path, tmp_path: Path) -> Path:
    """A wheel built against ROCm 5.2.3 (as build labels it): a library that NEEDs HSA, whose
    soname (libhsa-runtime64.so.1) ROCm 6.4 has too, so the 6.4 tree can resolve it."""
    ext = cc_shared(
        tmp_path / "build" / "_hsa.so",
        "int hsa_init(void);\nint start(void){return hsa_init();}\n",
        libs=[rocm_tree / "lib" / "libhsa-runtime64.so.1"],
    )
    return make_wheel(
        tmp_path / "dist",
        "hsaext",
        "1.0.0+rocm5.2.3",
        {"hsaext/_hsa.so": ext, "hsaext/__init__.py": b""},
    )


def test_another_rocm_tree_is_refused(  # type: ignore[no-untyped-def]
    run_cli, rocm_tree: Path, sid_tree: Path, tmp_path: Path
) -> None:
    wheel = _hsa_wheel(rocm_tree, tmp_path)
    out = tmp_path / "out"
    res = _bundle(run_cli, tmp_path, str(wheel), "--rocm", str(sid_tree), "--output-dir", str(out))
    assert res.returncode == 8, res.stderr
    assert "Traceback" not in res.stderr
    lines = [line for line in res.stderr.splitlines() if "rocm-build: error:" in line]
    assert len(lines) == 1, res.stderr
    assert "built with ROCm 5.2.3" in lines[0]
    assert "ROCm 6.4.3" in lines[0]
    assert "--allow-rocm-mismatch" in lines[0]
    assert not out.exists() or not list(out.glob("*.whl"))


def test_allowed_mismatch_relabels_the_wheel(  # type: ignore[no-untyped-def]
    run_cli, rocm_tree: Path, sid_tree: Path, tmp_path: Path
) -> None:
    wheel = _hsa_wheel(rocm_tree, tmp_path)
    out = tmp_path / "out"
    res = _bundle(
        run_cli, tmp_path, str(wheel), "--rocm", str(sid_tree), "--output-dir", str(out),
        "--allow-rocm-mismatch",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    fat = Path(json.loads(res.stdout)[0]["output"])
    assert fat.name.startswith("hsaext-1.0.0+rocm6.4-"), fat.name
    with zipfile.ZipFile(fat) as zf:
        names = zf.namelist()
        meta = zf.read("hsaext-1.0.0+rocm6.4.dist-info/METADATA").decode()
        record = zf.read("hsaext-1.0.0+rocm6.4.dist-info/RECORD").decode()
    assert not any("rocm5.2.3" in n for n in names), names
    assert "Version: 1.0.0+rocm6.4\n" in meta
    assert "hsaext-1.0.0+rocm6.4.dist-info/METADATA," in record
    assert "hsaext/lib/libhsa-runtime64.so.1" in names
    # pip takes it: names, METADATA and RECORD agree (sid's glibc is newer than this one's)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:",
         "--platform", fat.name.rsplit("-", 1)[1].removesuffix(".whl"), "--target", str(target),
         str(fat)],
        check=True,
    )  # fmt: skip
    assert (target / "hsaext-1.0.0+rocm6.4.dist-info" / "RECORD").is_file()

    # the setting does the same as the flag
    again = run_cli(
        ["--json", "bundle", "-z", "1", str(wheel), "--rocm", str(sid_tree), "--output-dir",
         str(tmp_path / "elsewhere"), "--dry-run"],
        cwd=tmp_path, env={**SMALL, "ROCM_BUILD_BUNDLE_ALLOW_ROCM_MISMATCH": "1"},
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[0]["plan"]["version"] == "1.0.0+rocm6.4"


def _mixed_wheel(rocm_tree: Path, sid_tree: Path, tmp_path: Path) -> Path:
    """A wheel built against ROCm 6.4 that still carries ROCm 5.2's HIP runtime, under its
    own name, in the folder the bundle puts 6.4's runtime in."""
    ext = cc_shared(
        tmp_path / "build" / "_x.so",
        "int hipGetDeviceCount(int*);\nint count(void){int n; return hipGetDeviceCount(&n);}\n",
        libs=[sid_tree / "lib" / "libamdhip64.so.6"],
    )
    old_hip = (rocm_tree / "lib" / "libamdhip64.so.5").resolve()
    return make_wheel(
        tmp_path / "dist",
        "mix",
        "1.0.0+rocm6.4.3",
        {"mix/__init__.py": b"", "mix/_x.so": ext, "mix/lib/libamdhip64.so.5": old_hip},
    )


def test_another_rocms_runtime_is_left_out(  # type: ignore[no-untyped-def]
    run_cli, rocm_tree: Path, sid_tree: Path, tmp_path: Path
) -> None:
    wheel = _mixed_wheel(rocm_tree, sid_tree, tmp_path)
    out = tmp_path / "out"
    res = _bundle(run_cli, tmp_path, str(wheel), "--rocm", str(sid_tree), "--output-dir", str(out))
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)[0]
    assert result["plan"]["left_out"] == ["mix/lib/libamdhip64.so.5"]
    with zipfile.ZipFile(result["output"]) as zf:
        names = zf.namelist()
        record = zf.read("mix-1.0.0+rocm6.4.3.dist-info/RECORD").decode()
    assert "mix/lib/libamdhip64.so.6" in names
    assert "mix/lib/libamdhip64.so.5" not in names
    assert "libamdhip64.so.5" not in record

    # the note, for people
    res = run_cli(
        ["bundle", "-z", "1", str(wheel), "--rocm", str(sid_tree), "--output-dir",
         str(tmp_path / "out2")],
        cwd=tmp_path, env=SMALL,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "left out mix/lib/libamdhip64.so.5" in res.stderr

    # kept when asked, with a warning
    kept = _bundle(
        run_cli, tmp_path, str(wheel), "--rocm", str(sid_tree), "--output-dir",
        str(tmp_path / "out3"), "--keep-other-rocm", "--dry-run",
    )  # fmt: skip
    assert kept.returncode == 0, kept.stderr
    plan = json.loads(kept.stdout)[0]["plan"]
    assert plan["left_out"] == []
    assert plan["other_rocm"] == ["mix/lib/libamdhip64.so.5"]
