"""``rocm wheels`` and thin mode on a kpack-split tree, with today's names: an arch-neutral
``rocm-sdk-libraries`` and one ``rocm-sdk-device-<target>`` per target overlaying its archives
into ``_rocm_sdk_libraries/.kpack/``; thin wheels require ``rocm[libraries,device-...]`` as
PyTorch's ROCm wheels do.

Real parts: the ROCm 5.2 tree from Debian's packages with its rocRAND kpack-split
(``kpack_tree``), real wheels, pip into a real venv. No GPU: the HIP runtime answers 100, and
Debian's runtime cannot load kpack, so lookups are proven by reading the installed archives."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rocm_build.binary import elf, kpack

from .conftest import make_venv
from .runs import run_bundle

pytestmark = pytest.mark.slow

VERSION = "5.2.3"
AGENT = "gfx90a:sramecc+:xnack-"
GFX90A = ("rand_lib_gfx90a:xnack+.kpack", "rand_lib_gfx90a:xnack-.kpack")

LOAD = r"""
import ctypes, json, os, sysconfig
site = sysconfig.get_paths()["platlib"]
ctypes.CDLL(os.path.join(site, "_rocm_sdk_libraries", "lib", "librocrand.so.1"))
hip = ctypes.CDLL("libamdhip64.so.5")  # loaded through librocrand's search path
n = ctypes.c_int(-1)
print(json.dumps({"status": hip.hipGetDeviceCount(ctypes.byref(n)), "site": site}))
"""


@pytest.fixture
def split_copy(kpack_tree: Path, tmp_path: Path) -> Path:
    """A hard-link copy of the kpack-split tree, with kernel data as a full tree has it."""
    dest = tmp_path / "rocm"
    subprocess.run(["cp", "-al", str(kpack_tree), str(dest)], check=True)
    library = dest / "lib" / "rocblas" / "library"
    library.mkdir(parents=True)
    (library / "TensileLibrary_gfx90a.dat").write_text("gfx90a kernels\n")
    (library / "TensileLibrary_gfx1030.dat").write_text("gfx1030 kernels\n")
    (library / "TensileManifest.txt").write_text("arch-neutral\n")
    return dest


def _rocm_wheels(run_cli, tree: Path, out: Path, *extra: str) -> list[Path]:  # type: ignore[no-untyped-def]
    res = run_cli(
        ["--json", "rocm", "wheels", str(tree), "--output-dir", str(out), "-z", "1", *extra],
        cwd=out.parent,
    )
    assert res.returncode == 0, res.stderr
    return [Path(p) for p in json.loads(res.stdout)]


def _pip(python: Path, *args: str) -> None:
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", *args]
    subprocess.run(cmd, check=True)


def _read(wheel: Path, member: str) -> str:
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(member).decode()


def _members(wheel: Path) -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(wheel) as zf:
        return {i.filename: i for i in zf.infolist()}


def test_rocm_wheels_of_a_split_tree_have_todays_names_and_install(
    run_cli, split_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "index"
    made = {p.name.split("-")[0]: p for p in _rocm_wheels(run_cli, split_copy, out)}
    targets = ["gfx1030", "gfx803", "gfx900", "gfx906", "gfx908", "gfx90a"]
    assert sorted(made) == sorted(
        ["rocm", "rocm_sdk_core", "rocm_sdk_libraries", *(f"rocm_sdk_device_{t}" for t in targets)]
    )
    assert made["rocm"].name == f"rocm-{VERSION}-py3-none-any.whl"

    libraries = _members(made["rocm_sdk_libraries"])
    assert "_rocm_sdk_libraries/lib/librocrand.so.1" in libraries
    assert "_rocm_sdk_libraries/lib/rocblas/library/TensileManifest.txt" in libraries
    assert not [m for m in libraries if m.endswith(".kpack") or "gfx" in m]  # arch-neutral
    meta = _read(made["rocm_sdk_libraries"], f"rocm_sdk_libraries-{VERSION}.dist-info/METADATA")
    assert "Name: rocm-sdk-libraries\n" in meta
    assert f"Requires-Dist: rocm-sdk-core=={VERSION}\n" in meta

    device = made["rocm_sdk_device_gfx90a"]
    members = _members(device)
    archives = sorted(m for m in members if m.endswith(".kpack"))
    assert archives == [f"_rocm_sdk_libraries/.kpack/{a}" for a in GFX90A]
    for name in archives:
        assert members[name].compress_type == zipfile.ZIP_STORED
        with zipfile.ZipFile(device) as zf:
            assert zf.read(name) == (split_copy / ".kpack" / name.rsplit("/", 1)[1]).read_bytes()
    assert "_rocm_sdk_libraries/lib/rocblas/library/TensileLibrary_gfx90a.dat" in members
    assert not [m for m in members if m.endswith((".py", ".so.1")) or "gfx1030" in m]
    meta = _read(device, f"rocm_sdk_device_gfx90a-{VERSION}.dist-info/METADATA")
    assert "Name: rocm-sdk-device-gfx90a\n" in meta
    assert f"Requires-Dist: rocm-sdk-libraries=={VERSION}\n" in meta
    gfx1030 = _members(made["rocm_sdk_device_gfx1030"])
    assert "_rocm_sdk_libraries/.kpack/rand_lib_gfx1030.kpack" in gfx1030
    assert "_rocm_sdk_libraries/lib/rocblas/library/TensileLibrary_gfx1030.dat" in gfx1030

    meta = _read(made["rocm"], f"rocm-{VERSION}.dist-info/METADATA")
    for extra in ("libraries", "device-gfx90a", "device-gfx1030", "device-all"):
        assert f"Provides-Extra: {extra}\n" in meta
    assert f'Requires-Dist: rocm-sdk-libraries=={VERSION}; extra == "libraries"\n' in meta
    assert f'Requires-Dist: rocm-sdk-device-gfx90a=={VERSION}; extra == "device-gfx90a"\n' in meta
    assert f'Requires-Dist: rocm-sdk-device-gfx803=={VERSION}; extra == "device-all"\n' in meta

    # pip resolves core, libraries and the gfx90a device package from the folder alone
    python = make_venv(tmp_path / "venv")
    _pip(
        python, "--no-index", "--find-links", str(out), f"rocm[libraries,device-gfx90a]=={VERSION}"
    )
    split_copy.rename(tmp_path / "gone")  # nothing below reads the tree
    proc = subprocess.run([str(python), "-c", LOAD], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["status"] == 100  # hipErrorNoDevice: no GPU here, the runtime loaded
    site = Path(got["site"])
    installed = sorted(p.name for p in site.glob("rocm_sdk_*.dist-info"))
    assert installed == [
        f"rocm_sdk_core-{VERSION}.dist-info",
        f"rocm_sdk_device_gfx90a-{VERSION}.dist-info",
        f"rocm_sdk_libraries-{VERSION}.dist-info",
    ]

    # the installed library's marker finds the installed archive, which holds its code
    lib = site / "_rocm_sdk_libraries" / "lib" / "librocrand.so.1"
    ref = kpack.read_ref(lib)
    assert ref is not None
    found = kpack.resolve(str(lib.parent), ref, AGENT, lambda p: Path(p).is_file())
    assert found is not None
    assert Path(found) == site / "_rocm_sdk_libraries" / ".kpack" / "rand_lib_gfx90a:xnack-.kpack"
    count = len([w for w in kpack.wrappers(lib) if w.magic == "HIPK"])
    assert count >= 1
    assert kpack.serves(kpack.read_archive(Path(found)), ref, count, AGENT)
    # a target whose device package is not installed finds nothing
    assert kpack.resolve(str(lib.parent), ref, "gfx1030", lambda p: Path(p).is_file()) is None


def test_rocm_wheels_arch_makes_only_those_device_packages(
    run_cli, split_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "index"
    made = sorted(
        p.name.split("-")[0] for p in _rocm_wheels(run_cli, split_copy, out, "--arch", "gfx90a")
    )
    assert made == ["rocm", "rocm_sdk_core", "rocm_sdk_device_gfx90a", "rocm_sdk_libraries"]
    meta = _read(out / f"rocm-{VERSION}-py3-none-any.whl", f"rocm-{VERSION}.dist-info/METADATA")
    assert "device-gfx1030" not in meta
    assert f'Requires-Dist: rocm-sdk-device-gfx90a=={VERSION}; extra == "device-all"\n' in meta


def _thin(run_cli, wheel: Path, tree: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    return run_bundle(run_cli, wheel, tree, out, "--mode", "thin", *extra)


def test_thin_wheel_of_a_split_tree_requires_what_pytorch_requires(
    run_cli, rand_wheel: Path, split_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    every = tmp_path / "every"
    res = _thin(run_cli, rand_wheel, split_copy, every)
    assert res.returncode == 0, res.stderr
    (thin,) = every.glob("hipext-*.whl")
    meta = _read(thin, "hipext-1.0.0.dist-info/METADATA")
    assert f"Requires-Dist: rocm[device-all,libraries]=={VERSION}\n" in meta
    assert "rocm-sdk-" not in meta  # the meta package installs core and the libraries

    out = tmp_path / "index"
    res = _thin(run_cli, rand_wheel, split_copy, out, "--arch", "gfx90a")
    assert res.returncode == 0, res.stderr
    (thin,) = out.glob("hipext-*.whl")
    meta = _read(thin, "hipext-1.0.0.dist-info/METADATA")
    assert f"Requires-Dist: rocm[device-gfx90a,libraries]=={VERSION}\n" in meta
    assert "rocm-sdk-" not in meta
    assert not [m for m in _members(thin) if m.endswith(".kpack") or "librocrand" in m]
    with zipfile.ZipFile(thin) as zf:
        zf.extract("hipext/_rand.so", tmp_path / "x")
    info = elf.read_elf(tmp_path / "x/hipext/_rand.so")
    assert "$ORIGIN/../_rocm_sdk_libraries/lib" in info.runpath
    # inspect names the requirement that installs the libraries package
    seen = run_cli(["--json", "inspect", str(thin)], cwd=tmp_path)
    assert seen.returncode == 0, seen.stderr
    rows = {r["path"]: r for r in json.loads(seen.stdout)["elf_files"]}
    assert rows["hipext/_rand.so"]["from_packages"]["librocrand.so.1"] == [
        {
            "folder": "_rocm_sdk_libraries/lib",
            "distribution": "rocm-sdk-libraries",
            "requirement": f"rocm[device-gfx90a,libraries]=={VERSION}",
            "checked": True,
        }
    ]

    # pip finds rocm's packages through the thin wheel's requirement, in the folder alone
    _rocm_wheels(run_cli, split_copy, out, "--arch", "gfx90a")
    python = make_venv(tmp_path / "venv")
    _pip(python, "--no-index", "--find-links", str(out), "hipext")
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    assert (site / f"rocm_sdk_device_gfx90a-{VERSION}.dist-info").is_dir()
    lib = site / "_rocm_sdk_libraries" / "lib" / "librocrand.so.1"
    ref = kpack.read_ref(lib)
    assert ref is not None
    found = kpack.resolve(str(lib.parent), ref, AGENT, lambda p: Path(p).is_file())
    assert found is not None
    assert Path(found).parent == site / "_rocm_sdk_libraries" / ".kpack"
