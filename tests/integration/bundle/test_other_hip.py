"""Every HIP runtime in a wheel is accounted for (issue 30): a second ``libamdhip64.so.*``
anywhere in the wheel, not only in the folder the bundle puts the tree's runtime in, is left out
with a note, or kept as it is with a warning (``--keep-other-rocm``), never silently linked
against the tree's HSA. Real wheels around the 5.2 tree's real ``libamdhip64.so.5``."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

from rocm_build.binary import elf
from tests.integration.bundle.helpers import cc_shared, make_wheel

from .runs import SMALL

#: keeps the bundles small: of the libraries ROCm dlopens, only hiprtc's builtins
#: a copy of HIP by its file name in the tree, which nothing NEEDs
VENDOR = "x/_vendor/libamdhip64.so.5.2.21153"
#: a copy of HIP by its soname, which the extension NEEDs
USED = "x/_vendor/libamdhip64.so.5"


def _wheel(rocm_tree: Path, tmp_path: Path, vendor: str = VENDOR) -> Path:
    """An extension that NEEDs HIP (``libamdhip64.so.5``) and a copy of HIP at ``vendor``."""
    hip = rocm_tree / "lib" / "libamdhip64.so.5"
    ext = cc_shared(
        tmp_path / "build" / "_x.so",
        "int hipGetDeviceCount(int*);\nint count(void){int n; return hipGetDeviceCount(&n);}\n",
        libs=[hip],
    )
    files = {"x/__init__.py": b"", "x/_x.so": ext, vendor: hip.resolve()}
    return make_wheel(tmp_path / "dist", "x", "1.0.0", files)


def test_an_unused_hip_runtime_outside_the_library_folder_is_left_out(  # type: ignore[no-untyped-def]
    run_cli, rocm_tree: Path, tmp_path: Path
) -> None:
    wheel = _wheel(rocm_tree, tmp_path)
    base = ["bundle", "-z", "1", str(wheel), "--rocm", str(rocm_tree), "--output-dir"]
    res = run_cli(["--json", *base, str(tmp_path / "o1")], cwd=tmp_path, env=SMALL)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)[0]
    assert result["plan"]["left_out"] == [VENDOR]
    with zipfile.ZipFile(result["output"]) as zf:
        names = zf.namelist()
    assert VENDOR not in names
    assert f"{result['plan']['lib_dir']}/libamdhip64.so.5" in names  # the tree's, used
    res = run_cli([*base, str(tmp_path / "o2")], cwd=tmp_path, env=SMALL)
    assert res.returncode == 0, res.stderr
    assert f"left out {VENDOR}" in res.stderr


def test_a_kept_hip_runtime_is_kept_as_it_is_with_a_warning(  # type: ignore[no-untyped-def]
    run_cli, rocm_tree: Path, tmp_path: Path
) -> None:
    wheel = _wheel(rocm_tree, tmp_path)
    base = ["bundle", "-z", "1", str(wheel), "--rocm", str(rocm_tree), "--keep-other-rocm"]
    res = run_cli(["--json", *base, "--output-dir", str(tmp_path / "o1")], cwd=tmp_path, env=SMALL)
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)[0]
    assert result["plan"]["other_rocm"] == [VENDOR]
    assert VENDOR not in [r["arcname"] for r in result["plan"]["rpaths"]]
    with zipfile.ZipFile(wheel) as zf:
        before = zf.read(VENDOR)
    with zipfile.ZipFile(result["output"]) as zf:
        assert zf.read(VENDOR) == before  # not linked against the tree's HSA
    res = run_cli([*base, "--output-dir", str(tmp_path / "o2")], cwd=tmp_path, env=SMALL)
    assert res.returncode == 0, res.stderr
    assert f"warning: kept {VENDOR}" in res.stderr


def test_a_wheels_own_hip_runtime_in_use_is_said(  # type: ignore[no-untyped-def]
    run_cli, rocm_tree: Path, tmp_path: Path
) -> None:
    wheel = _wheel(rocm_tree, tmp_path, USED)
    base = ["bundle", "-z", "1", str(wheel), "--rocm", str(rocm_tree), "--output-dir"]
    res = run_cli(["--json", *base, str(tmp_path / "o1"), "--dry-run"], cwd=tmp_path, env=SMALL)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)[0]["plan"]
    assert plan["own_hip"] == [USED]
    assert plan["left_out"] == []
    res = run_cli([*base, str(tmp_path / "o2")], cwd=tmp_path, env=SMALL)
    assert res.returncode == 0, res.stderr
    assert f"warning: the wheel's own HIP runtime {USED} is used in place of the tree's" in (
        res.stderr
    )
    assert "Triton finds it as x/lib/libamdhip64.so (a stub that loads it)" in res.stderr
    # The name Triton opens loads the wheel's own runtime, the one the extension uses.
    assert plan["own_hip_alias"] == "x/lib/libamdhip64.so"
    (fat,) = (tmp_path / "o2").glob("*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(fat) as zf:
        zf.extractall(site)
    stub = site / "x/lib/libamdhip64.so"
    assert elf.read_elf(stub).needed == ("libamdhip64.so.5",)
    assert elf.read_elf(stub).search_path == ("$ORIGIN/../_vendor",)
    probe = (
        "import ctypes, sys\n"
        "ctypes.CDLL(sys.argv[1])\n"
        "print('\\n'.join(l.split()[-1] for l in open('/proc/self/maps') if 'amdhip64' in l))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", probe, str(stub)], capture_output=True, text=True, check=True
    )
    runtimes = {Path(line).resolve() for line in ran.stdout.split()} - {stub.resolve()}
    assert runtimes == {(site / USED).resolve()}, ran.stdout
