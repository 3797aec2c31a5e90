"""kpack: the reference library split by ROCm's own tools, read exactly; crafted damage refused."""

from __future__ import annotations

import io
import shutil
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
import zstandard

from rocm_build.binary import kpack, kpackfile
from rocm_build.binary.kpack import KpackFormatError, KpackRef, Wrapper
from tests.conftest import KPACK_REFERENCE, NO_KPACK_REFERENCE

# CI lays shared/ beside the clone.
REFERENCE = KPACK_REFERENCE
LIBRARY = REFERENCE / "lib" / "librocrand.so.1.1"
KERNEL = "math-libs/rocRAND/stage/lib/librocrand.so.1.1"
TARGETS = (
    "gfx1030",
    "gfx803",
    "gfx900:xnack-",
    "gfx906:xnack-",
    "gfx908:xnack-",
    "gfx90a:xnack+",
    "gfx90a:xnack-",
)
ORIGINAL_SIZES = {
    "gfx1030": 1642416,
    "gfx803": 1812792,
    "gfx900:xnack-": 1804920,
    "gfx906:xnack-": 1803176,
    "gfx908:xnack-": 1804200,
    "gfx90a:xnack+": 1716600,
    "gfx90a:xnack-": 1716776,
}
MARKER_ADDRESS = 0x1835000
MARKER_OFFSET = 0xC77000
MARKER_SIZE = 116
WRAPPER_OFFSET = 0xC75C60
EM_AMDGPU = 224

pytestmark = pytest.mark.skipif(
    NO_KPACK_REFERENCE, reason=f"needs the kpack reference data at {REFERENCE}"
)


def archive_path(target: str) -> Path:
    return REFERENCE / ".kpack" / f"rand_lib_{target}.kpack"


class Bytes(io.BytesIO):
    """A :class:`~rocm_build.binary.elf.ByteView` over bytes (a wheel member read in place)."""

    def __init__(self, data: bytes, name: str) -> None:
        super().__init__(data)
        self.name = name
        self._data = data

    def __len__(self) -> int:
        return len(self._data)

    def __getitem__(self, key: slice) -> bytes:
        return self._data[key]

    def find(self, sub: bytes, start: int = 0, end: int | None = None) -> int:
        return self._data.find(sub, start, len(self._data) if end is None else end)


# --- the reference, read exactly -------------------------------------------------------------


def test_marker_of_the_reference() -> None:
    assert kpack.read_ref(LIBRARY) == KpackRef(
        kernel_name=KERNEL,
        search_paths=("../.kpack/rand_lib_@GFXARCH@.kpack",),
        manifest=None,
    )
    assert kpack.marker_address(LIBRARY) == (MARKER_ADDRESS, MARKER_SIZE)


def test_the_one_wrapper_is_hipk_and_points_at_the_marker() -> None:
    # The stored pointer is 0: the address is the R_X86_64_RELATIVE relocation's addend.
    stored = LIBRARY.read_bytes()[WRAPPER_OFFSET : WRAPPER_OFFSET + 24]
    assert stored[:4] == b"HIPK"
    assert stored[8:16] == bytes(8)
    assert kpack.wrappers(LIBRARY) == (Wrapper(WRAPPER_OFFSET, "HIPK", 0, MARKER_ADDRESS),)


def test_a_library_read_in_place_reads_the_same() -> None:
    view = Bytes(LIBRARY.read_bytes(), "torch/lib/librocrand.so.1.1")
    assert kpack.read_ref(view) == kpack.read_ref(LIBRARY)
    assert kpack.wrappers(view) == kpack.wrappers(LIBRARY)
    assert kpack.marker_address(view) == (MARKER_ADDRESS, MARKER_SIZE)


def test_a_library_that_is_not_split_has_no_marker_and_hipf_or_no_wrappers(
    tmp_path: Path,
) -> None:
    lib = tmp_path / "lib.so"
    data = bytearray(LIBRARY.read_bytes())
    data[WRAPPER_OFFSET : WRAPPER_OFFSET + 4] = b"FPIH"  # HIPF, little-endian
    lib.write_bytes(bytes(data))
    assert [w.magic for w in kpack.wrappers(lib)] == ["HIPF"]
    with pytest.raises(KpackFormatError, match="not HIPK"):
        kpack.check_consistent(
            kpack.read_ref(lib) or pytest.fail("marker"),
            kpack.wrappers(lib),
            kpack.read_archive(archive_path("gfx803")),
        )


