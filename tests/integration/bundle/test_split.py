"""bundle --split-arch on the real ROCm 5.2.3 tree: a host wheel plus one device wheel per gfx
target, installed by pip from a local folder (--no-index) into fresh venvs. The 5.2 tree has no
data trees, so the test gives it a rocBLAS (gcc-built, NEEDing the tree's HIP) with per-target
kernel files, as the other bundle data tests do."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import make_venv
from .helpers import cc_shared, make_wheel, versioned_lib

pytestmark = pytest.mark.slow

FILES = {  # rocBLAS's data tree: file -> the targets it belongs to
    "TensileLibrary_lazy_gfx90a.dat": {"gfx90a"},
    "TensileLibrary_lazy_gfx1030.dat": {"gfx1030"},
    "Kernels.so-000-gfx90a-xnack-.hsaco": {"gfx90a"},
    "gfx1030/TensileLibrary_gfx1030.co": {"gfx1030"},
    "TensileLibrary_lazy_gfx908.dat": {"gfx908"},  # not requested: in no wheel
    "TensileManifest.txt": set(),  # target-neutral: in the host wheel
}

CHECK = r"""
import ctypes, json, os, sysconfig
site = sysconfig.get_paths()["platlib"]
lib = ctypes.CDLL(os.path.join(site, "blasy", "_b.so"))
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
data = os.path.join(site, "blasy", "lib", "rocblas", "library")
print(json.dumps({"status": lib.b(), "maps": maps, "data": sorted(os.listdir(data))}))
"""


def _blasy(tree: Path, build: Path, version: str = "1.0") -> Path:
    lib = tree / "lib"
    if not (lib / "librocblas.so.0").exists():
        versioned_lib(
            lib, "rocblas", "0.1",
            "int hipGetDeviceCount(int*);\n"
            "int rocblas_init(void){int n=-1; return hipGetDeviceCount(&n);}\n",
            libs=[lib / "libamdhip64.so.5"],
        )  # fmt: skip
        library = lib / "rocblas" / "library"
        for name in FILES:
            (library / name).parent.mkdir(parents=True, exist_ok=True)
            (library / name).write_bytes(name.encode() * 40)
    ext = cc_shared(
        build / "_b.so",
        "int rocblas_init(void);\nint b(void){return rocblas_init();}\n",
        libs=[lib / "librocblas.so.0.1"],
    )
    return make_wheel(
        build / "dist", "blasy", version, {"blasy/__init__.py": b"", "blasy/_b.so": ext}
    )


def _bundle(run_cli, cwd: Path, *args: str):  # type: ignore[no-untyped-def]
    env = {"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": "libhiprtc-builtins.so*"}
    return run_cli(["bundle", "-z", "1", *args], cwd=cwd, env=env)


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index", *args]
    return subprocess.run(cmd, capture_output=True, text=True)


def _files(python: Path) -> dict[str, bytes]:
    """The installed files of the venv's site-packages, dist-info folders and caches aside."""
    site = next(python.parent.parent.glob("lib/python*/site-packages"))
    return {
        p.relative_to(site).as_posix(): p.read_bytes()
        for p in site.rglob("*")
        if p.is_file()
        and not p.relative_to(site).parts[0].endswith(".dist-info")
        and "__pycache__" not in p.parts
        and p.parts[-1] not in ("_virtualenv.py", "_virtualenv.pth")
    }


