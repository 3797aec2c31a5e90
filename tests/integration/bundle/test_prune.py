"""Pruned offload bundles still give the runtime its code: the ROCm tree's comgr (the lookup the
HIP runtime uses) returns for each kept target byte for byte what the unpruned bundle gives, and
nothing for a dropped one; LLVM's clang-offload-bundler lists exactly the kept entries. Real
bundles: ROCm 5.2's rocRAND and a clang 15 library (uncompressed), clang 19 --offload-compress
(CCOB, zstd and zlib, generic and feature targets)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import zstandard

from rocm_build.binary import elf, elfpatch
from rocm_build.bundle import prune
from tests.support.hiplib import bare_hip_library

from .comgr import Comgr

pytestmark = pytest.mark.slow

AMDHSA = "amdgcn-amd-amdhsa--"
HIP = "hipv4-" + AMDHSA

BARE_FLAGS = ["-nogpulib", "-nogpuinc"]  # clang without ROCm's device libraries
PACKED_ARCHS = ["gfx942", "gfx1100", "gfx11-generic", "gfx90a:xnack+", "gfx90a:xnack-",
                "gfx10-3-generic"]  # fmt: skip


@pytest.fixture(scope="module")
def libs(
    rocm_tree: Path, clang19_bin: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("prune")
    clang15 = rocm_tree / "lib/llvm/bin/clang++"
    archs15 = ["gfx90a:xnack+", "gfx90a:xnack-", "gfx1030", "gfx906"]
    v6 = ["--offload-compress", "-mcode-object-version=6"]  # generic targets need v6

    return {
        "rocrand": rocm_tree / "lib/librocrand.so.1.1",
        "plain": bare_hip_library(
            clang15, rocm_tree, base / "plain/libplain.so", archs15, BARE_FLAGS, units=2
        ),
        "zstd": bare_hip_library(
            clang19_bin / "clang++",
            rocm_tree,
            base / "z/libzstd.so",
            PACKED_ARCHS,
            [*BARE_FLAGS, *v6],
            units=2,
        ),
    }


def pruned(src: Path, targets: list[str], out: Path) -> tuple[Path, prune.PrunePlan]:
    plan = prune.plan_prune(src, targets)
    with elfpatch.PatchedFile(src, None, prune.overlays(plan)) as pf, out.open("wb") as fh:
        while block := pf.read(1 << 20):
            fh.write(block)
    return out, plan


def bundle_bytes(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return [data[b.file_offset : b.file_offset + b.size] for b in elf.offload_bundles(path)]


def inner(blob: bytes) -> bytes:
    """The uncompressed bundle a CCOB holds (an uncompressed one as it is)."""
    if not blob.startswith(elf.CCOB_MAGIC):
        return blob
    head = elf.ccob_header(blob, 0)
    payload = blob[head.payload : head.total]
    if head.method == 1:
        return zstandard.ZstdDecompressor().decompress(payload, max_output_size=head.raw_size)
    import zlib

    return zlib.decompress(payload)


def listed(bundler: Path, blob: bytes, tmp: Path) -> set[str]:
    f = tmp / "bundle.bin"
    f.write_bytes(blob)
    out = subprocess.run(
        [str(bundler), "--list", "--type=o", f"--input={f}"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    return set(out.stdout.split())


def check_lookups(
    comgr: Comgr, before: list[bytes], after: list[bytes], cases: dict[str, bool]
) -> None:
    """Per bundle and ISA: the same code object (kept: True) or none (dropped: False)."""
    for old, new in zip(before, after, strict=True):
        found_old = comgr.lookup(inner(old), [AMDHSA + c for c in cases])
        found_new = comgr.lookup(inner(new), [AMDHSA + c for c in cases])
        for case, kept in cases.items():
            isa = AMDHSA + case
            assert found_old[isa], f"{case}: the unpruned bundle has it"
            assert found_new[isa] == (found_old[isa] if kept else b""), case


@pytest.mark.parametrize("name", ["rocrand", "plain"])
def test_uncompressed_keeps_the_code_objects_comgr_picks(
    libs: dict[str, Path], rocm_tree: Path, tmp_path: Path, name: str
) -> None:
    src = libs[name]
    out, plan = pruned(src, ["gfx90a:xnack+"], tmp_path / "pruned.so")
    assert plan.changed
    assert plan.dropped_bytes > plan.kept_bytes > 0
    # the loader's view is the same: size, headers and every byte outside the device code
    assert out.stat().st_size == src.stat().st_size
    old, new = src.read_bytes(), out.read_bytes()
    ranges = [(b.file_offset, b.file_offset + b.size) for b in elf.offload_bundles(src)]
    assert old[: ranges[0][0]] == new[: ranges[0][0]]
    assert old[ranges[-1][1] :] == new[ranges[-1][1] :]
    assert elf.read_elf(out).soname == elf.read_elf(src).soname
    cases = {"gfx90a:xnack+": True, "gfx90a:sramecc+:xnack+": True, "gfx90a:xnack-": False,
             "gfx1030": False, "gfx906:xnack-": False}  # fmt: skip
    check_lookups(Comgr(rocm_tree), bundle_bytes(src), bundle_bytes(out), cases)
    bundler = rocm_tree / "lib/llvm/bin/clang-offload-bundler"
    for blob in bundle_bytes(out):
        ids = listed(bundler, blob, tmp_path)
        assert {i for i in ids if i.startswith(HIP)} == {HIP + "gfx90a:xnack+"}
        assert any(i.startswith("host-") for i in ids)


def test_compressed_generic_and_features(
    libs: dict[str, Path], rocm_tree: Path, clang19_bin: Path, tmp_path: Path
) -> None:
    src = libs["zstd"]
    assert all(b.compressed for b in elf.offload_bundles(src))
    out, plan = pruned(src, ["gfx1100"], tmp_path / "pruned.so")
    assert len(plan.changed) == 2
    assert plan.ids_after == ("gfx11-generic", "gfx1100")
    before, after = bundle_bytes(src), bundle_bytes(out)
    bundler = clang19_bin / "clang-offload-bundler"
    for old, new in zip(before, after, strict=True):
        assert len(new) < len(old)
        assert {i for i in listed(bundler, new, tmp_path) if i.startswith(HIP)} == {
            HIP + "gfx1100",
            HIP + "gfx11-generic",
        }
        for target in ("gfx1100", "gfx11-generic"):  # LLVM's own decompression and unbundling
            assert unbundle(bundler, new, target, tmp_path) == unbundle(
                bundler, old, target, tmp_path
            )
        verbose = unbundle_log(bundler, new, tmp_path)
        assert "Hashes match: Yes" in verbose
    # comgr 2.4 (ROCm 5.2) reads no CCOB and knows no generic processor: it looks up in the
    # bundles LLVM decompresses, for the targets it knows
    check_lookups(Comgr(rocm_tree), before, after, {"gfx1100": True, "gfx942": False,
                                                    "gfx90a:xnack+": False})  # fmt: skip


def unbundle(bundler: Path, blob: bytes, target: str, tmp: Path) -> bytes:
    f, out = tmp / "in.bin", tmp / f"{target}.co"
    f.write_bytes(blob)
    subprocess.run(
        [str(bundler), "--unbundle", "--type=o", f"--input={f}", f"--output={out}",
         f"--targets={HIP}{target}"], check=True,
    )  # fmt: skip
    return out.read_bytes()


def unbundle_log(bundler: Path, blob: bytes, tmp: Path) -> str:
    f, out = tmp / "in.bin", tmp / "x.co"
    f.write_bytes(blob)
    done = subprocess.run(
        [str(bundler), "--unbundle", "--type=o", f"--input={f}", f"--output={out}",
         f"--targets={HIP}gfx1100", "-verbose"], check=True, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout + done.stderr


def test_zlib_v3_and_v1(libs: dict[str, Path], rocm_tree: Path, tmp_path: Path) -> None:
    """clang 19 writes zstd v2; zlib and the v1/v3 layouts are rewrapped from a real bundle."""
    from .helpers import cc_shared, fatbin_source, make_ccob

    raw = inner(bundle_bytes(libs["zstd"])[0])
    comgr = Comgr(rocm_tree)
    for version, method in ((3, "zlib"), (1, "zlib"), (3, "zstd"), (1, "zstd")):
        blob = make_ccob(raw, version=version, method=method)
        lib = cc_shared(tmp_path / f"lib{version}{method}.so", fatbin_source([blob, blob]))
        out, _plan = pruned(lib, ["gfx90a:xnack+"], tmp_path / f"p{version}{method}.so")
        for old, new in zip(bundle_bytes(lib), bundle_bytes(out), strict=True):
            head = elf.ccob_header(new, 0)
            assert (head.version, head.method) == (version, 0 if method == "zlib" else 1)
            got, want = inner(new), inner(old)
            assert elf.ccob_header(new, 0).raw_size == len(got) < len(want)
            assert comgr.lookup(got, [AMDHSA + "gfx90a:xnack+"]) == comgr.lookup(
                want, [AMDHSA + "gfx90a:xnack+"]
            )
            assert comgr.lookup(got, [AMDHSA + "gfx942"]) == {AMDHSA + "gfx942": b""}
        assert [b.targets for b in elf.offload_bundles(out)] == [{"gfx90a"}, {"gfx90a"}]


def test_damaged_bundles_are_refused(libs: dict[str, Path], tmp_path: Path) -> None:
    from .helpers import cc_shared, fatbin_source, make_bundle, make_ccob

    good = make_bundle([("host-x86_64-unknown-linux--", b""), (HIP + "gfx90a", b"x" * 64)])
    # an entry that claims more bytes than the section holds
    bad = bytearray(good)
    offset_field = len(elf.BUNDLE_MAGIC) + 8 + 24 + len("host-x86_64-unknown-linux--")
    struct.pack_into("<Q", bad, offset_field + 8, 1 << 40)
    lib = cc_shared(tmp_path / "libbad.so", fatbin_source([bytes(bad)]))
    with pytest.raises(elf.BundleFormatError, match="outside the bundle"):
        prune.plan_prune(lib, ["gfx90a"])
    # a CCOB whose size field says more than the section has left
    blob = bytearray(make_ccob(good, version=3))
    struct.pack_into("<Q", blob, 8, 1 << 30)
    lib = cc_shared(tmp_path / "libccob.so", fatbin_source([bytes(blob)]))
    with pytest.raises(elf.BundleFormatError, match="size field"):
        prune.plan_prune(lib, ["gfx90a"])
    # its payload damaged: found when it is written again, not silently passed on
    blob = bytearray(make_ccob(good, version=3))
    blob[40:48] = b"\xff" * 8
    lib = cc_shared(tmp_path / "libpayload.so", fatbin_source([bytes(blob)]))
    with pytest.raises(elf.BundleFormatError):
        pruned(lib, ["gfx942"], tmp_path / "never.so")
    assert shutil.which("gcc")


@pytest.mark.parametrize("block", [1 << 20, 4096, 777])
def test_stream_is_the_overlays_applied(libs: dict[str, Path], block: int) -> None:
    """The streamed file is the original with each overlay written over it, whatever the read
    size (dropped code is not read from disk at all: those reads must still give zeros)."""
    src = libs["rocrand"]
    found = prune.overlays(prune.plan_prune(src, ["gfx90a:xnack+"]))
    with elfpatch.PatchedFile(src, None, found) as pf:
        streamed = b"".join(iter(lambda: pf.read(block), b""))
    want = bytearray(src.read_bytes())
    for o in found:
        want[o.offset : o.offset + o.length] = o.data + bytes(o.length - len(o.data))
    assert streamed == bytes(want)
