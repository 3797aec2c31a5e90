"""Bundling from a kpack-split tree: the fat wheel carries the archives its libraries' markers
name, where the markers resolve from the libraries' new place, for the requested targets only;
the coverage gate and ``inspect`` read the archives, not the empty ``.hip_fatbin``.

Real parts: the ROCm 5.2 tree from Debian's packages, with its rocRAND replaced by the library
ROCm's own kpack tool split from the same file (``shared/kpack-reference``: host library,
``.kpack/rand_lib_<target>.kpack``, TheRock's manifest). No GPU: the HIP runtime answers 100,
and Debian's runtime cannot load kpack, so lookups are proven by reading the archives."""

from __future__ import annotations

import json
import posixpath
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from rocm_build.binary import elf, elfpatch, kpack
from tests.support import hostile
from tests.support.kpackwriter import code_objects

from .conftest import INIT, make_venv, pip_install
from .helpers import cc_shared, make_wheel
from .runs import RAND_CHECK, run_bundle

pytestmark = pytest.mark.slow

RAND = "librocrand.so.1.1"
GFX90A = ("rand_lib_gfx90a:xnack+.kpack", "rand_lib_gfx90a:xnack-.kpack")


@pytest.fixture
def split_tree(tree_copy: Path, kpack_reference: Path) -> Path:
    """The tree with rocRAND kpack-split as TheRock ships it."""
    lib = tree_copy / "lib" / RAND
    lib.unlink()  # a hard link into the cached tree: never written through
    shutil.copyfile(kpack_reference / "lib" / RAND, lib)
    shutil.copytree(kpack_reference / ".kpack", tree_copy / ".kpack")
    manifest = tree_copy / "share" / "therock" / "therock_manifest.json"
    manifest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(kpack_reference / "share/therock/therock_manifest.json", manifest)
    return tree_copy


def _members(fat: Path) -> dict[str, zipfile.ZipInfo]:
    with zipfile.ZipFile(fat) as zf:
        return {i.filename: i for i in zf.infolist()}