def test_the_tree_and_its_seven_archives() -> None:
    assert kpack.is_split_tree(REFERENCE)
    found = kpack.tree_archives(REFERENCE)
    assert found == tuple(sorted(archive_path(t) for t in TARGETS))
    for target in TARGETS:
        archive = kpack.read_archive(archive_path(target))
        assert (archive.version, archive.group_name, archive.compression_scheme) == (
            1,
            "rand_lib",
            "zstd-per-kernel",
        )
        assert archive.gfx_arch_family == target
        assert archive.gfx_arches == (target,)
        assert archive.zstd_offset == 64
        assert archive.zstd_offset + archive.zstd_size <= archive.toc_offset < archive.size
        assert archive.size == archive_path(target).stat().st_size
        assert archive.kernel_names == frozenset({KERNEL})
        (entry,) = archive.for_kernel(KERNEL)
        assert (entry.key, entry.index, entry.target, entry.type, entry.ordinal) == (
            f"{KERNEL}#0",
            0,
            target,
            "hsaco",
            0,
        )
        assert entry.original_size == ORIGINAL_SIZES[target]
        assert entry.metadata == {
            "target": f"hipv4-amdgcn-amd-amdhsa--{target}",
            "source_prefix": "math-libs/rocRAND/stage",
        }
        assert archive.for_kernel("librocrand.so") == ()


@pytest.mark.parametrize("target", TARGETS)
def test_each_code_object_inflates_to_an_amdgpu_elf(target: str) -> None:
    path = archive_path(target)
    archive = kpack.read_archive(path)
    (entry,) = archive.entries
    code = kpack.read_code_object(path, archive, entry)
    assert len(code) == ORIGINAL_SIZES[target]
    assert code[:4] == b"\x7fELF"
    assert struct.unpack_from("<H", code, 18)[0] == EM_AMDGPU
    kpack.check_consistent(
        kpack.read_ref(LIBRARY) or pytest.fail("marker"),
        kpack.wrappers(LIBRARY),
        archive,
        kpack.marker_address(LIBRARY),
    )


@pytest.mark.parametrize(
    ("target", "archive"),
    [
        ("gfx90a:sramecc+:xnack-", "gfx90a:xnack-"),
        ("gfx90a:xnack+", "gfx90a:xnack+"),
        ("gfx90a:xnack-", "gfx90a:xnack-"),
        ("gfx1030", "gfx1030"),
        ("gfx906:sramecc-:xnack-", "gfx906:xnack-"),
        ("gfx942", None),
        ("gfx942:sramecc+:xnack-", None),
        ("gfx1100", None),
    ],
)
def test_resolution_as_the_loader_does(target: str, archive: str | None) -> None:
    ref = kpack.read_ref(LIBRARY) or pytest.fail("marker")
    found = kpack.resolve("lib", ref, target, lambda p: (REFERENCE / p).is_file())
    assert found == (None if archive is None else f".kpack/rand_lib_{archive}.kpack")
    # serves agrees with the loader's choice, and only there
    for name in TARGETS:
        holds = kpack.serves(kpack.read_archive(archive_path(name)), ref, 1, target)
        assert holds == (name == archive), name


def test_gfx90a_without_features_is_served_by_both_xnack_archives_but_named_by_neither() -> None:
    ref = kpack.read_ref(LIBRARY) or pytest.fail("marker")
    assert kpack.resolve("lib", ref, "gfx90a", lambda p: (REFERENCE / p).is_file()) is None
    for name in ("gfx90a:xnack+", "gfx90a:xnack-"):
        assert kpack.serves(kpack.read_archive(archive_path(name)), ref, 1, "gfx90a")
    assert not kpack.serves(kpack.read_archive(archive_path("gfx90a:xnack-")), ref, 2, "gfx90a")


