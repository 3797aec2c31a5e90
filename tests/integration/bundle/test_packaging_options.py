"""bundle with auditwheel's and delvewheel's conventions, on a real HIP wheel and the real ROCm
5.2.3 tree: ``-w/--wheel-dir``, ``--exclude``, ``--plat``, and cibuildwheel's repair command."""

from __future__ import annotations

import json
import shlex
import zipfile
from pathlib import Path

import pytest

from rocm_build.binary import elf

from .runs import SMALL

pytestmark = pytest.mark.slow

# The HIP runtime dlopen()s comgr (libLLVM: ~300 MB); the small hiprtc-builtins stands in.

#: What a project's pyproject.toml gives cibuildwheel ([tool.cibuildwheel.linux]); cibuildwheel
#: fills in {wheel} (the built wheel, in a folder of its own) and {dest_dir}.
REPAIR = "rocm-build bundle {wheel} -w {dest_dir} --rocm {rocm} --arch gfx90a -z 1"


def test_cibuildwheel_repair_command(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    dest = tmp_path / "cibw" / "repaired"  # not there yet: cibuildwheel makes a fresh one
    command = REPAIR.format(
        wheel=shlex.quote(str(hip_ext_wheel)),
        dest_dir=shlex.quote(str(dest)),
        rocm=shlex.quote(str(tree_copy)),
    )
    argv = shlex.split(command)
    assert argv[0] == "rocm-build"
    elsewhere = tmp_path / "project"
    elsewhere.mkdir()
    res = run_cli(argv[1:], cwd=elsewhere, env=SMALL)
    assert res.returncode == 0, res.stderr
    (fat,) = dest.glob("*.whl")
    assert fat.name.startswith("hipext-1.0.0-")
    assert "manylinux_" in fat.name
    assert "hipext/lib/libamdhip64.so.5" in zipfile.ZipFile(fat).namelist()
    assert not (elsewhere / "wheelhouse").exists()  # nothing in the default folder
    assert [p.name for p in hip_ext_wheel.parent.iterdir()] == [hip_ext_wheel.name]
    assert str(fat) in res.stdout


def test_exclude_leaves_the_library_needed(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    args = ["bundle", str(hip_ext_wheel), "--rocm", str(tree_copy), "-w", str(out), "-z", "1"]
    res = run_cli(["--json", *args, "--exclude", "libamdhip64.so.*"], cwd=tmp_path, env=SMALL)
    assert res.returncode == 0, res.stderr
    (result,) = json.loads(res.stdout)
    assert result["plan"]["excluded"] == [
        {"name": "libamdhip64.so.5", "needed_by": ["hipext/_kern.so"]}
    ]
    (fat,) = out.glob("*.whl")
    names = zipfile.ZipFile(fat).namelist()
    # neither HIP nor what only HIP needs (HSA) came in
    assert not [n for n in names if "libamdhip64" in n or "libhsa-runtime64" in n]
    kern = tmp_path / "_kern.so"
    kern.write_bytes(zipfile.ZipFile(fat).read("hipext/_kern.so"))
    assert "libamdhip64.so.5" in elf.read_elf(kern).needed
    assert "manylinux_" in fat.name  # as auditwheel: not counted against the tag
    data = json.loads(run_cli(["--json", "inspect", str(fat)], cwd=tmp_path).stdout)
    (row,) = [r for r in data["elf_files"] if r["path"] == "hipext/_kern.so"]
    assert (row["excluded"], row["unresolved"]) == (["libamdhip64.so.5"], [])
    assert data["excluded"] == ["libamdhip64.so.5"]
    text = run_cli(["inspect", str(fat)], cwd=tmp_path).stdout
    assert "EXCLUDED (bundle --exclude; found at run time): libamdhip64.so.5" in text
    assert "NOT IN THE WHEEL" not in text
    # the same wheel without --exclude carries HIP (the output is not taken as up to date)
    again = json.loads(run_cli(["--json", *args], cwd=tmp_path, env=SMALL).stdout)[0]
    assert again["status"] == "bundled"
    fat = Path(again["output"])
    assert "hipext/lib/libamdhip64.so.5" in zipfile.ZipFile(fat).namelist()


def test_plat(run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    args = ["bundle", str(hip_ext_wheel), "--rocm", str(tree_copy), "-w", str(out), "-z", "1"]
    plain = run_cli(["--json", *args, "--dry-run"], cwd=tmp_path, env=SMALL)
    assert plain.returncode == 0, plain.stderr
    best = json.loads(plain.stdout)[0]["plan"]["platform_tag"].split(".")[0]
    minor = int(best.removeprefix("manylinux_2_").removesuffix("_x86_64"))
    assert minor > 5
    # older than the files need: one line, exit 10, nothing written
    low = run_cli([*args, "--plat", "manylinux_2_5_x86_64"], cwd=tmp_path, env=SMALL)
    assert low.returncode == 10, low.stderr
    # (after the settings the failed run was made with)
    lines = [line for line in low.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, low.stderr
    assert lines[0].startswith("rocm-build: error: --plat manylinux_2_5_x86_64: ")
    assert f"need glibc 2.{minor} ({best})" in lines[0]
    assert f"pass --plat {best}" in lines[0]
    assert not out.exists() or not list(out.glob("*.whl"))
    # not a manylinux tag: exit 2 before anything is read
    bad = run_cli([*args, "--plat", "musllinux_1_2_x86_64"], cwd=tmp_path, env=SMALL)
    assert bad.returncode == 2
    assert "--plat" in bad.stderr
    assert "manylinux" in bad.stderr
    # a newer tag than needed names the file
    wanted = f"manylinux_2_{minor + 1}_x86_64"
    ok = run_cli([*args, "--plat", wanted], cwd=tmp_path, env=SMALL)
    assert ok.returncode == 0, ok.stderr
    (fat,) = out.glob("*.whl")
    assert fat.name.endswith(f"-{wanted}.whl")
    # --policy is the same flag; bundle.policy the setting
    env = {**SMALL, "ROCM_BUILD_BUNDLE_POLICY": "manylinux_2_5"}
    assert run_cli(args, cwd=tmp_path, env=env).returncode == 10


def test_a_fat_wheel_for_other_targets_is_not_replaced_silently(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    base = ["bundle", str(hip_ext_wheel), "--rocm", str(tree_copy), "-w", str(out), "-z", "1"]
    first = run_cli([*base, "--arch", "gfx90a"], cwd=tmp_path, env=SMALL)
    assert first.returncode == 0, first.stderr
    assert "warning: replaces" not in first.stderr  # nothing there yet
    planned = run_cli(["--json", *base, "--arch", "gfx1030", "--dry-run"], cwd=tmp_path, env=SMALL)
    assert json.loads(planned.stdout)[0]["plan"]["replaces_targets"] == ["gfx90a"]
    second = run_cli([*base, "--arch", "gfx1030"], cwd=tmp_path, env=SMALL)
    assert second.returncode == 0, second.stderr
    (fat,) = out.glob("*.whl")
    assert f"warning: replaces {fat.name}, bundled for gfx90a (now gfx1030)" in second.stderr
    assert "-w DIR" in second.stderr
    again = run_cli([*base, "--arch", "gfx1030"], cwd=tmp_path, env=SMALL)
    assert again.returncode == 0, again.stderr
    assert "warning: replaces" not in again.stderr  # the same targets: up to date
