"""The smoke suite's own stdlib ELF reader (rocm_build/smoke/suite/smoke_elf.py) on real objects."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "rocm_build" / "smoke" / "suite"))

import smoke_elf

from tests.support.offloadbundle import offload_bundle


def test_target_of() -> None:
    assert smoke_elf.target_of("hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-") == "gfx90a"
    assert smoke_elf.target_of("hip-amdgcn-amd-amdhsa-gfx1030") == "gfx1030"
    assert smoke_elf.target_of("host-x86_64-unknown-linux--") is None


def test_parse_bundle_reads_every_entry() -> None:
    ids, end = smoke_elf.parse_bundle(
        offload_bundle(
            ["host-x86_64-unknown-linux--", "hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-"]
        )
    )
    assert ids[1].endswith("gfx942:sramecc+:xnack-")
    assert end > 0


def test_not_elf(tmp_path: Path) -> None:
    text = tmp_path / "x.py"
    text.write_text("print(1)\n")
    assert not smoke_elf.is_elf(text)
    assert smoke_elf.read(text) is None
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert smoke_elf.read(empty) is None
