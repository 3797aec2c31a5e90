"""bundle on the real ROCm 5.2.3 tree from Debian: the fat wheel runs with the tree gone.

No GPU here: the HIP runtime must load from the venv and report hipErrorNoDevice (100); that is
the "fake" part (no device), everything else is real.
"""

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
from rocm_build.common.sizes import human_size

from .conftest import make_venv, pip_install
from .helpers import cc_shared
from .runs import SMALL

pytestmark = pytest.mark.slow

CHECK = r"""
import json, sys
import hipext
status, count = hipext.device_count_status()
maps = sorted({line.split()[-1] for line in open("/proc/self/maps") if ".so" in line})
print(json.dumps({"status": status, "count": count, "maps": maps}))
"""


def _bundle(run_cli, wheel: Path, tree: Path, out: Path, *extra: str, env=None):  # type: ignore[no-untyped-def]
    front = ["--json"] if "--json" in extra else []
    rest = [e for e in extra if e != "--json"]
    return run_cli(
        [
            *front,
            "bundle",
            str(wheel),
            "--rocm",
            str(tree),
            "--output-dir",
            str(out),
            "-z",
            "1",
            *rest,
        ],
        cwd=wheel.parent,
        env=SMALL if env is None else env,
    )


def test_fat_wheel_runs_without_the_tree(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out_dir = tmp_path / "out"
    res = _bundle(run_cli, hip_ext_wheel, tree_copy, out_dir, "--arch", "gfx90a;gfx1030", env={})
    assert res.returncode == 0, res.stderr
    (fat,) = out_dir.glob("*.whl")
    with zipfile.ZipFile(fat) as zf:
        names = set(zf.namelist())
        prov = json.loads(zf.read("hipext/.rocm-build-bundle.json"))
    libs = {lib["name"]: lib for lib in prov["libraries"]}
    for name in ("libamdhip64.so.5", "libhsa-runtime64.so.1", "libhsakmt.so.1", "libnuma.so.1"):
        assert f"hipext/lib/{name}" in names
        assert libs[name]["origin"] == "rocm"
    # HIP dlopen()s comgr: no NEEDED entry points at it, the pattern list adds it
    assert libs["libamd_comgr.so.2"]["reason"] == "dlopen"
    assert "hipext/lib/libLLVM-15.so.1" in names  # comgr's own closure

    # wheel unpack verifies RECORD; every ELF has a DT_RPATH inside the wheel, no RUNPATH
    unpacked = tmp_path / "unpacked"
    subprocess.run(
        [sys.executable, "-m", "wheel", "unpack", "-d", str(unpacked), str(fat)],
        check=True,
        capture_output=True,
    )
    root = next(unpacked.iterdir())
    for so in root.rglob("*.so*"):
        info = elf.read_elf(so)
        assert info.runpath == (), so
        assert info.rpath, so
        assert all(e.startswith("$ORIGIN") for e in info.rpath), (so, info.rpath)

    # move the tree out of reach, install into a fresh venv, run with a clean environment
    gone = tmp_path / "moved-away"
    tree_copy.rename(gone)
    shutil.rmtree(gone)
    python = make_venv(tmp_path / "venv")
    pip_install(python, fat)
    proc = subprocess.run(
        [str(python), "-c", CHECK],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == 100  # hipErrorNoDevice: runtime loaded, no GPU
    venv = str(tmp_path / "venv")
    rocm_names = set(libs)
    mapped = {Path(p).name: p for p in result["maps"]}
    for name in ("libamdhip64.so.5", "libhsa-runtime64.so.1", "libhsakmt.so.1"):
        assert name in mapped, result["maps"]
    for name, path in mapped.items():
        if name in rocm_names or name == "_kern.so":
            assert path.startswith(venv), (name, path)

    # a decoy HIP runtime first on LD_LIBRARY_PATH does not take over: DT_RPATH wins
    decoy = cc_shared(
        tmp_path / "decoy" / "libamdhip64.so.5",
        "int hipGetDeviceCount(int *n) { *n = 7; return 777; }\n",
        soname="libamdhip64.so.5",
    )
    proc = subprocess.run(
        [str(python), "-c", CHECK],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LD_LIBRARY_PATH": str(decoy.parent)},
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == 100
    assert not any(str(decoy.parent) in p for p in result["maps"])


def test_rebundle_is_noop(run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out_dir = tmp_path / "out"
    first = _bundle(run_cli, hip_ext_wheel, tree_copy, out_dir, "--json")
    assert first.returncode == 0, first.stderr
    (fat,) = out_dir.glob("*.whl")
    before = (fat.stat().st_mtime_ns, fat.read_bytes())
    again = _bundle(run_cli, hip_ext_wheel, tree_copy, out_dir, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)[0]["status"] == "up-to-date"
    assert (fat.stat().st_mtime_ns, fat.read_bytes()) == before
    # bundling the bundled wheel changes nothing either
    second_dir = tmp_path / "second"
    res = _bundle(run_cli, fat, tree_copy, second_dir, "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)[0]["status"] == "unchanged"
    (copy,) = second_dir.glob("*.whl")
    assert copy.name == fat.name
    assert copy.read_bytes() == before[1]
    # a changed setting is not a no-op
    res = _bundle(run_cli, hip_ext_wheel, tree_copy, out_dir, "--json", "--arch", "gfx90a")
    assert json.loads(res.stdout)[0]["status"] == "bundled"


def test_inspect_fat_wheel(run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out_dir = tmp_path / "out"
    # both targets: --arch gfx90a alone would prune the gfx1030 code this test inspects
    res = _bundle(run_cli, hip_ext_wheel, tree_copy, out_dir, "--arch", "gfx90a;gfx1030")
    assert res.returncode == 0, res.stderr
    (fat,) = out_dir.glob("*.whl")
    res = run_cli(["--json", "inspect", str(fat)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    data = json.loads(res.stdout)
    rows = {r["path"]: r for r in data["elf_files"]}
    assert rows["hipext/_kern.so"]["targets"] == ["gfx1030", "gfx90a"]
    assert rows["hipext/_kern.so"]["rpath"] == ["$ORIGIN/lib"]
    assert not any(r["escaping"] or r["unresolved"] for r in rows.values())
    assert {b["name"] for b in data["bundled"]} >= {"libamdhip64.so.5", "libhiprtc-builtins.so.5"}
    assert data["platform_tag"].split(".")[0] in fat.name
    assert data["over_pypi_limit"] is False
    code_bytes = {row["target"]: row["code_bytes"] for row in data["coverage"]}
    kern_size = next(m for m in zipfile.ZipFile(fat).infolist() if m.filename.endswith("_kern.so"))
    for target in ("gfx90a", "gfx1030"):  # each target's code object: real, smaller than the file
        assert 1000 < code_bytes[target] < kern_size.file_size
    text = run_cli(["inspect", str(fat)], cwd=tmp_path)
    assert "gfx90a" in text.stdout
    assert "libamdhip64.so.5  from rocm" in text.stdout
    missing = run_cli(["inspect", str(fat), "--require-arch", "gfx90a,gfx1100"], cwd=tmp_path)
    assert missing.returncode == 11
    assert "gfx1100" in missing.stderr
    ok = run_cli(["inspect", str(fat), "--require-arch", "gfx90a;gfx1030"], cwd=tmp_path)
    assert ok.returncode == 0
    # the input (not yet bundled) shows the escape: libamdhip64 is not in the wheel
    raw = json.loads(run_cli(["--json", "inspect", str(hip_ext_wheel)], cwd=tmp_path).stdout)
    assert raw["elf_files"][0]["unresolved"] == ["libamdhip64.so.5"]
    assert raw["platform_tag"].startswith("linux_")


def test_tag_matches_auditwheel_show(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path, auditwheel: str
) -> None:  # type: ignore[no-untyped-def]
    out_dir = tmp_path / "out"
    assert _bundle(run_cli, hip_ext_wheel, tree_copy, out_dir).returncode == 0
    (fat,) = out_dir.glob("*.whl")
    shown = subprocess.run([auditwheel, "show", str(fat)], capture_output=True, text=True)
    found = re.search(r'platform tag:\s*"([^"]+)"', " ".join(shown.stdout.split()))
    assert found, shown.stdout + shown.stderr
    file_tags = fat.name[: -len(".whl")].split("-")[-1].split(".")
    assert found.group(1) in file_tags
    assert found.group(1).startswith("manylinux_")


def test_dry_run_plans_and_writes_nothing(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out_dir = tmp_path / "out"
    text = _bundle(run_cli, hip_ext_wheel, tree_copy, out_dir, "--dry-run", "--arch", "gfx90a")
    assert text.returncode == 0, text.stderr
    assert not out_dir.exists() or not list(out_dir.iterdir())
    assert f"would bundle {hip_ext_wheel.name} -> " in text.stdout
    assert "libamdhip64.so.5  from rocm" in text.stdout
    # each library's size, and the total that would be bundled
    hip = (tree_copy / "lib" / "libamdhip64.so.5").resolve()
    line = next(ln for ln in text.stdout.splitlines() if "libamdhip64.so.5  from rocm" in ln)
    assert f"({human_size(hip.stat().st_size)}, needed" in line, line
    total = next(ln for ln in text.stdout.splitlines() if ln.startswith("  to bundle: "))
    assert re.fullmatch(
        r"  to bundle: [0-9.]+ [kMG]?B uncompressed \(\d+ libraries [0-9.]+ [kMG]?B, "
        r"\d+ data files [0-9.]+ [kMG]?B\)",
        total.replace("bytes", "B"),
    ), total
    assert "search path of hipext/_kern.so: - -> $ORIGIN/lib" in text.stdout
    data = json.loads(
        _bundle(run_cli, hip_ext_wheel, tree_copy, out_dir, "--json", "--dry-run").stdout
    )
    (planned,) = data
    assert planned["status"] == "planned"
    assert "libhsa-runtime64.so.1" in {lib["name"] for lib in planned["plan"]["libraries"]}
    assert not out_dir.exists() or not list(out_dir.iterdir())
    # the real run then does what the plan said
    real = json.loads(_bundle(run_cli, hip_ext_wheel, tree_copy, out_dir, "--json").stdout)[0]
    assert real["status"] == "bundled"
    assert real["output"] == planned["output"]
    assert real["plan"]["libraries"] == planned["plan"]["libraries"]


def test_a_target_the_library_has_no_code_for_is_one_line(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The extension has gfx90a and gfx1030 code; gfx1100 asked for too: exit 11 before anything
    is written, in one line that names the library and what it has."""
    from .runs import run_bundle

    out = tmp_path / "out"
    res = run_bundle(run_cli, hip_ext_wheel, tree_copy, out, "--arch", "gfx90a;gfx1100")
    assert res.returncode == 11, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if "rocm-build: error:" in ln]
    assert len(errors) == 1, res.stderr
    assert "_kern.so has no code for gfx1100 (it has" in errors[0]
    assert "\\n" not in errors[0]  # no newline shown escaped inside the line
    assert not out.exists() or not list(out.glob("*.whl"))