@pytest.mark.parametrize(
    ("target", "names"),
    [
        (
            "gfx90a:sramecc+:xnack-",
            ("gfx90a:sramecc+:xnack-", "gfx90a:sramecc+", "gfx90a:xnack-", "gfx90a"),
        ),
        (
            "gfx942:sramecc+:xnack+",
            (
                "gfx942:sramecc+:xnack+",
                "gfx942:sramecc+",
                "gfx942:xnack+",
                "gfx942",
                "gfx9-4-generic:sramecc+:xnack+",
                "gfx9-4-generic:sramecc+",
                "gfx9-4-generic:xnack+",
                "gfx9-4-generic",
            ),
        ),
        ("gfx1100", ("gfx1100", "gfx11-generic")),
        ("gfx1030", ("gfx1030", "gfx10-3-generic")),
        ("gfx90a:xnack+", ("gfx90a:xnack+", "gfx90a")),
        ("gfx803", ("gfx803",)),
        ("gfx9-4-generic", ("gfx9-4-generic",)),
    ],
)
def test_lookup_names_in_the_loaders_order(target: str, names: tuple[str, ...]) -> None:
    assert kpack.lookup_names(target) == names


def test_candidates_are_arch_first_then_direct_paths_and_skip_a_manifest() -> None:
    ref = KpackRef(
        "lib/libx.so",
        ("a/x_@GFXARCH@.kpack", "direct.kpack", "b/y_@GFXARCH@.kpack", "../.kpack/x.kpm"),
        "../.kpack/x.kpm",
    )
    assert kpack.candidates(ref, "gfx90a:xnack-") == (
        "a/x_gfx90a:xnack-.kpack",
        "b/y_gfx90a:xnack-.kpack",
        "a/x_gfx90a.kpack",
        "b/y_gfx90a.kpack",
        "direct.kpack",
    )


def test_resolve_normalises_from_the_library_folder() -> None:
    ref = KpackRef("k", ("./../.kpack/./g_@GFXARCH@.kpack",), None)
    seen: list[str] = []
    assert kpack.resolve("pkg/lib", ref, "gfx1030", lambda p: seen.append(p) or False) is None
    assert seen == ["pkg/.kpack/g_gfx1030.kpack", "pkg/.kpack/g_gfx10-3-generic.kpack"]
    assert (
        kpack.resolve("/opt/r/lib", ref, "gfx803", lambda p: True) == "/opt/r/.kpack/g_gfx803.kpack"
    )


# --- damage refused --------------------------------------------------------------------------


def refused(call: Any, *args: Any, where: Path | str, match: str) -> str:
    with pytest.raises(KpackFormatError, match=match) as info:
        call(*args)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(where) in message, message
    return message


@pytest.mark.parametrize(
    "paths",
    [("/opt/rocm/.kpack/x_@GFXARCH@.kpack",), ("../../../.kpack/x_@GFXARCH@.kpack",)],
)
def test_search_paths_that_leave_the_tree_are_refused(paths: tuple[str, ...]) -> None:
    ref = KpackRef("k", paths, None)
    refused(
        kpack.resolve, "lib", ref, "gfx90a", lambda p: True, where="lib", match="relative|climbs"
    )


def write_marker(tmp_path: Path, payload: bytes) -> Path:
    assert len(payload) <= MARKER_SIZE
    data = bytearray(LIBRARY.read_bytes())
    data[MARKER_OFFSET : MARKER_OFFSET + MARKER_SIZE] = payload.ljust(MARKER_SIZE, b"\0")
    lib = tmp_path / "librocrand.so.1.1"
    lib.write_bytes(bytes(data))
    return lib


def test_the_older_manifest_form(tmp_path: Path) -> None:
    marker = {"kernel_name": "rand_lib", "kpack_search_paths": ["../.kpack/rand_lib.kpm"]}
    lib = write_marker(tmp_path, msgpack.packb(marker))
    ref = kpack.read_ref(lib)
    assert ref == KpackRef("rand_lib", ("../.kpack/rand_lib.kpm",), "../.kpack/rand_lib.kpm")
    assert kpack.candidates(ref, "gfx1030") == ()


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (b"\xc1" * 8, "not MessagePack"),
        (b"\x81\xabkernel_name\xda\xff\xff", "truncated"),  # a string longer than the section
        (msgpack.packb(["kernel_name"]), "not a map"),
        (msgpack.packb({"kernel_name": "x"}), "kpack_search_paths"),
        (msgpack.packb({"kpack_search_paths": ["a.kpack"]}), "kernel_name"),
        (msgpack.packb({"kernel_name": "x", "kpack_search_paths": "a.kpack"}), "list"),
        (msgpack.packb({"kernel_name": "x", "kpack_search_paths": ["/abs.kpack"]}), "relative"),
        (b"\x82" + (msgpack.packb("kernel_name") + msgpack.packb("x")) * 2, "duplicate"),
    ],
)
def test_a_bad_marker_is_refused(tmp_path: Path, payload: bytes, match: str) -> None:
    lib = write_marker(tmp_path, payload)
    refused(kpack.read_ref, lib, where=lib, match=match)


