"""elf.py on real gcc-built libraries: dynamic facts and offload bundles in .hip_fatbin."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from rocm_build.binary import elf

from .helpers import (
    cc_shared,
    device_code,
    fatbin_source,
    make_bundle,
    make_ccob,
    versioned_lib,
)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

HOST = "host-x86_64-unknown-linux-gnu-"


def test_read_elf_chain(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    base = versioned_lib(lib, "base", "2.4.1", "int base(void) { return 2; }\n")
    mid = versioned_lib(
        lib,
        "mid",
        "1.0",
        "#include <string.h>\nint base(void);\n"
        "int mid(const char *s) { return base() + (int)strlen(s); }\n",
        libs=[base],
        rpath="$ORIGIN:$ORIGIN/../other",
    )
    info = elf.read_elf(mid)
    assert info.soname == "libmid.so.1"
    assert "libbase.so.2" in info.needed
    assert "libc.so.6" in info.needed
    assert info.rpath == ("$ORIGIN", "$ORIGIN/../other")
    assert info.runpath == ()
    assert info.search_path == info.rpath
    assert info.machine == "EM_X86_64"
    assert info.elf_class == 64
    assert info.is_host
    assert not info.has_fatbin
    assert any(v.startswith("GLIBC_2.") for v in info.glibc_versions)
    # read through the version symlink gives the same facts
    assert elf.read_elf(lib / "libmid.so.1").needed == info.needed


def test_runpath_and_no_soname(tmp_path: Path) -> None:
    out = cc_shared(tmp_path / "ext.so", "int f(void){return 0;}\n", rpath="/opt/x", runpath=True)
    info = elf.read_elf(out)
    assert info.soname is None
    assert info.runpath == ("/opt/x",)
    assert info.rpath == ()
    assert info.search_path == ("/opt/x",)


def test_not_elf(tmp_path: Path) -> None:
    text = tmp_path / "x.so"
    text.write_text("INPUT(-lfoo)\n")  # a linker script named like a library
    assert not elf.is_elf(text)
    with pytest.raises(elf.NotElfError):
        elf.read_elf(text)
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    with pytest.raises(elf.NotElfError):
        elf.read_elf(empty)


def test_uncompressed_bundles_back_to_back(tmp_path: Path) -> None:
    bundles = [
        make_bundle(
            [
                (HOST, b""),
                ("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-", device_code(1)),
                ("hipv4-amdgcn-amd-amdhsa--gfx1030", device_code(2)),
            ]
        ),
        make_bundle([(HOST, b""), ("hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", b"x")]),
        make_bundle([(HOST, b""), ("hip-amdgcn-amd-amdhsa-gfx906", device_code(3, 9000))]),
    ]
    lib = cc_shared(tmp_path / "libk.so", fatbin_source(bundles), soname="libk.so")
    assert elf.read_elf(lib).has_fatbin
    found = elf.offload_bundles(lib)
    assert len(found) == 3
    assert not any(b.compressed for b in found)
    assert elf.offload_targets(lib) == {"gfx90a", "gfx1030", "gfx942", "gfx906"}


@pytest.mark.parametrize(
    ("version", "method"), [(3, "zstd"), (2, "zstd"), (1, "zstd"), (2, "zlib")]
)
def test_compressed_bundles(tmp_path: Path, version: int, method: str) -> None:
    inner = [
        make_bundle([(HOST, b""), (f"hipv4-amdgcn-amd-amdhsa--gfx{t}", device_code(n, 20000))])
        for n, t in enumerate(("90a", "1100", "1201"))
    ]
    blobs = [make_ccob(b, version=version, method=method) for b in inner]
    blobs.append(make_bundle([(HOST, b""), ("hipv4-amdgcn-amd-amdhsa--gfx950", b"y")]))
    lib = cc_shared(tmp_path / "libc.so", fatbin_source(blobs))
    found = elf.offload_bundles(lib)
    assert [b.compressed for b in found].count(True) == 3
    assert elf.offload_targets(lib) == {"gfx90a", "gfx1100", "gfx1201", "gfx950"}


def test_no_fatbin(tmp_path: Path) -> None:
    lib = cc_shared(tmp_path / "libplain.so", "int g(void){return 0;}\n")
    assert elf.offload_bundles(lib) == ()
    assert elf.offload_targets(lib) == frozenset()


def test_walking_bundles_drops_the_pages_behind_it_and_finds_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the pages behind the walk released after every bundle (``_RELEASE_EVERY`` 0; 32 MB
    otherwise), the walk still finds every bundle, plain and compressed, the same: a released
    page is mapped again from the page cache if it is read."""
    blobs = [
        make_bundle([(HOST, b""), (f"hipv4-amdgcn-amd-amdhsa--gfx{t}", device_code(n, 20000))])
        for n, t in enumerate(("90a", "1100", "1201", "942"))
    ]
    blobs[1] = make_ccob(blobs[1], version=3, method="zstd")
    lib = cc_shared(tmp_path / "libw.so", fatbin_source(blobs))
    kept = elf.offload_bundles(lib)
    released: list[tuple[int, int]] = []
    real = elf._release

    def counted(mm: Any, start: int, end: int) -> int:
        after = real(mm, start, end)
        if after != start:
            released.append((start, after))
        return after

    monkeypatch.setattr(elf, "_RELEASE_EVERY", 0)
    monkeypatch.setattr(elf, "_release", counted)
    assert elf.offload_bundles(lib) == kept
    assert len(kept) == 4
    assert released
    assert elf.offload_targets(lib) == {"gfx90a", "gfx1100", "gfx1201", "gfx942"}
