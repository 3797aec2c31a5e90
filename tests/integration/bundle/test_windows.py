"""Windows wheels: real PE DLLs cross-compiled with mingw-w64 into a win_amd64 wheel; bundle
hands them to delvewheel and the ROCm DLL names survive (no name mangling)."""

from __future__ import annotations

import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pefile
import pytest

from .helpers import make_wheel

MINGW = "x86_64-w64-mingw32-gcc"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which(MINGW) is None, reason="needs mingw-w64 (dev/apt-packages-test.txt)"
    ),
]


def _dll(out: Path, source: str, *link: str) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run([MINGW, "-shared", "-O1", "-o", str(out), str(src), *link], check=True)
    return out


def _imports(data: bytes) -> set[str]:
    pe = pefile.PE(data=data)
    return {e.dll.decode().lower() for e in getattr(pe, "DIRECTORY_ENTRY_IMPORT", [])}


def test_windows_wheel_keeps_rocm_dll_names(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tree = tmp_path / "rocm"
    hsa = _dll(
        tree / "bin" / "hsa-runtime64.dll",
        "__declspec(dllexport) int hsa_init(void) { return 4096; }\n",
    )
    hip = _dll(
        tree / "bin" / "amdhip64.dll",
        "int hsa_init(void);\n"
        "__declspec(dllexport) int hipGetDeviceCount(int *n)\n"
        "{ *n = 0; return hsa_init() ? 100 : 0; }\n",
        f"-L{hsa.parent}",
        "-lhsa-runtime64",
    )
    (tree / "lib").mkdir()
    # loaded with LoadLibrary by name (no import points at it), and a library with a data tree
    # (comgr imports a DLL of its own, which nothing else imports: it must come along)
    zstd = _dll(tree / "bin" / "comgr_zstd.dll", "__declspec(dllexport) int zs(void){return 4;}\n")
    _dll(
        tree / "bin" / "amd_comgr_3.dll",
        "int zs(void);\n__declspec(dllexport) int comgr(void){return zs();}\n",
        f"-L{zstd.parent}",
        "-lcomgr_zstd",
    )
    blas = _dll(tree / "bin" / "rocblas.dll", "__declspec(dllexport) int rb(void){return 2;}\n")
    kernels = tree / "bin" / "rocblas" / "library"
    kernels.mkdir(parents=True)
    for name in ("TensileLibrary_gfx90a.dat", "TensileLibrary_gfx1030.dat", "TensileManifest.txt"):
        (kernels / name).write_text(name)
    # a DLL from outside the ROCm tree (found on PATH, as on a Windows build machine)
    vendor = _dll(
        tmp_path / "vendor" / "vendorz.dll",
        "__declspec(dllexport) int vz(void) { return 1; }\n",
    )
    ext = _dll(
        tmp_path / "build" / "_k.pyd",
        "int hipGetDeviceCount(int *n); int vz(void); int rb(void);\n"
        "__declspec(dllexport) int count(void)\n"
        "{ int n; return rb() + vz() + hipGetDeviceCount(&n); }\n",
        f"-L{hip.parent}",
        "-lamdhip64",
        f"-L{blas.parent}",
        "-lrocblas",
        f"-L{vendor.parent}",
        "-lvendorz",
    )
    assert "amdhip64.dll" in _imports(ext.read_bytes())
    wheel = make_wheel(
        tmp_path / "dist",
        "winext",
        "1.0",
        {"winext/__init__.py": b"X = 1\n", "winext/_k.pyd": ext},
        tag="cp311-cp311-win_amd64",
    )
    out = tmp_path / "out"
    path = {"PATH": f"{vendor.parent}{os.pathsep}{os.environ['PATH']}"}

    def bundle(wheel: Path, out: Path):  # type: ignore[no-untyped-def]
        args = ["--json", "bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out),
                "--arch", "gfx90a"]  # fmt: skip
        return run_cli(args, cwd=tmp_path, env=path)

    planned = run_cli(
        ["bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out), "--dry-run"],
        cwd=tmp_path, env=path,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert (
        "would bundle winext-1.0-cp311-cp311-win_amd64.whl (Windows, delvewheel)" in planned.stdout
    )
    assert "amdhip64.dll" in planned.stdout
    assert not out.exists()  # a dry run writes nothing, not even the folder
    res = bundle(wheel, out)
    assert res.returncode == 0, res.stderr
    (fat,) = out.glob("*.whl")
    assert json.loads(res.stdout)[0]["output"] == str(fat)
    with zipfile.ZipFile(fat) as zf:
        names = zf.namelist()
        libs = sorted(Path(n).name for n in names if n.endswith(".dll"))
        pyd = zf.read("winext/_k.pyd")
        hip_in_wheel = next(n for n in names if n.endswith("amdhip64.dll"))
        assert "hsa-runtime64.dll" in _imports(zf.read(hip_in_wheel))
    # ROCm names kept; the other DLL got delvewheel's hashed name, and the import follows it
    assert libs[:5] == [
        "amd_comgr_3.dll", "amdhip64.dll", "comgr_zstd.dll", "hsa-runtime64.dll", "rocblas.dll",
    ]  # fmt: skip
    (mangled,) = libs[5:]
    libs_dir = posixpath.dirname(hip_in_wheel)
    assert posixpath.join(libs_dir, "amd_comgr_3.dll") in names  # beside the others
    data = sorted(n[len(libs_dir) + 1 :] for n in names if "/rocblas/" in n)
    assert data == [
        "rocblas/library/TensileLibrary_gfx90a.dat",
        "rocblas/library/TensileManifest.txt",
    ]
    assert re.fullmatch(r"vendorz-[0-9a-f]+\.dll", mangled), mangled
    assert "amdhip64.dll" in _imports(pyd)
    assert mangled.lower() in _imports(pyd)
    subprocess.run(
        [sys.executable, "-m", "wheel", "unpack", "-d", str(tmp_path / "u"), str(fat)],
        check=True,
        capture_output=True,
    )
    with zipfile.ZipFile(fat) as zf:
        prov = json.loads(zf.read("winext/.rocm-build-bundle.json"))
    origins = {x["name"]: x["origin"] for x in prov["libraries"]}
    reasons = {x["name"]: x["reason"] for x in prov["libraries"]}
    assert (reasons["amd_comgr_3.dll"], reasons["comgr_zstd.dll"]) == ("dlopen", "needed")
    assert origins == {
        "amd_comgr_3.dll": "rocm",
        "comgr_zstd.dll": "rocm",
        "amdhip64.dll": "rocm",
        "hsa-runtime64.dll": "rocm",
        "rocblas.dll": "rocm",
        mangled: "system",
    }
    assert (prov["data_files"], prov["data_skipped"]) == (2, 1)

    # inspect reads the DLLs: before bundling, the ROCm and vendor DLLs are missing; after,
    # nothing is (Windows' own DLLs, such as KERNEL32.dll, do not count)
    raw = json.loads(run_cli(["--json", "inspect", str(wheel)], cwd=tmp_path).stdout)
    (pyd_row,) = raw["pe_files"]
    assert {n.lower() for n in pyd_row["imports"]} >= {"amdhip64.dll", "kernel32.dll"}
    assert sorted(n.lower() for n in pyd_row["unresolved"]) == [
        "amdhip64.dll", "rocblas.dll", "vendorz.dll",
    ]  # fmt: skip
    after = json.loads(run_cli(["--json", "inspect", str(fat)], cwd=tmp_path).stdout)
    assert len(after["pe_files"]) == 7
    assert not any(row["unresolved"] for row in after["pe_files"])
    assert after["sizes"]["data: rocblas/library"] > 0
    text = run_cli(["inspect", str(fat)], cwd=tmp_path).stdout
    assert "DLL and PYD files:" in text
    assert "NOT IN THE WHEEL" not in text

    # again, output in place: nothing is redone or rewritten
    before = fat.stat().st_mtime_ns
    again = bundle(wheel, out)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[0]["status"] == "up-to-date"
    assert fat.stat().st_mtime_ns == before
    # a DLL of the tree changed: bundled again
    hsa.write_bytes(hsa.read_bytes() + b"\0")
    third = bundle(wheel, out)
    assert json.loads(third.stdout)[0]["status"] == "bundled", third.stderr
    # the fat wheel itself, bundled: left as it is
    fat_bytes = fat.read_bytes()
    res2 = bundle(fat, tmp_path / "o2")
    assert json.loads(res2.stdout)[0]["status"] == "unchanged", res2.stderr
    assert (tmp_path / "o2" / fat.name).read_bytes() == fat_bytes

    # no --arch and no --output-dir: the wheelhouse, in the folder of the target set the wheel
    # has (its PYD holds no device code, none was asked for: "any"), every target's data kept;
    # a second run finds it up to date there before it knows the wheel's targets
    home = tmp_path / "home"
    home.mkdir()
    plain = ["--json", "bundle", str(wheel), "--rocm", str(tree)]
    first = run_cli(plain, cwd=home, env=path)
    assert first.returncode == 0, first.stderr
    (placed,) = (home / "wheelhouse").glob("*/*.whl")
    assert placed.parent.name == "any"
    assert json.loads(first.stdout)[0]["output"] == str(placed)
    with zipfile.ZipFile(placed) as zf:
        kept = sorted(posixpath.basename(n) for n in zf.namelist() if "/rocblas/" in n)
    assert kept == [
        "TensileLibrary_gfx1030.dat",
        "TensileLibrary_gfx90a.dat",
        "TensileManifest.txt",
    ]
    second = run_cli(plain, cwd=home, env=path)
    assert json.loads(second.stdout)[0]["status"] == "up-to-date", second.stderr


def test_inspect_reads_device_code_in_a_dll(run_cli, hip_ext_so: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A Windows HIP library keeps its offload bundles in a ``.hip_fat`` section. The real
    bundle clang wrote into the Linux test library (gfx90a and gfx1030) is placed in such a
    section of a mingw-built DLL; inspect reads its targets, and --require-arch uses them."""
    from elftools.elf.elffile import ELFFile

    with hip_ext_so.open("rb") as fh:
        fatbin = ELFFile(fh).get_section_by_name(".hip_fatbin").data()
    array = ",".join(str(b) for b in fatbin)
    tree = tmp_path / "rocm"
    blas = _dll(tree / "bin" / "rocblas.dll", "__declspec(dllexport) int rb(void){return 2;}\n")
    kernels = tree / "bin" / "rocblas" / "library"
    kernels.mkdir(parents=True)
    for target in ("gfx90a", "gfx1030", "gfx942"):
        (kernels / f"TensileLibrary_{target}.dat").write_text(target)
    dll = _dll(
        tmp_path / "build" / "kern.dll",
        f'__attribute__((section(".hip_fat"), used)) const unsigned char fatbin[] = {{{array}}};\n'
        "int rb(void);\n"
        "__declspec(dllexport) int k(void) { return rb(); }\n",
        f"-L{blas.parent}",
        "-lrocblas",
    )
    sections = [s.Name.rstrip(b"\0") for s in pefile.PE(str(dll)).sections]
    assert b".hip_fat" in sections
    wheel = make_wheel(
        tmp_path / "dist", "winhip", "1.0", {"winhip/kern.dll": dll}, tag="cp311-cp311-win_amd64"
    )
    shown = json.loads(run_cli(["--json", "inspect", str(wheel)], cwd=tmp_path).stdout)
    (row,) = shown["pe_files"]
    assert row["targets"] == ["gfx1030", "gfx90a"]
    assert row["offload_bundles"] >= 1
    ok = run_cli(["inspect", str(wheel), "--require-arch", "gfx90a"], cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "device code: gfx1030, gfx90a" in ok.stdout
    missing = run_cli(["inspect", str(wheel), "--require-arch", "gfx1100"], cwd=tmp_path)
    assert missing.returncode == 11

    # bundled without --arch: data follows the targets of the wheel's own device code
    out = tmp_path / "out"
    res = run_cli(
        ["--json", "bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out)],
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    with zipfile.ZipFile(json.loads(res.stdout)[0]["output"]) as zf:
        data = sorted(posixpath.basename(n) for n in zf.namelist() if n.endswith(".dat"))
        # rocblas is imported by a DLL the wheel already had (as torch_hip.dll is in torch)
        assert any(n.endswith("/rocblas.dll") for n in zf.namelist())
    assert data == ["TensileLibrary_gfx1030.dat", "TensileLibrary_gfx90a.dat"]


def test_windows_wheel_of_another_rocm_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """As on Linux: a wheel labelled +rocm5.2.3 is not bundled from a ROCm 6.4 tree; delvewheel's
    output is not relabelled, so --allow-rocm-mismatch says it cannot help."""
    tree = tmp_path / "rocm"
    hip = _dll(
        tree / "bin" / "amdhip64_6.dll", "__declspec(dllexport) int hipInit(int f){return f;}\n"
    )
    (tree / "lib").mkdir()
    (tree / ".info").mkdir()
    (tree / ".info" / "version").write_text("6.4.0\n")
    ext = _dll(
        tmp_path / "build" / "_k.pyd",
        "int hipInit(int);\n__declspec(dllexport) int start(void){ return hipInit(0); }\n",
        f"-L{hip.parent}",
        "-lamdhip64_6",
    )
    wheel = make_wheel(
        tmp_path / "dist",
        "winext",
        "1.0+rocm5.2.3",
        {"winext/__init__.py": b"", "winext/_k.pyd": ext},
        tag="cp311-cp311-win_amd64",
    )
    out = tmp_path / "out"
    args = ["bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out)]
    res = run_cli(args, cwd=tmp_path)
    assert res.returncode == 8, res.stderr
    assert "built with ROCm 5.2.3" in res.stderr
    res = run_cli([*args, "--allow-rocm-mismatch"], cwd=tmp_path)
    assert res.returncode == 8, res.stderr
    assert "Linux wheels only" in res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists() or not list(out.glob("*.whl"))