def test_a_wrapper_with_an_unknown_magic_is_refused(tmp_path: Path) -> None:
    data = bytearray(LIBRARY.read_bytes())
    data[WRAPPER_OFFSET : WRAPPER_OFFSET + 4] = b"XXXX"
    lib = tmp_path / "lib.so"
    lib.write_bytes(bytes(data))
    refused(kpack.wrappers, lib, where=lib, match="neither HIPF nor HIPK")


def test_wrappers_that_disagree_with_the_toc_are_refused() -> None:
    ref = kpack.read_ref(LIBRARY) or pytest.fail("marker")
    path = archive_path("gfx1030")
    archive = kpack.read_archive(path)
    two = (Wrapper(0, "HIPK", 0, MARKER_ADDRESS), Wrapper(24, "HIPK", 1, MARKER_ADDRESS))
    refused(kpack.check_consistent, ref, two, archive, where=path, match="code objects")
    gap = (Wrapper(0, "HIPK", 1, MARKER_ADDRESS),)
    refused(kpack.check_consistent, ref, gap, archive, where=path, match="not 0..n-1")
    refused(kpack.check_consistent, ref, (), archive, where=path, match="no wrappers")
    other = KpackRef("lib/other.so", ref.search_paths, None)
    one = kpack.wrappers(LIBRARY)
    refused(kpack.check_consistent, other, one, archive, where=path, match="no code object")
    elsewhere = (MARKER_ADDRESS + MARKER_SIZE, 8)
    refused(
        kpack.check_consistent, ref, one, archive, elsewhere, where=path, match="does not point"
    )


# crafted archives: the reference's bytes, mutated


def parts(target: str = "gfx1030") -> tuple[bytearray, dict[str, Any]]:
    data = bytearray(archive_path(target).read_bytes())
    toc_offset = struct.unpack_from("<Q", data, 8)[0]
    return data, msgpack.unpackb(bytes(data[toc_offset:]))


def with_toc(data: bytearray, toc: bytes) -> bytes:
    toc_offset = struct.unpack_from("<Q", data, 8)[0]
    return bytes(data[:toc_offset]) + toc


