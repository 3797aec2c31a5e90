"""The kpack reference's code objects are byte for byte the original library's bundle entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build.binary import elf, kpack
from tests.conftest import KPACK_REFERENCE, NO_KPACK_REFERENCE

# CI lays shared/ beside the clone.
REFERENCE = KPACK_REFERENCE
TARGETS = {
    "gfx803",
    "gfx900:xnack-",
    "gfx906:xnack-",
    "gfx908:xnack-",
    "gfx90a:xnack+",
    "gfx90a:xnack-",
    "gfx1030",
}


@pytest.mark.skipif(NO_KPACK_REFERENCE, reason=f"needs the kpack reference data at {REFERENCE}")
def test_each_code_object_is_the_original_bundle_entry(rocm_tree: Path) -> None:
    (original,) = (p for p in sorted(rocm_tree.glob("lib/librocrand.so.1*")) if not p.is_symlink())
    (bundle,) = elf.offload_bundles(original)
    assert not bundle.compressed
    entries = {
        elf.target_id_of_bundle_id(e.bundle_id): e for e in bundle.entries if e.target is not None
    }
    assert set(entries) == TARGETS
    ref = kpack.read_ref(REFERENCE / "lib" / "librocrand.so.1.1")
    assert ref is not None
    wrappers = kpack.wrappers(REFERENCE / "lib" / "librocrand.so.1.1")
    with original.open("rb") as fh:
        for path in kpack.tree_archives(REFERENCE):
            archive = kpack.read_archive(path)
            kpack.check_consistent(ref, wrappers, archive)
            (entry,) = archive.for_kernel(ref.kernel_name)
            want = entries.pop(entry.target)
            fh.seek(bundle.file_offset + want.offset)
            assert kpack.read_code_object(path, archive, entry) == fh.read(want.size), entry.target
            assert entry.metadata["target"] == want.bundle_id
    assert entries == {}