def test_split_arch_host_and_device_wheels(run_cli, tree_copy: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    wheel = _blasy(tree_copy, tmp_path / "build")
    out = tmp_path / "index"
    args = [str(wheel), "--rocm", str(tree_copy), "--arch", "gfx90a,gfx1030"]
    res = _bundle(run_cli, tmp_path, *args, "--output-dir", str(out), "--split-arch")
    assert res.returncode == 0, res.stderr
    assert (
        "libraries keep the device code of every requested target (gfx1030, gfx90a)" in (res.stdout)
        or "libraries keep the device code of every requested target (gfx90a, gfx1030)"
        in res.stdout
    )
    wheels = sorted(p.name for p in out.glob("*.whl"))
    assert len(wheels) == 3, wheels
    host = next(out.glob("blasy-1.0-*.whl"))
    plat = host.name.split("-")[-1].removesuffix(".whl")
    for target in ("gfx90a", "gfx1030"):
        assert f"amd_blasy_device_{target}-1.0-py3-none-{plat}.whl" in wheels
    with zipfile.ZipFile(host) as zf:
        names = set(zf.namelist())
        meta = zf.read("blasy-1.0.dist-info/METADATA").decode()
    assert "blasy/lib/librocblas.so.0" in names
    assert "blasy/lib/rocblas/library/TensileManifest.txt" in names
    assert not [n for n in names if "/rocblas/library/" in n and "gfx" in n]
    assert "Provides-Extra: device-gfx90a\n" in meta
    assert 'Requires-Dist: amd-blasy-device-gfx1030==1.0; extra == "device-gfx1030"\n' in meta
    dev = out / f"amd_blasy_device_gfx90a-1.0-py3-none-{plat}.whl"
    with zipfile.ZipFile(dev) as zf:
        dev_names = {n for n in zf.namelist() if ".dist-info/" not in n}
        dev_meta = zf.read("amd_blasy_device_gfx90a-1.0.dist-info/METADATA").decode()
    assert dev_names == {
        f"blasy/lib/rocblas/library/{n}" for n, targets in FILES.items() if "gfx90a" in targets
    }
    assert "Requires-Dist: blasy==1.0\n" in dev_meta

    # the same files as the fat one-target wheel, and it runs with the tree gone
    fat_dir = tmp_path / "fat"
    res = _bundle(run_cli, tmp_path, str(wheel), "--rocm", str(tree_copy), "--arch", "gfx1030",
                  "--output-dir", str(fat_dir))  # fmt: skip
    assert res.returncode == 0, res.stderr
    (fat,) = fat_dir.glob("*.whl")
    split_py = make_venv(tmp_path / "split")
    assert _pip(split_py, "--find-links", str(out), "blasy[device-gfx1030]").returncode == 0
    fat_py = make_venv(tmp_path / "fatvenv")
    assert _pip(fat_py, "--no-deps", str(fat)).returncode == 0
    got, want = _files(split_py), _files(fat_py)
    assert set(got) == set(want)
    provenance = "blasy/.rocm-build-bundle.json"  # says how each was made: differs
    assert {n for n in got if got[n] != want[n]} == {provenance}
    tree_copy.rename(tmp_path / "gone")
    proc = subprocess.run([str(split_py), "-c", CHECK], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    ran = json.loads(proc.stdout)
    assert ran["status"] == 100  # hipErrorNoDevice: HIP loaded from the host wheel
    assert any("/site-packages/blasy/lib/libamdhip64.so.5" in m for m in ran["maps"])
    assert ran["data"] == ["TensileLibrary_lazy_gfx1030.dat", "TensileManifest.txt", "gfx1030"]

    # two device wheels install together
    both = make_venv(tmp_path / "both")
    res2 = _pip(both, "--find-links", str(out), "blasy[device-gfx90a,device-gfx1030]")
    assert res2.returncode == 0, res2.stderr
    assert len([n for n in _files(both) if "gfx" in n]) == 4

    # inspect of the host says which target needs which device wheel
    shown = run_cli(["--json", "inspect", str(host)], cwd=tmp_path)
    assert json.loads(shown.stdout)["device_wheels"] == {
        "gfx1030": "amd-blasy-device-gfx1030==1.0",
        "gfx90a": "amd-blasy-device-gfx90a==1.0",
    }
    text = run_cli(["inspect", str(host)], cwd=tmp_path).stdout
    assert "gfx90a: device-gfx90a needs amd-blasy-device-gfx90a==1.0" in text


def test_device_wheel_needs_its_host_at_that_version(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    wheel = _blasy(tree_copy, tmp_path / "build")
    out = tmp_path / "out"
    res = _bundle(run_cli, tmp_path, str(wheel), "--rocm", str(tree_copy), "--arch", "gfx90a",
                  "--output-dir", str(out), "--split-arch")  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "up to date" not in res.stdout
    (dev,) = out.glob("amd_blasy_device_gfx90a-*.whl")
    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / dev.name).write_bytes(dev.read_bytes())
    python = make_venv(tmp_path / "venv")
    no_host = _pip(python, "--find-links", str(alone), "amd-blasy-device-gfx90a")
    assert no_host.returncode != 0
    assert "No matching distribution found for blasy==1.0" in no_host.stderr
    # another version of the host in the folder: pip's resolver refuses the pair
    other = make_wheel(alone, "blasy", "1.1", {"blasy/__init__.py": b""})
    assert other.parent == alone
    mixed = _pip(python, "--find-links", str(alone), "amd-blasy-device-gfx90a", "blasy==1.1")
    assert mixed.returncode != 0
    assert "ResolutionImpossible" in mixed.stderr
    assert "Cannot install amd-blasy-device-gfx90a==1.0 and blasy==1.1" in mixed.stderr
    # the same inputs again: nothing to do
    again = _bundle(run_cli, tmp_path, str(wheel), "--rocm", str(tree_copy), "--arch", "gfx90a",
                    "--output-dir", str(out), "--split-arch")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "up to date:" in again.stdout


def test_fat_bundle_does_not_take_the_host_wheel_for_its_output(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The host wheel has the fat wheel's name: a fat run of the same settings into the same
    folder must bundle again (the data files are not in the host), not call it up to date."""
    wheel = _blasy(tree_copy, tmp_path / "build")
    out = tmp_path / "out"
    args = [str(wheel), "--rocm", str(tree_copy), "--arch", "gfx90a", "--output-dir", str(out)]
    assert _bundle(run_cli, tmp_path, *args, "--split-arch").returncode == 0
    fat = run_cli(["--json", "bundle", "-z", "1", *args], cwd=tmp_path,
                  env={"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": "libhiprtc-builtins.so*"})  # fmt: skip
    assert fat.returncode == 0, fat.stderr
    assert json.loads(fat.stdout)[0]["status"] == "bundled"
    (host,) = out.glob("blasy-*.whl")
    with zipfile.ZipFile(host) as zf:
        assert "blasy/lib/rocblas/library/TensileLibrary_lazy_gfx90a.dat" in zf.namelist()


def test_split_killed_midway_finishes_on_the_next_run(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    wheel = _blasy(tree_copy, tmp_path / "build")
    out = tmp_path / "out"
    args = [str(wheel), "--rocm", str(tree_copy), "--arch", "gfx90a,gfx1030",
            "--output-dir", str(out), "--split-arch"]  # fmt: skip
    env = {"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": "libhiprtc-builtins.so*",
           "RB_FAULT_POINT": "bundle.split-device@2"}  # fmt: skip
    killed = run_cli(["bundle", "-z", "1", *args], cwd=tmp_path, env=env)
    assert killed.returncode == -9
    assert not list(out.glob("blasy-*.whl"))  # no host wheel until every device wheel is in
    again = _bundle(run_cli, tmp_path, *args)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name.split("-")[0] for p in out.glob("*.whl")) == [
        "amd_blasy_device_gfx1030", "amd_blasy_device_gfx90a", "blasy",
    ]  # fmt: skip
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []  # swept


def test_wheel_without_per_target_data_gets_no_device_wheels(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    res = _bundle(run_cli, tmp_path, str(hip_ext_wheel), "--rocm", str(tree_copy),
                  "--output-dir", str(out), "--split-arch")  # fmt: skip
    assert res.returncode == 0, res.stderr
    (host,) = out.glob("*.whl")
    with zipfile.ZipFile(host) as zf:
        meta = zf.read("hipext-1.0.0.dist-info/METADATA").decode()
    assert "Provides-Extra" not in meta
    # what the split made is said in words: no "device wheels " with nothing after it
    said = res.stdout + res.stderr
    assert "device wheels: none (no file of any requested target" in said, said
    assert not any(line.rstrip().endswith("device wheels") for line in said.splitlines()), said