def craft(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "rand_lib_gfx1030.kpack"
    path.write_bytes(data)
    return path


def edit_toc(**changes: Any) -> bytes:
    data, toc = parts()
    toc.update(changes)
    for key in [k for k, v in changes.items() if v is None]:
        del toc[key]
    return with_toc(data, msgpack.packb(toc))


def edit_entry(**changes: Any) -> bytes:
    data, toc = parts()
    toc["toc"][f"{KERNEL}#0"]["gfx1030"].update(changes)
    return with_toc(data, msgpack.packb(toc))


def duplicate_key() -> bytes:
    data, toc = parts()
    pairs = [*toc.items(), ("group_name", "other")]
    raw = bytes([0x80 | len(pairs)]) + b"".join(
        msgpack.packb(k) + msgpack.packb(v) for k, v in pairs
    )
    return with_toc(data, raw)


def header(magic: bytes = b"KPAK", version: int = 1, toc_offset: int | None = None) -> bytes:
    data, _toc = parts()
    offset = struct.unpack_from("<Q", data, 8)[0] if toc_offset is None else toc_offset
    return struct.pack("<4sIQ", magic, version, offset) + bytes(data[16:])


def frame_size(size: int) -> bytes:
    data, toc = parts()
    struct.pack_into("<I", data, toc["zstd_offset"] + 4, size)
    return bytes(data)


BAD_ARCHIVES = {
    "bad magic": (lambda: header(magic=b"KPAX"), "not a kpack archive"),
    "unknown version": (lambda: header(version=2), "unknown kpack version 2"),
    "toc past the end": (lambda: header(toc_offset=1 << 40), "TOC offset"),
    "toc inside the header": (lambda: header(toc_offset=4), "TOC offset"),
    "empty file": (lambda: b"", "not a kpack archive"),
    "toc not msgpack": (lambda: with_toc(parts()[0], b"\xc1\xc1"), "not MessagePack"),
    "toc truncated": (lambda: with_toc(parts()[0], msgpack.packb(parts()[1])[:-9]), "truncated"),
    "toc not a map": (lambda: with_toc(parts()[0], msgpack.packb([1, 2])), "not a map"),
    "toc int keys": (lambda: with_toc(parts()[0], msgpack.packb({1: 2})), "not MessagePack"),
    "duplicate toc key": (duplicate_key, "duplicate key 'group_name'"),
    "missing group_name": (lambda: edit_toc(group_name=None), "group_name"),
    "arches not a list": (lambda: edit_toc(gfx_arches="gfx1030"), "gfx_arches"),
    "arch not a string": (lambda: edit_toc(gfx_arches=[1030]), "gfx_arches"),
    "format version": (lambda: edit_toc(format_version=2), "format_version 2"),
    "version a bool": (lambda: edit_toc(format_version=True), "format_version"),
    "unknown scheme": (lambda: edit_toc(compression_scheme="lz4"), "compression_scheme"),
    "no zstd_size": (lambda: edit_toc(zstd_size=None), "zstd_offset/zstd_size"),
    "zstd past the toc": (lambda: edit_toc(zstd_size=1 << 30), "zstd region"),
    "zstd in the header": (lambda: edit_toc(zstd_offset=8), "zstd region"),
    "frame size lies": (lambda: frame_size(1 << 31), "runs past the zstd region"),
    "toc entry not a map": (lambda: edit_toc(toc={f"{KERNEL}#0": 3}), "not a map of targets"),
    "ordinal missing": (lambda: edit_entry(ordinal=None), "ordinal"),
    "ordinal negative": (lambda: edit_entry(ordinal=-1), "ordinal"),
    "ordinal past the frames": (lambda: edit_entry(ordinal=1), "ordinal 1 of 1"),
    "size a string": (lambda: edit_entry(original_size="big"), "original_size"),
    "metadata a list": (lambda: edit_entry(metadata=[1]), "metadata"),
    "none without blobs": (lambda: edit_toc(compression_scheme="none"), "blobs"),
}


@pytest.mark.parametrize("case", sorted(BAD_ARCHIVES))
def test_a_bad_archive_is_refused(tmp_path: Path, case: str) -> None:
    make, match = BAD_ARCHIVES[case]
    path = craft(tmp_path, make())
    refused(kpack.read_archive, path, where=path, match=match)


def test_a_toc_over_the_cap_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = craft(tmp_path, archive_path("gfx1030").read_bytes())
    monkeypatch.setattr(kpackfile, "MAX_TOC", 64)
    refused(kpack.read_archive, path, where=path, match="TOC of")


@pytest.mark.parametrize(
    ("size", "match"),
    [(1000, "inflates to more than its original_size 1000"), (2_000_000, "inflates to 1642416")],
)
def test_a_frame_that_inflates_to_another_size_is_refused(
    tmp_path: Path, size: int, match: str
) -> None:
    path = craft(tmp_path, edit_entry(original_size=size))
    archive = kpack.read_archive(path)
    refused(kpack.read_code_object, path, archive, archive.entries[0], where=path, match=match)


def test_a_frame_that_is_not_zstd_is_refused(tmp_path: Path) -> None:
    data, toc = parts()
    start = toc["zstd_offset"] + 8
    data[start : start + 16] = bytes(16)
    path = craft(tmp_path, bytes(data))
    archive = kpack.read_archive(path)
    refused(kpack.read_code_object, path, archive, archive.entries[0], where=path, match="zstd")


def test_an_archive_changed_after_its_toc_was_read_is_refused(tmp_path: Path) -> None:
    path = craft(tmp_path, archive_path("gfx1030").read_bytes())
    archive = kpack.read_archive(path)
    path.write_bytes(path.read_bytes()[:100])
    refused(kpack.read_code_object, path, archive, archive.entries[0], where=path, match="changed")


# the uncompressed scheme


def uncompressed(code: bytes, blob_offset: int = 64, blob_size: int | None = None) -> bytes:
    toc = {
        "format_version": 1,
        "group_name": "rand_lib",
        "gfx_arch_family": "gfx1030",
        "gfx_arches": ["gfx1030"],
        "compression_scheme": "none",
        "blobs": [{"offset": blob_offset, "size": len(code) if blob_size is None else blob_size}],
        "toc": {
            f"{KERNEL}#0": {"gfx1030": {"type": "hsaco", "ordinal": 0, "original_size": len(code)}}
        },
    }
    body = b"\0" * 48 + code
    return struct.pack("<4sIQ", b"KPAK", 1, 16 + len(body)) + body + msgpack.packb(toc)


def reference_code() -> bytes:
    archive = kpack.read_archive(archive_path("gfx1030"))
    return kpack.read_code_object(archive_path("gfx1030"), archive, archive.entries[0])


def test_the_uncompressed_scheme_reads_the_same_code_object(tmp_path: Path) -> None:
    code = reference_code()
    path = craft(tmp_path, uncompressed(code))
    archive = kpack.read_archive(path)
    assert (archive.compression_scheme, archive.zstd_offset, archive.zstd_size) == ("none", 0, 0)
    assert archive.frames == ((64, len(code)),)
    assert archive.entries[0].metadata == {}
    assert kpack.read_code_object(path, archive, archive.entries[0]) == code


@pytest.mark.parametrize(
    ("offset", "size", "match"), [(8, None, "outside"), (64, 1 << 40, "outside")]
)
def test_an_uncompressed_blob_outside_the_data_is_refused(
    tmp_path: Path, offset: int, size: int | None, match: str
) -> None:
    path = craft(tmp_path, uncompressed(b"\x7fELF" * 16, offset, size))
    refused(kpack.read_archive, path, where=path, match=match)


def test_an_uncompressed_blob_whose_size_lies_is_refused(tmp_path: Path) -> None:
    path = craft(tmp_path, uncompressed(b"\x7fELF" * 16, 64, 60))
    archive = kpack.read_archive(path)
    refused(kpack.read_code_object, path, archive, archive.entries[0], where=path, match="60 bytes")


def test_zstd_inflation_is_bounded(tmp_path: Path) -> None:
    # 64 MiB of zeros in a frame that claims 10 bytes: refused once past 10, not after 64 MiB
    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    region = struct.pack("<II", 1, len(bomb)) + bomb
    data, toc = parts()
    toc.update(zstd_offset=64, zstd_size=len(region))
    toc["toc"][f"{KERNEL}#0"]["gfx1030"]["original_size"] = 10
    body = bytes(data[16:64]) + region
    path = craft(
        tmp_path, struct.pack("<4sIQ", b"KPAK", 1, 16 + len(body)) + body + msgpack.packb(toc)
    )
    archive = kpack.read_archive(path)
    tracemalloc.start()
    try:
        entry = archive.entries[0]
        refused(kpack.read_code_object, path, archive, entry, where=path, match="more than")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, peak


# the tree


def test_a_tree_is_split_by_its_manifest_or_its_archives(tmp_path: Path) -> None:
    assert not kpack.is_split_tree(tmp_path)
    manifest = tmp_path / "share" / "therock" / "therock_manifest.json"
    manifest.parent.mkdir(parents=True)
    manifest.write_text('{"flags": {"KPACK_SPLIT_ARTIFACTS": false}}')
    assert not kpack.is_split_tree(tmp_path)
    manifest.write_text("{not json")
    assert not kpack.is_split_tree(tmp_path)
    manifest.write_text('{"flags": {"KPACK_SPLIT_ARTIFACTS": true}}')
    assert kpack.is_split_tree(tmp_path)
    assert kpack.tree_archives(tmp_path) == ()
    other = tmp_path / "other"
    (other / ".kpack").mkdir(parents=True)
    (other / ".kpack" / "notes.txt").write_text("x")
    assert not kpack.is_split_tree(other)
    shutil.copy(archive_path("gfx803"), other / ".kpack" / "g_gfx803.kpack")
    assert kpack.is_split_tree(other)


def test_tree_archives_keep_no_link_that_leaves_the_tree(tmp_path: Path) -> None:
    root = tmp_path / "root"
    folder = root / ".kpack"
    folder.mkdir(parents=True)
    outside = tmp_path / "outside.kpack"
    shutil.copy(archive_path("gfx803"), outside)
    shutil.copy(archive_path("gfx803"), folder / "b_gfx803.kpack")
    (folder / "a_out.kpack").symlink_to(outside)
    (folder / "c_in.kpack").symlink_to(folder / "b_gfx803.kpack")
    (folder / "d_dir.kpack").mkdir()
    (folder / "e_dangling.kpack").symlink_to(tmp_path / "missing")
    assert kpack.tree_archives(root) == (folder / "b_gfx803.kpack", folder / "c_in.kpack")
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".kpack").symlink_to(folder)
    assert kpack.tree_archives(linked) == ()
