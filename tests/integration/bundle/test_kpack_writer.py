"""tests/support/kpackwriter.py against the real thing: a library split by ROCm's own kpack tool
(``../shared/kpack-reference`` beside the checkout: Debian's librocrand 5.3.3, as TheRock stages
``rand_lib``). The writer reproduces it byte for byte from the same Debian file; the split test
tree (``kpack_tree``, whose librocrand went through patchelf first) has its structure, archives
that give back every original code object, and a host library the tree's HIP runtime loads."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from rocm_build.binary import elf
from tests.conftest import KPACK_REFERENCE, NO_KPACK_REFERENCE, _test_cache
from tests.support import hiplib, kpackwriter
from tests.support.kpackread import Elf, archives, check_archived, mapping_problems

REFERENCE = KPACK_REFERENCE
LIB = "librocrand.so.1.1"
PREFIX = "math-libs/rocRAND/stage"
TARGETS = {
    "gfx803", "gfx900:xnack-", "gfx906:xnack-", "gfx908:xnack-", "gfx90a:xnack+",
    "gfx90a:xnack-", "gfx1030",
}  # fmt: skip

needs_reference = pytest.mark.skipif(
    NO_KPACK_REFERENCE, reason=f"no kpack reference at {REFERENCE}"
)


# -- reading helpers ------------------------------------------------------------------------


def shape(value: Any) -> Any:
    """A TOC's keys and value types, the values left out (key order kept)."""
    if isinstance(value, dict):
        return [(k, shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return ["list", *(shape(v) for v in value[:1])]
    return type(value).__name__


def toc_shape(toc: dict[str, Any]) -> Any:
    """``shape`` with the per-library keys and per-target keys made generic."""
    entry = next(iter(next(iter(toc["toc"].values())).values()))
    return shape({**toc, "toc": {"<kernel>": {"<target>": entry}}})


def debian_librocrand(dest: Path) -> Path:
    """The untouched ``librocrand.so.1.1`` of the Debian package the test tree came from (the
    tree's own copy went through patchelf)."""
    (deb,) = sorted((_test_cache() / "debs").glob("librocrand1_*.deb"))
    data = deb.read_bytes()
    assert data.startswith(b"!<arch>\n")
    pos = 8
    while pos < len(data):
        name = data[pos : pos + 16].decode().strip().rstrip("/")
        size = int(data[pos + 48 : pos + 58])
        if name.startswith("data.tar"):
            member = data[pos + 60 : pos + 60 + size]
            with tarfile.open(fileobj=io.BytesIO(member)) as tar:
                for info in tar.getmembers():
                    if info.isfile() and info.name.endswith(f"/{LIB}"):
                        extracted = tar.extractfile(info)
                        assert extracted is not None
                        dest.write_bytes(extracted.read())
                        return dest
        pos += 60 + size + size % 2
    raise AssertionError(f"no {LIB} in {deb}")


# -- the writer against the reference --------------------------------------------------------


@needs_reference
def test_writer_reproduces_the_reference_byte_for_byte(rocm_tree: Path, tmp_path: Path) -> None:
    """From the same Debian file, the writer's host library and archives are the reference's,
    byte for byte."""
    src = debian_librocrand(tmp_path / LIB)
    out = tmp_path / "split"
    result = kpackwriter.split_library(src, out, group="rand_lib", source_prefix=PREFIX)
    assert result.kernel_name == f"{PREFIX}/lib/{LIB}"
    assert result.archive_names == {f"rand_lib_{t}.kpack" for t in TARGETS}
    assert (out / "lib" / LIB).read_bytes() == (REFERENCE / "lib" / LIB).read_bytes()
    names = sorted(p.name for p in (REFERENCE / ".kpack").iterdir())
    assert sorted(p.name for p in (out / ".kpack").iterdir()) == names
    for name in names:
        assert (out / ".kpack" / name).read_bytes() == (REFERENCE / ".kpack" / name).read_bytes()


@needs_reference
def test_split_tree_library_has_the_reference_structure(kpack_tree: Path) -> None:
    ours, ref = Elf(kpack_tree / "lib" / LIB), Elf(REFERENCE / "lib" / LIB)
    kinds = {n: (h["sh_type"], h["sh_flags"]) for n, (h, _) in ref.sections.items()}
    assert {n: (h["sh_type"], h["sh_flags"]) for n, (h, _) in ours.sections.items()} == kinds
    assert kinds[".hip_fatbin"][0] == "SHT_NOBITS"
    assert kinds[".rocm_kpack_ref"] == ("SHT_PROGBITS", 2)  # SHF_ALLOC
    for lib in (ours, ref):
        marker_at = lib.sections[".rocm_kpack_ref"][0]["sh_addr"]
        own = [s for s in lib.loads() if s["p_vaddr"] == marker_at]
        assert len(own) == 1
        assert own[0]["p_memsz"] == lib.sections[".rocm_kpack_ref"][0]["sh_size"]
        fat = lib.sections[".hip_fatbin"][0]
        assert [s["p_filesz"] for s in lib.loads() if s["p_vaddr"] == fat["sh_addr"]] == [0]
        wrappers = lib.wrappers()
        assert [(w[0], w[2], w[3], w[4]) for w in wrappers] == [
            (kpackwriter.HIPK, 0, i, marker_at) for i in range(len(wrappers))
        ]
    assert len(ours.wrappers()) == len(ref.wrappers()) == 1
    assert list(ours.marker()) == list(ref.marker()) == ["kpack_search_paths", "kernel_name"]
    assert ours.marker() == ref.marker()
    assert json.loads((kpack_tree / kpackwriter.MANIFEST).read_text())["flags"] == {
        "KPACK_SPLIT_ARTIFACTS": True
    }
    assert (kpack_tree / "lib" / "librocrand.so.1").readlink() == Path(LIB)

    ours_a, ref_a = archives(kpack_tree), archives(REFERENCE)
    assert list(ours_a) == list(ref_a) == sorted(f"rand_lib_{t}.kpack" for t in TARGETS)
    for name, (toc, _code) in ours_a.items():
        assert toc_shape(toc) == toc_shape(ref_a[name][0])
        assert toc == ref_a[name][0]  # same kernel names, ordinals, sizes, metadata


def test_code_objects_are_the_original_bundle_entries(kpack_tree: Path, rocm_tree: Path) -> None:
    src = rocm_tree / "lib" / LIB
    data = src.read_bytes()
    bundles = elf.offload_bundles(src)
    found = archives(kpack_tree)
    seen = 0
    for index, bundle in enumerate(bundles):
        for entry in bundle.entries:
            target = elf.target_id_of_bundle_id(entry.bundle_id)
            if target is None:
                continue
            toc, code = found[f"rand_lib_{target}.kpack"]
            item = toc["toc"][f"{PREFIX}/lib/{LIB}#{index}"][target]
            start = bundle.file_offset + entry.offset
            assert code(item["ordinal"]) == data[start : start + entry.size], entry.bundle_id
            assert item["original_size"] == entry.size
            assert item["metadata"] == {"target": entry.bundle_id, "source_prefix": PREFIX}
            seen += 1
    assert seen == len(TARGETS) == sum(len(t["toc"]) for t, _ in found.values())


LOAD = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
version = ctypes.c_int()
status = lib.rocrand_get_version(ctypes.byref(version))
generator = ctypes.c_void_p()
create = lib.rocrand_create_generator(ctypes.byref(generator), 400)
print(json.dumps([status, version.value, create]))
"""


def test_split_library_loads_with_the_trees_hip_runtime(kpack_tree: Path, rocm_tree: Path) -> None:
    """The split library loads from the tree (its RUNPATH finds the tree's HIP runtime beside
    it), resolves its symbols and answers as the unsplit one does (no GPU here)."""
    answers = []
    for tree in (kpack_tree, rocm_tree):
        res = subprocess.run(
            [sys.executable, "-c", LOAD, str(tree / "lib" / "librocrand.so.1")],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        answers.append(json.loads(res.stdout.splitlines()[-1]))
    assert answers[0] == answers[1]
    assert answers[0][:2] == [0, 201009]


@pytest.mark.parametrize("which", ["kpack_tree", "reference"])
def test_mapping_is_one_glibc_accepts(which: str, request: pytest.FixtureRequest) -> None:
    if which == "reference":
        if NO_KPACK_REFERENCE:
            pytest.skip(f"no kpack reference at {REFERENCE}")
        lib = Elf(REFERENCE / "lib" / LIB)
    else:
        lib = Elf(request.getfixturevalue("kpack_tree") / "lib" / LIB)
    assert mapping_problems(lib) == []
    # every section with file bytes lies inside the file
    for name, (head, data) in lib.sections.items():
        assert len(data) == (
            0 if head["sh_type"] in ("SHT_NOBITS", "SHT_NULL") else head["sh_size"]
        ), name


# -- the writer's own promises ------------------------------------------------------------------


def test_one_archive_per_target_for_a_groups_libraries_uncompressed(
    rocm_tree: Path, tmp_path: Path
) -> None:
    """Two libraries of one group share each target's archive (ordinals 0 and 1); scheme
    ``none`` stores the code objects as they are; a deeper folder's marker climbs further."""
    src = rocm_tree / "lib" / LIB
    writer = kpackwriter.KpackWriter(tmp_path, scheme="none")
    first = writer.add_library(src, group="rand_lib", source_prefix=PREFIX)
    second = writer.add_library(src, rel_lib="lib/again", group="rand_lib", source_prefix=PREFIX)
    writer.finish()
    assert second.marker["kpack_search_paths"] == ["../../.kpack/rand_lib_@GFXARCH@.kpack"]
    data = src.read_bytes()
    (bundle,) = elf.offload_bundles(src)
    entries = {elf.target_id_of_bundle_id(e.bundle_id): e for e in bundle.entries}
    for name, (toc, code) in archives(tmp_path).items():
        assert toc["compression_scheme"] == "none"
        target = toc["gfx_arch_family"]
        assert name == f"rand_lib_{target}.kpack"
        assert toc["gfx_arches"] == [target]
        keys = [f"{r.kernel_name}#0" for r in (first, second)]
        assert list(toc["toc"]) == keys
        entry = entries[target]
        original = data[bundle.file_offset + entry.offset :][: entry.size]
        for ordinal, key in enumerate(keys):
            assert toc["toc"][key][target]["ordinal"] == ordinal
            assert code(ordinal) == original
    with pytest.raises(ValueError, match="has written its archives"):
        writer.add_library(src, group="rand_lib", source_prefix=PREFIX)


def test_refuses_what_it_cannot_split(rocm_tree: Path, tmp_path: Path) -> None:
    def split(src: Path) -> None:
        kpackwriter.split_library(src, tmp_path / "out", group="g", source_prefix="p")

    elf32 = tmp_path / "elf32.so"
    elf32.write_bytes(b"\x7fELF\x01\x01\x01" + bytes(57))
    with pytest.raises(ValueError, match="64-bit"):
        split(elf32)
    with pytest.raises(ValueError, match=r"no \.hip_fatbin"):
        split(rocm_tree / "lib" / "libhiprand.so.1.1")

    # a second wrapper with no bundle of its own: .hipFatBinSegment made 48 bytes long
    lib = Elf(rocm_tree / "lib" / LIB)
    names = list(lib.sections)
    index = names.index(".hipFatBinSegment")
    data = bytearray((rocm_tree / "lib" / LIB).read_bytes())
    size_at = lib.header["e_shoff"] + index * lib.header["e_shentsize"] + 32
    struct.pack_into("<Q", data, size_at, 48)
    odd = tmp_path / "odd" / LIB
    odd.parent.mkdir()
    odd.write_bytes(data)
    with pytest.raises(ValueError, match="2 wrappers for 1 offload bundles"):
        split(odd)
    assert not (tmp_path / "out" / ".kpack").exists()


# -- a library of two translation units, linked by lld ------------------------------------------

TWO = {
    "a.hip": "#include <hip/hip_runtime.h>\n"
    "__global__ void scale(float *x, float a) { x[threadIdx.x] *= a; }\n"
    'extern "C" int device_count_status(int *n) { return (int)hipGetDeviceCount(n); }\n',
    "b.hip": "#include <hip/hip_runtime.h>\n"
    "__global__ void shift(float *x, float a) { x[threadIdx.x] += a; }\n"
    'extern "C" int other(void) { return 7; }\n',
}

CALL = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
n = ctypes.c_int(-1)
print(json.dumps([lib.device_count_status(ctypes.byref(n)), n.value, lib.other()]))
"""


@pytest.fixture(scope="module")
def two_units(rocm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two offload bundles and two wrappers; lld puts a PT_PHDR first and .hip_fatbin in the
    PT_LOAD that maps the headers, with no room to grow the program header table in place."""
    work = tmp_path_factory.mktemp("two")
    for name, text in TWO.items():
        (work / name).write_text(text)
    out = work / "libtwo.so"
    cmd = [
        str(rocm_tree / "lib/llvm/bin/clang++"), "-x", "hip", "--offload-arch=gfx90a",
        "--offload-arch=gfx1030", "-fPIC", "-shared", "-O1", "-fuse-ld=lld",
        f"--rocm-path={rocm_tree}", f"-L{rocm_tree}/lib", "-lamdhip64",
        *(str(work / n) for n in TWO), "-o", str(out),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, env={"PATH": "/usr/bin:/bin", "HIP_PLATFORM": "amd"})
    return out


def call(lib: Path, tree: Path) -> list[int]:
    res = subprocess.run(
        [sys.executable, "-c", CALL, str(lib)],
        env={"LD_LIBRARY_PATH": str(tree / "lib"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    answer: list[int] = json.loads(res.stdout.splitlines()[-1])
    return answer


@pytest.mark.slow
def test_two_bundles_two_wrappers_and_a_pt_phdr(
    two_units: Path, rocm_tree: Path, tmp_path: Path
) -> None:
    before = Elf(two_units)
    assert before.segments[0]["p_type"] == "PT_PHDR"
    bundles = elf.offload_bundles(two_units)
    assert len(bundles) == len(before.wrappers()) == 2
    result = kpackwriter.split_library(two_units, tmp_path, group="g", source_prefix="p")
    lib = Elf(result.library)
    assert mapping_problems(lib) == []
    (phdr,) = [s for s in lib.segments if s["p_type"] == "PT_PHDR"]
    assert phdr["p_offset"] == lib.header["e_phoff"] != before.header["e_phoff"]
    assert [(w[0], w[3], w[4]) for w in lib.wrappers()] == [
        (kpackwriter.HIPK, 0, result.marker_vaddr),
        (kpackwriter.HIPK, 1, result.marker_vaddr),
    ]
    data = two_units.read_bytes()
    found = archives(tmp_path)
    assert sorted(found) == ["g_gfx1030.kpack", "g_gfx90a.kpack"]
    for index, bundle in enumerate(bundles):
        for entry in bundle.entries:
            target = elf.target_id_of_bundle_id(entry.bundle_id)
            if target is None:
                continue
            toc, code = found[f"g_{target}.kpack"]
            item = toc["toc"][f"p/lib/libtwo.so#{index}"][target]
            assert item["ordinal"] == index
            start = bundle.file_offset + entry.offset
            assert code(index) == data[start : start + entry.size]
    assert call(result.library, rocm_tree) == call(two_units, rocm_tree) == [100, 0, 7]


# -- compressed bundles (clang 19 --offload-compress) ------------------------------------------

#: The bare kernel (tests/support/hiplib.py) and a host function to call in each unit.
BARE = hiplib.BARE + 'extern "C" int answer{n}(void) {{ return 40 + {n}; }}\n'
PACKED_TARGETS = ("gfx90a:xnack-", "gfx942", "gfx1100")

ANSWER = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
print(json.dumps([lib.answer1(), lib.answer2(), lib.answer3()]))
"""


@pytest.fixture(scope="module")
def packed(rocm_tree: Path, clang19_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three translation units, each a compressed (CCOB, zstd) bundle in one .hip_fatbin."""
    work = tmp_path_factory.mktemp("packed")
    flags = ["-nogpulib", "-nogpuinc", "--offload-compress", "-O1"]
    return hiplib.bare_hip_library(
        clang19_bin / "clang++",
        rocm_tree,
        work / "libpacked.so",
        PACKED_TARGETS,
        flags,
        source=BARE,
    )


@pytest.mark.slow
@pytest.mark.parametrize("scheme", kpackwriter.SCHEMES)
def test_compressed_bundles_are_archived_decompressed(
    packed: Path, rocm_tree: Path, tmp_path: Path, scheme: str
) -> None:
    """A library whose bundles are compressed: each archived code object is the decompressed
    entry (what ROCm's tool stores), and the host library still loads and runs its host code."""
    bundles = elf.offload_bundles(packed)
    assert len(bundles) == 3
    assert all(b.compressed and b.ccob is not None and b.ccob.method == 1 for b in bundles)
    result = kpackwriter.split_library(
        packed, tmp_path, group="g", source_prefix="p", scheme=scheme
    )
    assert result.archive_names == {f"g_{t}.kpack" for t in PACKED_TARGETS}
    assert check_archived(packed, tmp_path, result.kernel_name, "g") == 3 * len(PACKED_TARGETS)
    lib = Elf(result.library)
    assert mapping_problems(lib) == []
    assert [(w[0], w[3]) for w in lib.wrappers()] == [(kpackwriter.HIPK, i) for i in range(3)]
    assert not elf.offload_bundles(result.library)  # .hip_fatbin is NOBITS now
    answers = []
    for path in (packed, result.library):
        res = subprocess.run(
            [sys.executable, "-c", ANSWER, str(path)],
            env={"LD_LIBRARY_PATH": str(rocm_tree / "lib"), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert res.returncode == 0, res.stderr
        answers.append(json.loads(res.stdout.splitlines()[-1]))
    assert answers == [[41, 42, 43]] * 2
