"""rocFFT's helper program on sid's ROCm 6.4: rocFFT runs ``lib/rocfft/<version>/rocfft_rtc_helper``
to compile its kernels, so every wheel that carries rocFFT carries the helper executable, with a
search path to the libraries it needs (``libamdhip64.so.6``) as the libraries have theirs, and
``inspect`` says when a program in a wheel cannot run. Nothing here runs a sid program (that needs
the sid root): the files are read."""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from rocm_build.binary import elf
from tests.integration.bundle.helpers import cc_shared, make_wheel

pytestmark = pytest.mark.slow

HELPER = "rocfft_rtc_helper"
#: keeps the bundles small: of the libraries ROCm dlopens, only hiprtc's builtins
SMALL = {"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": "libhiprtc-builtins.so*"}


def _small_tree(sid_tree: Path, dest: Path) -> Path:
    """The sid tree's HIP runtime, rocFFT and its helper (hard links where the file system
    allows): ``rocm wheels`` of the whole tree writes gigabytes."""
    wanted = ["libamdhip64.so*", "libhsa-runtime64.so*", "librocfft.so*"]
    (dest / "lib").mkdir(parents=True)
    shutil.copytree(sid_tree / ".info", dest / ".info")
    for pattern in wanted:
        for path in (sid_tree / "lib").glob(pattern):
            _place(path, dest / "lib" / path.name)
    for path in (sid_tree / "lib" / "rocfft").rglob("*"):
        if path.is_file():
            _place(path, dest / path.relative_to(sid_tree))
    return dest


def _place(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        dest.symlink_to(src.readlink())
        return
    try:
        os.link(src, dest)
    except OSError:
        shutil.copy2(src, dest)


def _member(zf: zipfile.ZipFile, tmp: Path) -> tuple[str, int, elf.ElfInfo]:
    """The helper in a wheel: its name, mode and ELF facts."""
    (name,) = [n for n in zf.namelist() if n.endswith("/" + HELPER)]
    out = tmp / HELPER
    out.write_bytes(zf.read(name))
    return name, zf.getinfo(name).external_attr >> 16 & 0o777, elf.read_elf(out)


def test_rocm_wheels_ship_the_helper_executable_and_able_to_find_hip(  # type: ignore[no-untyped-def]
    run_cli, sid_tree: Path, tmp_path: Path
) -> None:
    assert (sid_tree / "lib/rocfft").is_dir(), "the sid tree has rocFFT's helper"
    tree = _small_tree(sid_tree, tmp_path / "tree")
    out = tmp_path / "out"
    res = run_cli(
        ["--json", "rocm", "wheels", str(tree), "--output-dir", str(out), "-z", "1"], cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    (libraries,) = out.glob("rocm_sdk_libraries_all-*.whl")
    with zipfile.ZipFile(libraries) as zf:
        name, mode, info = _member(zf, tmp_path)
    assert name == "_rocm_sdk_libraries_all/lib/rocfft/1.0.32/rocfft_rtc_helper"
    assert mode == 0o755  # as in the tree
    assert "libamdhip64.so.6" in info.needed
    # its package's lib/ first, then core's folders (libamdhip64.so.6 is core's)
    assert info.rpath[0] == "$ORIGIN/../.."
    assert "$ORIGIN/../../../../_rocm_sdk_core/lib" in info.rpath
    # the package's tag counts the helper too: the name and inspect agree
    res = run_cli(["--json", "inspect", str(libraries)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    (row,) = [r for r in data["elf_files"] if r["path"] == name]
    assert row["program"], row
    assert row["program_runs"], row
    assert data["platform_tag"] == data["file_platform_tag"]
    assert not [w for w in data.get("warnings", []) if HELPER in w]
    # inspected with core's wheel (installed together): every library the package takes from
    # outside it is found in one of core's folders, checked, and installed by its Requires-Dist
    (core,) = out.glob("rocm_sdk_core-*.whl")
    res = run_cli(["--json", "inspect", str(libraries), str(core)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)[0]["elf_files"]
    found = [w for r in rows for ws in r["from_packages"].values() for w in ws]
    assert found, "the libraries package needs core's libraries"
    for where in found:
        assert where["checked"], where
        assert where["distribution"] == "rocm-sdk-core", where
        assert where["requirement"].startswith("rocm-sdk-core=="), where


def test_a_fat_bundle_of_rocfft_carries_its_helper(  # type: ignore[no-untyped-def]
    run_cli, sid_tree: Path, tmp_path: Path
) -> None:
    ext = cc_shared(
        tmp_path / "build" / "_fft.so",
        "int rocfft_setup(void);\nint start(void){return rocfft_setup();}\n",
        libs=[sid_tree / "lib" / "librocfft.so.0"],
    )
    wheel = make_wheel(
        tmp_path / "dist", "fft", "1.0.0+rocm6.4.3", {"fft/__init__.py": b"", "fft/_fft.so": ext}
    )
    out = tmp_path / "out"
    res = run_cli(
        ["--json", "bundle", "-z", "1", str(wheel), "--rocm", str(sid_tree), "--output-dir",
         str(out)],
        cwd=tmp_path, env=SMALL,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)[0]
    lib_dir = result["plan"]["lib_dir"]
    with zipfile.ZipFile(result["output"]) as zf:
        name, mode, info = _member(zf, tmp_path)
        assert f"{lib_dir}/libamdhip64.so.6" in zf.namelist()
    assert name == f"{lib_dir}/rocfft/1.0.32/{HELPER}"
    assert mode == 0o755
    assert info.rpath == ("$ORIGIN/../..",)  # lib_dir, where libamdhip64.so.6 is
    res = run_cli(["--json", "inspect", result["output"]], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (row,) = [r for r in json.loads(res.stdout)["elf_files"] if r["path"] == name]
    assert row["program"], row
    assert row["program_runs"], row
