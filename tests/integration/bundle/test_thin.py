"""Thin wheels on the real ROCm 5.2.3 tree: ``rocm wheels`` packages the tree as ROCm's Python
packages; a thin wheel depends on them. No GPU here: the HIP runtime must load from the
packages in a fresh venv and report hipErrorNoDevice (100); everything else is real.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rocm_build.binary import elf

from .conftest import make_venv

pytestmark = pytest.mark.slow

LOAD_LIBRARIES = r"""
import ctypes, json, os, sys, sysconfig
site = sysconfig.get_paths()["platlib"]
lib = ctypes.CDLL(os.path.join(site, "_rocm_sdk_libraries_all", "lib", "librocrand.so.1"))
hip = ctypes.CDLL("libamdhip64.so.5")  # already loaded through librocrand's search path
n = ctypes.c_int(-1)
status = hip.hipGetDeviceCount(ctypes.byref(n))
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
print(json.dumps({"status": status, "maps": maps}))
"""


def _pip(python: Path, *args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args]
    subprocess.run(cmd, check=True)


def _rocm_wheels(run_cli, tree: Path, out: Path):  # type: ignore[no-untyped-def]
    return run_cli(
        ["--json", "rocm", "wheels", str(tree), "--output-dir", str(out), "-z", "1"],
        cwd=out.parent,
    )


def test_rocm_wheels_have_rocms_names_and_run_without_the_tree(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    data = {  # data trees as a full tree has them (the 5.2 test tree has none)
        "lib/rocblas/library/TensileLibrary_gfx90a.dat": "libraries",
        "share/miopen/db/gfx90a68.db": "libraries",
        "lib/rocm_sysdeps/share/libdrm/amdgpu.ids": "core",
    }
    for rel in data:
        (tree_copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree_copy / rel).write_text(rel)
    out = tmp_path / "rocm-wheels"
    res = _rocm_wheels(run_cli, tree_copy, out)
    assert res.returncode == 0, res.stderr
    made = sorted(Path(p).name for p in json.loads(res.stdout))
    assert made[0] == "rocm-5.2.3-py3-none-any.whl"
    # core carries what libLLVM needs from this machine, so its tag is a manylinux one
    assert re.fullmatch(r"rocm_sdk_core-5\.2\.3-py3-none-manylinux_2_\d+_x86_64\.whl", made[1])
    # the libraries package requires core (whose libraries it needs): its tag is its own files'
    assert re.fullmatch(
        r"rocm_sdk_libraries_all-5\.2\.3-py3-none-manylinux_2_\d+_x86_64\.whl", made[2]
    )
    with zipfile.ZipFile(out / made[1]) as zf:
        core = set(zf.namelist())
        meta = zf.read("rocm_sdk_core-5.2.3.dist-info/METADATA").decode()
    assert "Name: rocm-sdk-core\n" in meta
    assert "Version: 5.2.3\n" in meta
    for name in (
        "lib/libamdhip64.so.5",
        "lib/libhsa-runtime64.so.1",
        "lib/libamd_comgr.so.2",
        "lib/rocm_sysdeps/lib/libnuma.so.1",
        "lib/llvm/lib/libLLVM-15.so.1",
        "lib/rocm_sysdeps/lib/libffi.so.8",  # libLLVM's, from this machine (not in the tree)
    ):
        assert f"_rocm_sdk_core/{name}" in core
    assert not any("rocrand" in n for n in core)
    assert "_rocm_sdk_core/lib/rocm_sysdeps/share/libdrm/amdgpu.ids" in core
    with zipfile.ZipFile(out / made[2]) as zf:
        assert "_rocm_sdk_libraries_all/lib/librocrand.so.1" in zf.namelist()
        for rel, package in data.items():
            assert (f"_rocm_sdk_libraries_all/{rel}" in zf.namelist()) == (package == "libraries")
        zf.extract("_rocm_sdk_libraries_all/lib/librocrand.so.1", tmp_path / "x")
    info = elf.read_elf(tmp_path / "x/_rocm_sdk_libraries_all/lib/librocrand.so.1")
    assert "$ORIGIN/../../_rocm_sdk_core/lib" in info.search_path

    python = make_venv(tmp_path / "venv")
    # pip resolves the meta package's requirements from the folder alone
    _pip(python, "--no-index", "--find-links", str(out), "rocm[libraries]==5.2.3")
    _runs_on_the_packages(python, LOAD_LIBRARIES, tree_copy, tmp_path / "gone")


def _runs_on_the_packages(python: Path, code: str, tree: Path, gone: Path) -> None:
    """With the tree moved away, ``code`` (printing {"status", "maps"}) loads HIP from the
    ``_rocm_sdk_core`` package and nothing from the tree."""
    tree.rename(gone)
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["status"] == 100  # hipErrorNoDevice: no GPU on this machine, the runtime loaded
    hip = [m for m in got["maps"] if "libamdhip64" in m]
    assert hip
    assert all("/_rocm_sdk_core/lib/" in m for m in hip)
    assert not any(str(tree) in m for m in got["maps"])


CHECK = r"""
import json
import hipext
status, count = hipext.device_count_status()
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
print(json.dumps({"status": status, "maps": maps}))
"""


def _thin(run_cli, wheel: Path, tree: Path, out: Path):  # type: ignore[no-untyped-def]
    return run_cli(
        ["bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out), "-z", "1",
         "--mode", "thin"],
        cwd=wheel.parent,
    )  # fmt: skip


def test_thin_wheel_runs_on_the_rocm_packages_without_the_tree(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "index"
    res = _thin(run_cli, hip_ext_wheel, tree_copy, out)
    assert res.returncode == 0, res.stderr
    (thin,) = out.glob("hipext-*.whl")
    with zipfile.ZipFile(thin) as zf:
        names = zf.namelist()
        meta = zf.read("hipext-1.0.0.dist-info/METADATA").decode()
        zf.extract("hipext/_kern.so", tmp_path / "x")
    assert not [n for n in names if ".so" in n and n != "hipext/_kern.so"]  # no ROCm library
    assert "Requires-Dist: rocm-sdk-core==5.2.3\n" in meta
    assert "rocm-sdk-libraries" not in meta  # the extension needs none of them
    info = elf.read_elf(tmp_path / "x/hipext/_kern.so")
    assert "$ORIGIN/../_rocm_sdk_core/lib" in info.search_path

    assert _rocm_wheels(run_cli, tree_copy, out).returncode == 0
    python = make_venv(tmp_path / "venv")
    # pip finds rocm-sdk-core through hipext's Requires-Dist, in the folder alone
    _pip(python, "--no-index", "--find-links", str(out), "hipext")
    _runs_on_the_packages(python, CHECK, tree_copy, tmp_path / "gone")


def _inspect(run_cli, wheel: Path):  # type: ignore[no-untyped-def]
    res = run_cli(["--json", "inspect", str(wheel)], cwd=wheel.parent)
    assert res.returncode == 0, res.stderr
    text = run_cli(["inspect", str(wheel)], cwd=wheel.parent)
    return json.loads(res.stdout), text.stdout


def test_inspect_thin_wheel_names_the_package_of_each_library(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "index"
    assert _thin(run_cli, hip_ext_wheel, tree_copy, out).returncode == 0
    (thin,) = out.glob("hipext-*.whl")
    data, text = _inspect(run_cli, thin)
    (row,) = data["elf_files"]
    # bundle recorded the folder of ROCm's packages each library is in: checked
    assert data["bundle"]["from_packages"]["libamdhip64.so.5"] == "_rocm_sdk_core/lib"
    assert row["from_packages"]["libamdhip64.so.5"] == [
        {
            "folder": "_rocm_sdk_core/lib",
            "distribution": "rocm-sdk-core",
            "requirement": "rocm-sdk-core==5.2.3",
            "checked": True,
        }
    ]
    assert "libamdhip64.so.5" not in row["unresolved"]
    assert "libamdhip64.so.5: from _rocm_sdk_core/lib (rocm-sdk-core==5.2.3)" in text


def test_inspect_third_party_thin_wheel(
    hip_ext_so: Path, rocm_tree: Path, run_cli, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """A thin wheel rocm-build did not make (laid out as pyg-lib-rocm's: the extension one
    folder deep, RUNPATH into both packages' lib folders), one of them not required."""
    from rocm_build.bundle.apply import _patchelf

    from .helpers import make_wheel

    so = tmp_path / "_kern.so"
    so.write_bytes(hip_ext_so.read_bytes())
    search = "$ORIGIN/../_rocm_sdk_core/lib:$ORIGIN/../_rocm_sdk_libraries_gfx94X_dcgpu/lib"
    subprocess.run([_patchelf(), "--set-rpath", search, str(so)], check=True)
    so.chmod(0o755)
    wheel = make_wheel(
        tmp_path / "dist",
        "thirdparty",
        "0.8.0",
        {"thirdparty/_kern.so": so},
        requires=["rocm-sdk-core==7.0.0"],
    )
    data, text = _inspect(run_cli, wheel)
    (row,) = data["elf_files"]
    core = {
        "folder": "_rocm_sdk_core/lib",
        "distribution": "rocm-sdk-core",
        "requirement": "rocm-sdk-core==7.0.0",
    }
    libraries = {
        "folder": "_rocm_sdk_libraries_gfx94X_dcgpu/lib",
        "distribution": "rocm-sdk-libraries-gfx94X-dcgpu",
        "requirement": "",
    }
    # alone, what the two folders hold is unknown: both, in the loader's order, unchecked
    assert row["from_packages"]["libamdhip64.so.5"] == [
        {**core, "checked": False},
        {**libraries, "checked": False},
    ]
    assert "libamdhip64.so.5: from the first that holds it of _rocm_sdk_core/lib" in text
    # inspected with ROCm's two packages, installed together: found in core's folder
    pkgs = tmp_path / "pkgs"
    hip = rocm_tree / "lib" / "libamdhip64.so.5"
    rocm_core = make_wheel(
        pkgs, "rocm_sdk_core", "7.0.0", {"_rocm_sdk_core/lib/libamdhip64.so.5": hip}
    )
    rocm_libs = make_wheel(
        pkgs,
        "rocm_sdk_libraries_gfx94X_dcgpu",
        "7.0.0",
        {"_rocm_sdk_libraries_gfx94X_dcgpu/lib/librocrand.so.1": b"not read"},
    )
    res = run_cli(["--json", "inspect", str(wheel), str(rocm_libs), str(rocm_core)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)[0]["elf_files"]
    assert row["from_packages"]["libamdhip64.so.5"] == [{**core, "checked": True}]


def test_inspect_resolves_needed_through_the_search_path_in_order(
    run_cli, rocm_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Shaped as pyg-lib-rocm: RUNPATH torch's lib folder first, then ROCm's two packages'. torch's
    libraries come from torch/lib (installed by torch), HIP from rocm-sdk-core's folder, rocRAND
    from the libraries package's; nothing is attributed to a folder that cannot hold it."""
    from .helpers import cc_shared, make_wheel

    build = tmp_path / "build"
    c10 = cc_shared(build / "libc10.so", "int c10_x(void){return 1;}\n", soname="libc10.so")
    libtorch = cc_shared(
        build / "libtorch.so", "int torch_x(void){return 2;}\n", soname="libtorch.so"
    )
    search = (
        "$ORIGIN/../torch/lib:$ORIGIN/../_rocm_sdk_core/lib"
        ":$ORIGIN/../_rocm_sdk_libraries_gfx94X_dcgpu/lib"
    )
    pyg = cc_shared(
        build / "libpyg.so",
        "int c10_x(void); int torch_x(void); int hipGetDeviceCount(int*);\n"
        "int rocrand_create_generator(void*, int);\n"
        "int pyg(void){int n; rocrand_create_generator(0, 0);"
        " return c10_x() + torch_x() + hipGetDeviceCount(&n);}\n",
        libs=[
            libtorch,
            c10,
            rocm_tree / "lib" / "libamdhip64.so.5",
            rocm_tree / "lib" / "librocrand.so.1",
        ],
        rpath=search,
        runpath=True,
    )
    wheel = make_wheel(
        tmp_path / "dist",
        "pyg_lib",
        "0.4.0",
        {"pyg_lib/__init__.py": b"", "pyg_lib/libpyg.so": pyg},
        requires=["torch==2.9.0", "rocm-sdk-core==7.0.0"],
    )
    data, _ = _inspect(run_cli, wheel)
    (row,) = data["elf_files"]
    assert row["runpath"] == search.split(":")
    # alone: nothing is known of the three folders, so each name may come from any of them
    assert [w["folder"] for w in row["from_packages"]["libtorch.so"]] == [
        "torch/lib",
        "_rocm_sdk_core/lib",
        "_rocm_sdk_libraries_gfx94X_dcgpu/lib",
    ]
    assert not any(w["checked"] for ws in row["from_packages"].values() for w in ws)

    # installed together with torch and ROCm's two packages: the folder that holds each name
    pkgs = tmp_path / "pkgs"
    hip, rand = rocm_tree / "lib" / "libamdhip64.so.5", rocm_tree / "lib" / "librocrand.so.1"
    thin_torch = {"torch/lib/libtorch.so": libtorch, "torch/lib/libc10.so": c10}
    together = [
        make_wheel(pkgs / "thin", "torch", "2.9.0", thin_torch),
        make_wheel(pkgs, "rocm_sdk_core", "7.0.0", {"_rocm_sdk_core/lib/libamdhip64.so.5": hip}),
        make_wheel(
            pkgs,
            "rocm_sdk_libraries_gfx94X_dcgpu",
            "7.0.0",
            {"_rocm_sdk_libraries_gfx94X_dcgpu/lib/librocrand.so.1": rand},
        ),
    ]
    found, text = _together(run_cli, wheel, *together)
    torch = [
        {
            "folder": "torch/lib",
            "distribution": "torch",
            "requirement": "torch==2.9.0",
            "checked": True,
        }
    ]
    assert found["libtorch.so"] == torch
    assert found["libc10.so"] == torch
    assert found["libamdhip64.so.5"] == [
        {
            "folder": "_rocm_sdk_core/lib",
            "distribution": "rocm-sdk-core",
            "requirement": "rocm-sdk-core==7.0.0",
            "checked": True,
        }
    ]
    assert found["librocrand.so.1"] == [
        {
            "folder": "_rocm_sdk_libraries_gfx94X_dcgpu/lib",
            "distribution": "rocm-sdk-libraries-gfx94X-dcgpu",
            "requirement": "",
            "checked": True,
        }
    ]
    assert "libtorch.so: from torch/lib (torch==2.9.0)" in text
    assert (
        "librocrand.so.1: from _rocm_sdk_libraries_gfx94X_dcgpu/lib "
        "(rocm-sdk-libraries-gfx94X-dcgpu: NO Requires-Dist installs it)" in text
    )
    # a fat torch carries its own HIP runtime in torch/lib, first on the search path: the
    # loader takes that one, whatever the library's name suggests
    fat_torch = {**thin_torch, "torch/lib/libamdhip64.so.5": hip}
    fat = make_wheel(pkgs / "fat", "torch", "2.9.0", fat_torch)
    found, _ = _together(run_cli, wheel, fat, *together[1:])
    assert found["libamdhip64.so.5"] == torch


def _together(run_cli, *wheels: Path):  # type: ignore[no-untyped-def]
    """``inspect`` of wheels installed together: the first one's attributions, and its text."""
    res = run_cli(["--json", "inspect", *map(str, wheels)], cwd=wheels[0].parent)
    assert res.returncode == 0, res.stderr
    text = run_cli(["inspect", *map(str, wheels)], cwd=wheels[0].parent).stdout
    (row,) = json.loads(res.stdout)[0]["elf_files"]
    return row["from_packages"], text


def test_inspect_passes_over_its_own_folders(run_cli, rocm_tree: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Shaped as ROCm's libraries package: a library whose search path names its own
    ``rocm_sysdeps/lib`` (the package has none) before core's folders needs a system library
    core ships (as MIOpen needs libzstd). The wheel's own folders hold what it carries and
    nothing else, so the library is core's, never the package's own; with core inspected
    too, the exact folder."""
    from .helpers import cc_shared, make_wheel

    sysdeps = rocm_tree / "lib" / "rocm_sysdeps" / "lib" / "libelf.so.1"
    search = (
        "$ORIGIN:$ORIGIN/rocm_sysdeps/lib:$ORIGIN/../../_rocm_sdk_core/lib"
        ":$ORIGIN/../../_rocm_sdk_core/lib/rocm_sysdeps/lib"
    )
    lib = cc_shared(
        tmp_path / "build" / "libmiopenish.so.1",
        "int elf_version(unsigned); int miopenish(void){return elf_version(1);}\n",
        soname="libmiopenish.so.1",
        libs=[sysdeps],
        rpath=search,
        runpath=True,
    )
    own = "_rocm_sdk_libraries_gfx94X_dcgpu"
    wheel = make_wheel(
        tmp_path / "dist",
        "rocm_sdk_libraries_gfx94X_dcgpu",
        "7.0.0",
        {f"{own}/lib/libmiopenish.so.1": lib},
        tag="py3-none-linux_x86_64",
        requires=["rocm-sdk-core==7.0.0"],
    )
    data, _ = _inspect(run_cli, wheel)
    (row,) = data["elf_files"]
    where = row["from_packages"]["libelf.so.1"]
    assert {w["distribution"] for w in where} == {"rocm-sdk-core"}
    assert {w["requirement"] for w in where} == {"rocm-sdk-core==7.0.0"}
    core = make_wheel(
        tmp_path / "pkgs",
        "rocm_sdk_core",
        "7.0.0",
        {"_rocm_sdk_core/lib/rocm_sysdeps/lib/libelf.so.1": sysdeps},
        tag="py3-none-linux_x86_64",
    )
    found, text = _together(run_cli, wheel, core)
    assert found["libelf.so.1"] == [
        {
            "folder": "_rocm_sdk_core/lib/rocm_sysdeps/lib",
            "distribution": "rocm-sdk-core",
            "requirement": "rocm-sdk-core==7.0.0",
            "checked": True,
        }
    ]
    assert "libelf.so.1: from _rocm_sdk_core/lib/rocm_sysdeps/lib (rocm-sdk-core==7.0.0)" in text


TORCH_CHECK = r"""
import ctypes, json, os, sysconfig
site = sysconfig.get_paths()["platlib"]
c = ctypes.CDLL(os.path.join(site, "torch", "_C.so"))
status = c.c_count()
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
print(json.dumps({"status": status, "maps": maps}))
"""


def test_thin_torch_shaped_wheel_needs_both_packages(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """torch/lib/libtorch_hip.so uses HIP (core) and rocRAND (libraries), two folders deep."""
    from .helpers import cc_shared, make_wheel

    lib = tree_copy / "lib"
    torch_hip = cc_shared(
        tmp_path / "build" / "libtorch_hip.so",
        "int hipGetDeviceCount(int*);\nint rocrand_create_generator(void*, int);\n"
        "void *volatile keep_rocrand = (void*)&rocrand_create_generator;\n"
        "int torch_count(void){int n=-1; return hipGetDeviceCount(&n);}\n",
        soname="libtorch_hip.so",
        libs=[lib / "libamdhip64.so.5", lib / "librocrand.so.1"],
    )
    c_so = cc_shared(
        tmp_path / "build" / "_C.so",
        "int torch_count(void);\nint c_count(void){return torch_count();}\n",
        libs=[torch_hip],
    )
    torch = make_wheel(
        tmp_path / "dist",
        "torch",
        "2.9.0+rocm5.2.3",
        {"torch/__init__.py": b"", "torch/_C.so": c_so, "torch/lib/libtorch_hip.so": torch_hip},
    )
    out = tmp_path / "index"
    res = _thin(run_cli, torch, tree_copy, out)
    assert res.returncode == 0, res.stderr
    (thin,) = out.glob("torch-*.whl")
    with zipfile.ZipFile(thin) as zf:
        sos = sorted(n for n in zf.namelist() if ".so" in n)
        meta = zf.read("torch-2.9.0+rocm5.2.3.dist-info/METADATA").decode()
        zf.extract("torch/lib/libtorch_hip.so", tmp_path / "x")
    assert sos == ["torch/_C.so", "torch/lib/libtorch_hip.so"]
    assert "Requires-Dist: rocm-sdk-core==5.2.3\n" in meta
    assert "Requires-Dist: rocm-sdk-libraries-all==5.2.3\n" in meta
    search = elf.read_elf(tmp_path / "x/torch/lib/libtorch_hip.so").search_path
    assert "$ORIGIN/../../_rocm_sdk_core/lib" in search
    assert "$ORIGIN/../../_rocm_sdk_libraries_all/lib" in search

    assert _rocm_wheels(run_cli, tree_copy, out).returncode == 0
    python = make_venv(tmp_path / "venv")
    _pip(python, "--no-index", "--find-links", str(out), "torch")
    tree_copy.rename(tmp_path / "gone")
    proc = subprocess.run([str(python), "-c", TORCH_CHECK], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["status"] == 100  # hipErrorNoDevice: no GPU on this machine, the runtime loaded
    assert any("/_rocm_sdk_libraries_all/lib/librocrand.so.1" in m for m in got["maps"])
    assert not any(str(tree_copy) in m for m in got["maps"])


def test_thin_without_tree_version_says_so(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    (tree_copy / ".info" / "version").unlink()
    res = _thin(run_cli, hip_ext_wheel, tree_copy, tmp_path / "out")
    assert res.returncode == 8, res.stderr
    assert "has no .info/version" in res.stderr
    assert "Traceback" not in res.stderr
    res = run_cli(["rocm", "wheels", str(tree_copy), "--output-dir", str(tmp_path / "w")],
                  cwd=tmp_path)  # fmt: skip
    assert res.returncode == 8, res.stderr
    assert "no ROCm tree" in res.stderr


def test_rocm_wheels_arch_keeps_those_targets_data(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    files = [
        "lib/rocblas/library/TensileLibrary_gfx90a.dat",
        "lib/rocblas/library/TensileLibrary_gfx1030.dat",
        "lib/rocblas/library/TensileManifest.txt",
        "share/miopen/db/gfx1030_40.kdb",
    ]
    for rel in files:
        (tree_copy / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree_copy / rel).write_text(rel)
    out = tmp_path / "w"
    res = run_cli(
        ["rocm", "wheels", str(tree_copy), "--output-dir", str(out), "-z", "1",
         "--arch", "gfx90a", "--target-family", "gfx90X-dcgpu"],
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (libs,) = out.glob("rocm_sdk_libraries_gfx90X_dcgpu-5.2.3-*.whl")
    with zipfile.ZipFile(libs) as zf:
        names = set(zf.namelist())
        meta = zf.read("rocm_sdk_libraries_gfx90X_dcgpu-5.2.3.dist-info/METADATA").decode()
    assert "Name: rocm-sdk-libraries-gfx90X-dcgpu\n" in meta
    kept = {rel for rel in files if f"_rocm_sdk_libraries_gfx90X_dcgpu/{rel}" in names}
    assert kept == {files[0], files[2]}


def test_thin_dry_run_says_where_rocm_comes_from(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        ["bundle", str(hip_ext_wheel), "--rocm", str(tree_copy), "--output-dir",
         str(tmp_path / "out"), "--mode", "thin", "--dry-run"],
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "libraries to add: 0 (thin: ROCm's from its packages)" in res.stdout
    assert "hipext/_kern.so: - -> $ORIGIN/../_rocm_sdk_core/lib (RUNPATH)" in res.stdout
    assert "requires: rocm-sdk-core==5.2.3" in res.stdout
    assert not (tmp_path / "out").exists()


def _dynamic_tags(path: Path) -> dict[str, list[str]]:
    """DT_RPATH / DT_RUNPATH entries of the dynamic section, as pyelftools reads them."""
    from elftools.elf.elffile import ELFFile

    found: dict[str, list[str]] = {"DT_RPATH": [], "DT_RUNPATH": []}
    with path.open("rb") as fh:
        dynamic = ELFFile(fh).get_section_by_name(".dynamic")
        for tag in dynamic.iter_tags():
            if tag.entry.d_tag == "DT_RPATH":
                found["DT_RPATH"].append(tag.rpath)
            elif tag.entry.d_tag == "DT_RUNPATH":
                found["DT_RUNPATH"].append(tag.runpath)
    return found


def test_thin_search_path_into_rocm_packages_is_a_runpath(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Entries into ``_rocm_sdk_*`` folders are DT_RUNPATH (as ROCm's and pyg-lib-rocm's thin
    wheels have them), whether the edit reuses the old string or appends one; an ELF file that
    needs nothing from the packages keeps a DT_RPATH."""
    from .helpers import cc_shared, make_wheel

    lib = tree_copy / "lib"
    hip = lib / "libamdhip64.so.5"
    # a DT_RPATH long enough for an in-place edit; none at all (appended string)
    inplace = cc_shared(tmp_path / "b" / "_a.so", "int hipInit(unsigned);\nint a(void){return "
                        "hipInit(0);}\n", libs=[hip], rpath="/" + "x" * 80)  # fmt: skip
    appended = cc_shared(tmp_path / "b" / "_b.so", "int hipInit(unsigned);\nint b(void){return "
                         "hipInit(0);}\n", libs=[hip])  # fmt: skip
    plain = cc_shared(tmp_path / "b" / "_c.so", "int a(void);\nint c(void){return a();}\n",
                      libs=[inplace])  # fmt: skip
    wheel = make_wheel(
        tmp_path / "dist",
        "runp",
        "1.0",
        {"runp/_a.so": inplace, "runp/_b.so": appended, "runp/sub/_c.so": plain},
    )
    out = tmp_path / "out"
    res = _thin(run_cli, wheel, tree_copy, out)
    assert res.returncode == 0, res.stderr
    (thin,) = out.glob("runp-*.whl")
    with zipfile.ZipFile(thin) as zf:
        zf.extractall(tmp_path / "x")
    for name in ("_a.so", "_b.so"):
        tags = _dynamic_tags(tmp_path / "x" / "runp" / name)
        assert tags["DT_RPATH"] == [], name
        assert tags["DT_RUNPATH"] == ["$ORIGIN/../_rocm_sdk_core/lib"], name
    tags = _dynamic_tags(tmp_path / "x" / "runp" / "sub" / "_c.so")
    assert tags == {"DT_RPATH": ["$ORIGIN/../lib:$ORIGIN/.."], "DT_RUNPATH": []}


def test_rocm_wheels_arch_prunes_the_libraries_device_code(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The family package carries only its targets' code, from the one all-targets tree."""
    out = tmp_path / "w"
    res = run_cli(
        ["rocm", "wheels", str(tree_copy), "--output-dir", str(out), "-z", "1",
         "--arch", "gfx1030", "--target-family", "gfx103X"],
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (libs,) = out.glob("rocm_sdk_libraries_gfx103X-5.2.3-*.whl")
    rand = tmp_path / "librocrand.so.1"
    with zipfile.ZipFile(libs) as zf:
        rand.write_bytes(zf.read("_rocm_sdk_libraries_gfx103X/lib/librocrand.so.1"))
    source = tree_copy / "lib/librocrand.so.1.1"
    assert elf.offload_targets(source) > {"gfx1030", "gfx90a"}
    assert elf.offload_targets(rand) == {"gfx1030"}
    # zeros in place: the bundles start where they did (the search path edit may append)
    offsets = [b.file_offset for b in elf.offload_bundles(source)]
    assert [b.file_offset for b in elf.offload_bundles(rand)] == offsets
    assert elf.read_elf(rand).soname == "librocrand.so.1"
