"""bundle rules on the real ROCm tree plus gcc-built libraries: missing libraries stop it, data
trees follow the targets, a vision-like wheel uses the torch fat wheel's libraries."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rocm_build.binary import elf
from rocm_build.bundle import apply as bundle_apply
from rocm_build.common.errors import BundleError

from .conftest import make_venv, pip_install
from .helpers import cc_shared, make_wheel, versioned_lib
from .runs import SMALL

pytestmark = pytest.mark.slow


def _bundle(run_cli, cwd: Path, *args: str):  # type: ignore[no-untyped-def]
    return run_cli(["--json", "bundle", "-z", "1", *args], cwd=cwd, env=SMALL)


def test_unresolvable_needed_stops(run_cli, tree_copy: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    gone = versioned_lib(tmp_path / "elsewhere", "nothere", "3.1", "int nothere(void){return 1;}\n")
    ext = cc_shared(
        tmp_path / "build" / "_x.so",
        "int nothere(void);\nint x(void){return nothere();}\n",
        libs=[gone],
    )
    shutil.rmtree(tmp_path / "elsewhere")
    wheel = make_wheel(tmp_path / "dist", "needy", "1.0", {"needy/_x.so": ext})
    out = tmp_path / "out"
    res = _bundle(run_cli, tmp_path, str(wheel), "--rocm", str(tree_copy), "--output-dir", str(out))
    assert res.returncode == 10, res.stderr
    assert "libnothere.so.3 (needed by needy/_x.so)" in " ".join(res.stderr.split())
    assert not out.exists() or not list(out.rglob("*"))  # no wheel, no temporary file


def test_data_trees_follow_targets(run_cli, tree_copy: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lib = tree_copy / "lib"
    rocblas = versioned_lib(
        lib,
        "rocblas",
        "0.1",
        "int hipInit(unsigned);\nint rocblas_init(void){return hipInit(0);}\n",
        libs=[lib / "libamdhip64.so.5"],
    )
    library = lib / "rocblas" / "library"
    library.mkdir(parents=True)
    files = {
        "TensileLibrary_lazy_gfx90a.dat": False,
        "TensileLibrary_lazy_gfx1030.dat": True,
        "TensileLibrary_lazy_gfx942.dat": True,
        "Kernels.so-000-gfx90a-xnack-.hsaco": False,
        "Kernels.so-000-gfx1030.hsaco": True,
        "gfx908/TensileLibrary_gfx908.co": False,
        "TensileManifest.txt": True,  # no target in the name: always kept
    }
    for name in files:
        (library / name).parent.mkdir(parents=True, exist_ok=True)
        (library / name).write_bytes(name.encode() * 50)
    ext = cc_shared(
        tmp_path / "build" / "_b.so",
        "int rocblas_init(void);\nint b(void){return rocblas_init();}\n",
        libs=[rocblas],
    )
    wheel = make_wheel(tmp_path / "dist", "blasy", "1.0", {"blasy/_b.so": ext})
    out = tmp_path / "out"
    res = _bundle(
        run_cli, tmp_path, str(wheel), "--rocm", str(tree_copy), "--output-dir", str(out),
        "--arch", "gfx1030,gfx942",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    summary = json.loads(res.stdout)[0]["plan"]
    assert summary["data_skipped"] == 3
    (fat,) = out.glob("*.whl")
    with zipfile.ZipFile(fat) as zf:
        names = set(zf.namelist())
    assert "blasy/lib/librocblas.so.0" in names
    for name, kept in files.items():
        assert (f"blasy/lib/rocblas/library/{name}" in names) is kept, name
    # inspect counts each target's data bytes
    shown = json.loads(run_cli(["--json", "inspect", str(fat)], cwd=tmp_path).stdout)
    data_bytes = {row["target"]: row["data_bytes"] for row in shown["coverage"]}
    for target in ("gfx1030", "gfx942"):
        expected = sum(len(n.encode()) * 50 for n, kept in files.items() if kept and target in n)
        assert data_bytes[target] == expected


def test_vision_like_wheel_uses_torch_libs(run_cli, tree_copy: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lib = tree_copy / "lib"
    hip = lib / "libamdhip64.so.5"
    torch_hip = cc_shared(
        tmp_path / "build" / "torch" / "libtorch_hip.so",
        "int hipGetDeviceCount(int*);\n"
        "int torch_count(void){int n=-1; return hipGetDeviceCount(&n);}\n",
        soname="libtorch_hip.so",
        libs=[hip],
    )
    torch = make_wheel(
        tmp_path / "dist",
        "torch",
        "2.9.0+rocm5.2.3",
        {"torch/__init__.py": b"", "torch/lib/libtorch_hip.so": torch_hip},
    )
    vision_so = cc_shared(
        tmp_path / "build" / "vision" / "_C.so",
        "int torch_count(void);\nint hipGetDeviceCount(int*);\n"
        "int vision_status(void){int n; return torch_count() == hipGetDeviceCount(&n) ? "
        "hipGetDeviceCount(&n) : -1;}\n",
        libs=[torch_hip, hip],
    )
    vision = make_wheel(
        tmp_path / "dist",
        "torchvision",
        "0.24.0+rocm5.2.3",
        {"torchvision/__init__.py": b"", "torchvision/_C.so": vision_so},
        requires=["torch"],
    )
    out = tmp_path / "out"
    res = _bundle(
        run_cli, tmp_path, str(vision), str(torch), "--rocm", str(tree_copy),
        "--output-dir", str(out),
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    results = {Path(r["input"]).name.split("-")[0]: r for r in json.loads(res.stdout)}
    tv_plan = results["torchvision"]["plan"]
    assert tv_plan["libraries"] == []  # nothing copied: torch carries it
    assert set(tv_plan["from_torch"]) == {"libamdhip64.so.5", "libtorch_hip.so"}
    fat_torch = Path(results["torch"]["output"])
    fat_tv = Path(results["torchvision"]["output"])
    with zipfile.ZipFile(fat_tv) as zf:
        names = zf.namelist()
        meta = zf.read("torchvision-0.24.0+rocm5.2.3.dist-info/METADATA").decode()
    assert not any("libamdhip64" in n for n in names)
    assert "Requires-Dist: torch==2.9.0+rocm5.2.3" in meta
    assert "Requires-Dist: torch\n" not in meta
    with zipfile.ZipFile(fat_torch) as zf:
        assert "torch/lib/libamdhip64.so.5" in zf.namelist()

    # install both, tree gone: the vision library runs on torch's copies
    shutil.rmtree(tree_copy)
    python = make_venv(tmp_path / "venv")
    pip_install(python, fat_torch)
    pip_install(python, fat_tv)
    site = next((tmp_path / "venv" / "lib").glob("python*/site-packages"))
    info = elf.read_elf(site / "torchvision" / "_C.so")
    assert "$ORIGIN/../torch/lib" in info.rpath
    check = (
        "import ctypes, torchvision, os\n"
        "lib = ctypes.CDLL(os.path.join(os.path.dirname(torchvision.__file__), '_C.so'))\n"
        "print(lib.vision_status())\n"
        "print([l.split()[-1] for l in open('/proc/self/maps') if 'libamdhip64' in l][0])\n"
    )
    run = subprocess.run(
        [str(python), "-c", check],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    status, mapped = run.stdout.split()
    assert status == "100"
    assert mapped.startswith(str(site / "torch" / "lib"))


def test_library_opened_by_another_name_goes_in_under_it(  # type: ignore[no-untyped-def]
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:
    """Debian's real libhsa-runtime64 dlopens the unversioned "libhsa-amd-aqlprofile64.so";
    Debian has no aqlprofile, so a gcc-built one with ROCm's naming is put in the tree. A wheel
    cannot hold the symlink, so the name becomes a stub library that NEEDs the real one. The
    probe in the wheel both links the library (by its soname) and dlopens it by the bare name:
    once installed, with the tree gone, both must reach the same single instance."""
    lib = tree_copy / "lib"
    real = versioned_lib(lib, "hsa-amd-aqlprofile64", "1.0.0", "int aql_version(void){return 7;}\n")
    caller = cc_shared(
        tmp_path / "build" / "_probe.so",
        "#include <dlfcn.h>\n"
        "int hipGetDeviceCount(int*); int aql_version(void);\n"
        "int probe(void){int n; hipGetDeviceCount(&n);\n"
        '  void *h = dlopen("libhsa-amd-aqlprofile64.so", RTLD_NOW);\n'
        "  if (!h) return -1;\n"
        '  int (*v)(void) = (int (*)(void))dlsym(h, "aql_version");\n'
        "  if (!v) return -2;\n"
        "  return v == aql_version ? v() : -3;}\n",
        libs=[lib / "libamdhip64.so.5", lib / real.name],
        extra=["-ldl"],
    )
    wheel = make_wheel(
        tmp_path / "dist", "probe", "1.0", {"probe/__init__.py": b"", "probe/_probe.so": caller}
    )
    out = tmp_path / "out"
    res = run_cli(
        ["--json", "bundle", "-z", "1", str(wheel), "--rocm", str(tree_copy), "--output-dir",
         str(out)],
        cwd=tmp_path,
        env={"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": "libhsa-amd-aqlprofile64.so*"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (result,) = json.loads(res.stdout)
    libs = {x["name"]: x for x in result["plan"]["libraries"]}
    assert libs["libhsa-amd-aqlprofile64.so.1"]["aliases"] == ["libhsa-amd-aqlprofile64.so"]
    fat = Path(result["output"])
    with zipfile.ZipFile(fat) as zf:
        names = zf.namelist()
        stub = tmp_path / "stub.so"
        stub.write_bytes(zf.read("probe/lib/libhsa-amd-aqlprofile64.so"))
    info = elf.read_elf(stub)
    assert (info.needed, info.soname) == (
        ("libhsa-amd-aqlprofile64.so.1",),
        "libhsa-amd-aqlprofile64.so",
    )
    assert info.rpath == ("$ORIGIN",)
    assert stub.stat().st_size < 64 * 1024
    assert f"probe/lib/{real.name}" not in names  # the real file name: nobody asks for it
    subprocess.run(
        [sys.executable, "-m", "wheel", "unpack", "-d", str(tmp_path / "u"), str(fat)],
        check=True,
        capture_output=True,
    )  # fmt: skip  (verifies RECORD)
    shown = run_cli(["inspect", str(fat)], cwd=tmp_path)
    assert "also as libhsa-amd-aqlprofile64.so" in shown.stdout, shown.stdout

    shutil.rmtree(tree_copy)
    python = make_venv(tmp_path / "venv")
    pip_install(python, fat)
    check = (
        "import ctypes, os, probe\n"
        "lib = ctypes.CDLL(os.path.join(os.path.dirname(probe.__file__), '_probe.so'))\n"
        "print(lib.probe())\n"
        "print(sum('libhsa-amd-aqlprofile64.so.1' in l for l in open('/proc/self/maps')) > 0)\n"
    )
    run = subprocess.run(
        [str(python), "-c", check], capture_output=True, text=True,
        env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["7", "True"]


def test_alias_stub_tries_the_next_linker(tmp_path: Path) -> None:
    """A linker that fails (a cross target for binutils ld, say) hands over to the next one;
    with none left, the error says what to install."""
    real = versioned_lib(tmp_path / "lib", "thing", "2.1", "int thing(void){return 2;}\n")
    ld = shutil.which("ld")
    assert ld is not None
    stub = bundle_apply.alias_stub(["/bin/false", ld], real, "libthing.so", tmp_path / "s")
    assert elf.read_elf(stub).needed == ("libthing.so.2",)
    with pytest.raises(BundleError, match=r"cannot link the alias libthing\.so .*install binutils"):
        bundle_apply.alias_stub(["/bin/false"], real, "libthing.so", tmp_path / "s2")


def test_bundle_prints_size_and_notes_pypi_limit(
    tree_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summary line carries the wheel's size; above PyPI's default limit (lowered here to
    this wheel's size) a note says what to do."""
    from click.testing import CliRunner

    from rocm_build import cli
    from rocm_build.bundle import report

    ext = cc_shared(tmp_path / "build" / "_p.so", "int p(void){return 1;}\n")
    wheel = make_wheel(tmp_path / "dist", "plain", "1.0", {"plain/_p.so": ext})
    monkeypatch.chdir(tmp_path)
    args = ["bundle", str(wheel), "--rocm", str(tree_copy), "--output-dir", str(tmp_path / "o")]
    first = CliRunner().invoke(cli.cli, args)
    assert first.exit_code == 0, first.output
    line = re.search(r"^bundled: (\S+)  \((.+?), [0-9.]+ s\)$", first.output, re.M)
    assert line, first.output
    fat = Path(line[1])
    assert line[2] == report.human_size(fat.stat().st_size)
    assert "per-file limit" not in first.output
    monkeypatch.setattr(report, "PYPI_LIMIT", fat.stat().st_size - 1)
    second = CliRunner().invoke(cli.cli, args)  # up to date, and still too big for PyPI
    assert "up to date: " in second.output
    assert "larger than PyPI's default" in second.output


@pytest.mark.parametrize("platform", ["windows", "linux"])
def test_platform_that_the_wheel_tag_contradicts_is_refused(  # type: ignore[no-untyped-def]
    run_cli, hip_ext_so: Path, rocm_tree: Path, tmp_path: Path, platform: str
) -> None:
    """--platform windows on a Linux wheel (and linux on a Windows one) is a mistake: exit 2
    with one line, instead of an unbundled wheel and exit 0."""
    tag = "cp311-cp311-linux_x86_64" if platform == "windows" else "cp311-cp311-win_amd64"
    wheel = make_wheel(
        tmp_path / "dist", "hipext", "1.0.0", {"hipext/_kern.so": hip_ext_so}, tag=tag
    )
    out = tmp_path / "out"
    res = run_cli(
        ["bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(out),
         "--platform", platform],
        cwd=tmp_path, env=SMALL,
    )  # fmt: skip
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "rocm-build: error:" in ln]
    assert len(lines) == 1, res.stderr
    assert f"is {platform}" in lines[0]
    assert "auto" in lines[0]
    assert not out.exists() or not list(out.glob("*.whl"))