def test_one_target_carries_that_targets_archives_stored(
    run_cli, rand_wheel: Path, split_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    res = run_bundle(run_cli, rand_wheel, split_tree, out, "--arch", "gfx90a", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)[0]["plan"]
    kp = plan["kpack"]
    lib = kp["libraries"]["hipext/lib/librocrand.so.1"]
    assert lib["kernel_name"] == "math-libs/rocRAND/stage/lib/librocrand.so.1.1"
    assert lib["code_objects"] == 1
    assert lib["archives"] == [f"hipext/.kpack/{a}" for a in GFX90A]
    assert sorted(kp["archives"]) == [f"hipext/.kpack/{a}" for a in GFX90A]
    assert plan["device_gaps"] == []
    (fat,) = out.glob("*.whl")
    members = _members(fat)
    for name in GFX90A:
        info = members[f"hipext/.kpack/{name}"]
        assert info.compress_type == zipfile.ZIP_STORED
        with zipfile.ZipFile(fat) as zf:
            assert zf.read(info) == (split_tree / ".kpack" / name).read_bytes()
    assert not [m for m in members if m.endswith(".kpack") and "gfx90a" not in m]
    # the library's marker resolves inside the wheel, as the loader resolves it
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(fat) as zf:
        zf.extractall(unpacked)
    lib_path = unpacked / "hipext/lib/librocrand.so.1"
    ref = kpack.read_ref(lib_path)
    assert ref is not None
    found = kpack.resolve(
        str(lib_path.parent), ref, "gfx90a:sramecc+:xnack-", lambda p: Path(p).is_file()
    )
    assert found is not None
    assert Path(found).name == "rand_lib_gfx90a:xnack-.kpack"
    archive = kpack.read_archive(Path(found))
    (entry,) = [e for e in archive.for_kernel(ref.kernel_name) if e.index == 0]
    code = kpack.read_code_object(Path(found), archive, entry)
    assert code[:4] == b"\x7fELF"
    # the RPATH edit kept every PT_LOAD in order, the marker inside its segment
    phdrs, size = elfpatch.read_phdrs(lib_path)
    assert elfpatch.layout_problems(phdrs, size) == []
    assert [w.address for w in kpack.wrappers(lib_path)] == [kpack.marker_address(lib_path)[0]]
    # provenance says what was carried
    prov = json.loads((unpacked / "hipext/.rocm-build-bundle.json").read_text())
    assert sorted(prov["kpack"]["archives"]) == [f"hipext/.kpack/{a}" for a in GFX90A]

    # installed with the tree out of reach: the split library loads (no GPU: 100)
    shutil.rmtree(split_tree)
    python = make_venv(tmp_path / "venv")
    pip_install(python, fat)
    proc = subprocess.run(
        [str(python), "-c", RAND_CHECK], capture_output=True, text=True, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["status"] == 100

    # inspect sees the archives: gfx90a is covered
    seen = run_cli(["--json", "inspect", str(fat), "--require-arch", "gfx90a"], cwd=tmp_path)
    assert seen.returncode == 0, seen.stderr
    rows = {r["path"]: r for r in json.loads(seen.stdout)["elf_files"]}
    assert rows["hipext/lib/librocrand.so.1"]["targets"] == ["gfx90a"]
    # ... and without them it is not
    stripped = tmp_path / "stripped" / fat.name
    stripped.parent.mkdir()
    with zipfile.ZipFile(fat) as src, zipfile.ZipFile(stripped, "w") as dst:
        for info in src.infolist():
            if not info.filename.endswith((".kpack", "RECORD")):
                dst.writestr(info, src.read(info))
            elif info.filename.endswith("RECORD"):
                kept = [
                    line for line in src.read(info).decode().splitlines() if ".kpack," not in line
                ]
                dst.writestr(info, "\n".join(kept) + "\n")
    blind = run_cli(["inspect", str(stripped), "--require-arch", "gfx90a"], cwd=tmp_path)
    assert blind.returncode == 11, blind.stdout + blind.stderr
    assert "none: no archive in the wheel" in blind.stdout
    assert "no kpack loader (librocm_kpack.so) in the wheel" in blind.stdout


def test_every_archive_without_arch(
    run_cli, rand_wheel: Path, split_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    res = run_bundle(run_cli, rand_wheel, split_tree, out)
    assert res.returncode == 0, res.stderr
    (fat,) = out.glob("*.whl")
    carried = sorted(posixpath.basename(m) for m in _members(fat) if m.endswith(".kpack"))
    assert carried == sorted(p.name for p in (split_tree / ".kpack").iterdir())
    assert len(carried) == 7


def test_a_target_no_archive_serves_stops_the_bundle(
    run_cli, rand_wheel: Path, split_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    res = run_bundle(run_cli, rand_wheel, split_tree, out, "--arch", "gfx940")
    assert res.returncode == 11, res.stderr
    assert "librocrand.so.1 has no kpack archive serving gfx940" in res.stderr
    assert not out.exists() or not list(out.glob("*.whl"))
    ok = run_bundle(
        run_cli, rand_wheel, split_tree, out, "--arch", "gfx940", "--allow-missing-arch"
    )
    assert ok.returncode == 0, ok.stderr


def test_a_marker_whose_archives_are_gone_is_an_error(
    run_cli, rand_wheel: Path, split_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    shutil.rmtree(split_tree / ".kpack")
    out = tmp_path / "out"
    res = run_bundle(run_cli, rand_wheel, split_tree, out)
    assert res.returncode == 10, res.stderr
    assert "librocrand.so.1 is kpack-split but no archive its marker names" in res.stderr
    assert "Traceback" not in res.stderr


def test_split_arch_puts_each_targets_archives_in_its_device_wheel(
    run_cli, rand_wheel: Path, split_tree: Path, hip_ext_so: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    res = run_bundle(
        run_cli, rand_wheel, split_tree, out, "--arch", "gfx90a;gfx1030", "--split-arch"
    )
    assert res.returncode == 0, res.stderr
    assert "device code (3 kpack archives) went to the device wheels" in res.stdout
    # Debian's runtime cannot load kpack: the project's own library keeps its device code
    assert (
        "own libraries stays in the host wheel (the tree's runtime cannot load kpack" in res.stdout
    )
    wheels = {p.name.split("-")[0]: p for p in out.glob("*.whl")}
    host = wheels["hipext"]
    assert not [m for m in _members(host) if m.endswith(".kpack")]  # host-only libraries
    by_target = {
        t: sorted(m for m in _members(wheels[f"amd_hipext_device_{t}"]) if m.endswith(".kpack"))
        for t in ("gfx90a", "gfx1030")
    }
    assert by_target["gfx90a"] == [f"hipext/.kpack/{a}" for a in GFX90A]
    assert by_target["gfx1030"] == ["hipext/.kpack/rand_lib_gfx1030.kpack"]
    # installed side by side, the host library's marker finds each target's archive
    site = tmp_path / "site"
    for wheel in (host, *(wheels[f"amd_hipext_device_{t}"] for t in by_target)):
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
    lib = site / "hipext/lib/librocrand.so.1"
    ref = kpack.read_ref(lib)
    assert ref is not None
    for agent, archive in (
        ("gfx90a:sramecc+:xnack+", "rand_lib_gfx90a:xnack+.kpack"),
        ("gfx1030", "rand_lib_gfx1030.kpack"),
    ):
        found = kpack.resolve(str(lib.parent), ref, agent, lambda p: Path(p).is_file())
        assert found is not None
        assert Path(found).name == archive
        read = kpack.read_archive(Path(found))
        assert kpack.serves(read, ref, 1, agent)
    assert kpack.read_ref(site / "hipext/_kern.so") is None
    assert len(elf.offload_bundles(site / "hipext/_kern.so")) == len(
        elf.offload_bundles(hip_ext_so)
    )
    assert not list((site / "hipext/.kpack").glob("hipext_*"))


#: a stand-in for TheRock's kpack loader: TheRock's ``librocm_kpack`` is on no registry, so a
#: tree whose runtime loads kpack cannot exist here; bundle only asks whether the tree has it
STAND_IN = "int rocm_kpack_stand_in(void) { return 0; }\n"


def test_split_arch_kpack_splits_the_projects_own_libraries_where_the_runtime_loads_kpack(
    run_cli, rand_wheel: Path, split_tree: Path, hip_ext_so: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    cc_shared(split_tree / "lib" / "librocm_kpack.so", STAND_IN)
    out = tmp_path / "out"
    res = run_bundle(
        run_cli, rand_wheel, split_tree, out, "--arch", "gfx90a;gfx1030", "--split-arch"
    )
    assert res.returncode == 0, res.stderr
    assert "own libraries' device code (1 libraries, 2 kpack archives) went to" in res.stdout
    assert "stays in the host wheel" not in res.stdout
    wheels = {p.name.split("-")[0]: p for p in out.glob("*.whl")}
    host = wheels["hipext"]
    assert not [m for m in _members(host) if m.endswith(".kpack")]
    devices = {t: wheels[f"amd_hipext_device_{t}"] for t in ("gfx90a", "gfx1030")}
    for target, wheel in devices.items():
        info = _members(wheel)[f"hipext/.kpack/hipext_{target}.kpack"]
        assert info.compress_type == zipfile.ZIP_STORED
    site = tmp_path / "site"
    for wheel in (host, *devices.values()):
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(site)
    # the host library: a marker, no bundle bytes (.hip_fatbin NOBITS)
    kern = site / "hipext/_kern.so"
    ref = kpack.read_ref(kern)
    assert ref is not None
    assert ref.kernel_name == "hipext/_kern.so"
    assert list(ref.search_paths) == [".kpack/hipext_@GFXARCH@.kpack"]
    with kern.open("rb") as fh:
        assert ELFFile(fh).get_section_by_name(".hip_fatbin")["sh_type"] == "SHT_NOBITS"
    assert elf.offload_bundles(kern) == ()
    assert b"__CLANG_OFFLOAD_BUNDLE__" not in kern.read_bytes()
    # the gfx90a archive holds the original library's gfx90a code objects, byte for byte
    found = kpack.resolve(
        str(kern.parent), ref, "gfx90a:sramecc+:xnack-", lambda p: Path(p).is_file()
    )
    assert found is not None
    assert Path(found).resolve() == (site / "hipext/.kpack/hipext_gfx90a.kpack").resolve()
    archive = kpack.read_archive(Path(found))
    entries = {e.index: e for e in archive.for_kernel(ref.kernel_name)}
    bundles = elf.offload_bundles(hip_ext_so)
    assert sorted(entries) == list(range(len(bundles)))
    with hip_ext_so.open("rb") as fh:
        for index, b in enumerate(bundles):
            (code,) = [
                c for e, c in code_objects(fh, b, "_kern.so") if e.bundle_id.endswith("gfx90a")
            ]
            assert kpack.read_code_object(Path(found), archive, entries[index]) == code
    # installed with the tree out of reach, the host library still loads (no GPU: 100)
    shutil.rmtree(split_tree)
    python = make_venv(tmp_path / "venv")
    for wheel in (host, *devices.values()):
        pip_install(python, wheel)
    proc = subprocess.run(
        [str(python), "-c", RAND_CHECK], capture_output=True, text=True, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["status"] == 100


def test_doctor_reports_the_split_tree_and_proves_patchelf(
    run_cli, split_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(["--json", "doctor", "--rocm", str(split_tree), "--arch", "gfx90a"], cwd=tmp_path)
    kp = json.loads(res.stdout)["rocm"]["kpack"]
    assert kp["split"] is True
    assert kp["archives"] == 7
    older = ["gfx1030", "gfx803", "gfx900:xnack-", "gfx906:xnack-", "gfx908:xnack-"]
    assert kp["targets"] == sorted([*older, "gfx90a:xnack+", "gfx90a:xnack-"])
    assert kp["loader"] is None  # Debian's runtime has no librocm_kpack
    assert kp["patchelf"]["ok"] is True, kp["patchelf"]
    text = run_cli(["doctor", "--rocm", str(split_tree), "--arch", "gfx90a"], cwd=tmp_path)
    assert "its runtime cannot load kpack" in text.stdout
    assert "patchelf edits librocrand.so.1.1 safely" in text.stdout


def _split_input_wheel(
    tmp_path: Path, kpack_reference: Path, hip_ext_so: Path, archives: tuple[str, ...]
) -> Path:
    """A wheel already kpack-split, as TheRock's host and device wheels lay theirs out: its
    own library kpack-split (ROCm's tool made it) and ``archives`` beside it."""
    files: dict[str, bytes | Path] = {
        "hipext/__init__.py": INIT.encode(),
        "hipext/_kern.so": hip_ext_so,
        "hipext/lib/librocrand.so.1": kpack_reference / "lib" / RAND,
    }
    for name in archives:
        files[f"hipext/.kpack/{name}"] = kpack_reference / ".kpack" / name
    folder = tmp_path / ("dist-" + str(len(archives)))
    return make_wheel(folder, "hipext", "1.0.0", files)


def test_an_input_wheel_already_split_needs_its_archives(
    run_cli, rocm_tree: Path, kpack_reference: Path, hip_ext_so: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    host_only = _split_input_wheel(tmp_path, kpack_reference, hip_ext_so, ())
    out = tmp_path / "out"
    res = run_bundle(run_cli, host_only, rocm_tree, out, "--arch", "gfx90a")
    assert res.returncode == 10, res.stderr
    assert "hipext/lib/librocrand.so.1 in hipext-1.0.0" in res.stderr
    assert "carries none of its kpack archives" in res.stderr
    seen = run_cli(["inspect", str(host_only), "--require-arch", "gfx90a"], cwd=tmp_path)
    assert seen.returncode == 11, seen.stdout  # never counted as covered without them

    with_archives = _split_input_wheel(tmp_path, kpack_reference, hip_ext_so, GFX90A)
    ok = run_bundle(run_cli, with_archives, rocm_tree, out, "--arch", "gfx90a", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)[0]["plan"]["device_gaps"] == []
    seen = run_cli(["inspect", str(with_archives), "--require-arch", "gfx90a"], cwd=tmp_path)
    assert seen.returncode == 0, seen.stdout
    # bundle and inspect agree on a target the archives do not serve
    gap = run_bundle(run_cli, with_archives, rocm_tree, tmp_path / "o2", "--arch", "gfx1030")
    assert gap.returncode == 11, gap.stderr
    assert "librocrand.so.1 has no kpack archive in the wheel serving gfx1030" in gap.stderr
    seen = run_cli(["inspect", str(with_archives), "--require-arch", "gfx1030"], cwd=tmp_path)
    assert seen.returncode == 11, seen.stdout


@pytest.mark.parametrize("attack", ["crafted", "wrong-type", "fifo", "symlink"])
def test_a_hostile_archive_in_the_tree_stops_the_bundle_in_one_line(
    run_cli, rand_wheel: Path, split_tree: Path, tmp_path: Path, attack: str
) -> None:  # type: ignore[no-untyped-def]
    """An archive the marker names that is damaged, a folder, a FIFO (never waited on) or a
    link out of the tree: exit 10 (15 for the link, as for any file leading out of the
    tree), one line naming it, no wheel written, nothing elsewhere touched."""
    archive = split_tree / ".kpack" / GFX90A[1]
    archive.unlink()
    planted = hostile.plant(archive, attack, elsewhere=tmp_path / "elsewhere", folder=False)
    out = tmp_path / "out"
    res = run_bundle(run_cli, rand_wheel, split_tree, out, "--arch", "gfx90a")
    assert res.returncode in (10, 15), res.stderr
    assert "Traceback" not in res.stderr
    assert "rand_lib_gfx90a:xnack-.kpack" in res.stderr
    assert not out.exists() or not list(out.glob("*.whl"))
    planted.assert_untouched()


def test_a_library_whose_archive_lists_other_code_objects_is_refused(
    run_cli, rand_wheel: Path, split_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The archive's table of contents names a second code object the library has no wrapper
    for (it has one): the two disagree, exit 10 naming the archive."""
    import msgpack  # type: ignore[import-untyped]

    archive = split_tree / ".kpack" / GFX90A[1]
    data = archive.read_bytes()
    toc_at = int.from_bytes(data[8:16], "little")
    toc = msgpack.unpackb(data[toc_at:])
    (key,) = toc["toc"]
    toc["toc"][key.replace("#0", "#1")] = toc["toc"][key]
    archive.unlink()
    archive.write_bytes(data[:toc_at] + msgpack.packb(toc))
    res = run_bundle(run_cli, rand_wheel, split_tree, tmp_path / "out", "--arch", "gfx90a")
    assert res.returncode == 10, res.stderr
    assert "rand_lib_gfx90a:xnack-.kpack" in res.stderr
    assert "code objects [0, 1] for 1 wrappers" in res.stderr


def test_the_dry_run_names_the_archives(
    run_cli, rand_wheel: Path, split_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    res = run_bundle(run_cli, rand_wheel, split_tree, out, "--arch", "gfx90a", "--dry-run")
    assert res.returncode == 0, res.stderr
    assert "kpack archives: 2 (" in res.stdout
    assert "hipext/.kpack/rand_lib_gfx90a:xnack-.kpack: gfx90a:xnack-," in res.stdout
    assert not out.exists() or not list(out.glob("*.whl"))


def test_inspect_takes_several_wheels(
    run_cli, rand_wheel: Path, split_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """``inspect wheels/*.whl`` (the README's own example): each wheel reported, --json a list,
    the exit code the first failing check's."""
    out = tmp_path / "out"
    assert run_bundle(run_cli, rand_wheel, split_tree, out, "--arch", "gfx90a").returncode == 0
    (fat,) = out.glob("*.whl")
    both = [str(rand_wheel), str(fat)]
    res = run_cli(["inspect", *both], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("platform tag satisfied") == 2
    data = json.loads(run_cli(["--json", "inspect", *both], cwd=tmp_path).stdout)
    assert [d["wheel"] for d in data] == [rand_wheel.name, fat.name]
    gap = run_cli(["inspect", *both, "--require-arch", "gfx940"], cwd=tmp_path)
    assert gap.returncode == 11, gap.stderr
