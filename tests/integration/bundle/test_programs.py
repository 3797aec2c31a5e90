"""Programs in wheels (rocFFT's ``rocfft_rtc_helper`` is one): ``inspect`` says when one cannot
run once installed (not executable, or its libraries off its search path). A real program
compiled here that NEEDs the 5.2 tree's real ``libamdhip64.so.5``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.integration.bundle.helpers import make_wheel

HELPER = "x/lib/rocfft/0.0/rocfft_rtc_helper"


def _program(rocm_tree: Path, out: Path, rpath: str | None) -> Path:
    src = out.with_suffix(".c")
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(
        "int hipRuntimeGetVersion(int*);\nint main(void){int v; return hipRuntimeGetVersion(&v);}\n"
    )
    lib = rocm_tree / "lib"
    cmd = ["gcc", "-o", str(out), str(src), f"-L{lib}", "-l:libamdhip64.so.5"]
    cmd += [f"-Wl,-rpath-link,{lib}", "-Wl,--allow-shlib-undefined", "-Wl,--disable-new-dtags"]
    if rpath:
        cmd.append(f"-Wl,-rpath,{rpath}")
    subprocess.run(cmd, check=True)
    return out


def _inspect(run_cli, wheel: Path, cwd: Path) -> tuple[dict, dict]:  # type: ignore[no-untyped-def,type-arg]
    res = run_cli(["--json", "inspect", str(wheel)], cwd=cwd)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    (row,) = [r for r in data["elf_files"] if r["path"] == HELPER]
    return data, row


def test_inspect_says_a_program_cannot_run(  # type: ignore[no-untyped-def]
    run_cli, rocm_tree: Path, tmp_path: Path
) -> None:
    hip = (rocm_tree / "lib" / "libamdhip64.so.5").resolve()
    broken = _program(rocm_tree, tmp_path / "a" / "helper", None)
    broken.chmod(0o644)
    wheel = make_wheel(tmp_path / "d1", "x", "1.0", {HELPER: broken, "x/lib/libamdhip64.so.5": hip})
    data, row = _inspect(run_cli, wheel, tmp_path)
    assert row["program"]
    assert not row["program_runs"]
    assert row["program_problems"] == [
        "mode 0644, not executable",
        "cannot find libamdhip64.so.5",
    ]
    (warning,) = [w for w in data["warnings"] if HELPER in w]
    assert "cannot run once installed" in warning
    res = run_cli(["inspect", str(wheel)], cwd=tmp_path)
    assert f"the program {HELPER} cannot run once installed" in res.stdout + res.stderr

    fine = _program(rocm_tree, tmp_path / "b" / "helper", "$ORIGIN/../..")
    wheel = make_wheel(tmp_path / "d2", "x", "1.0", {HELPER: fine, "x/lib/libamdhip64.so.5": hip})
    data, row = _inspect(run_cli, wheel, tmp_path)
    assert row["program_runs"], row
    assert not [w for w in data.get("warnings", []) if HELPER in w]
    # a library is no program
    (lib,) = [r for r in data["elf_files"] if r["path"] == "x/lib/libamdhip64.so.5"]
    assert "program" not in lib
