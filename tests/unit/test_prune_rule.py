"""Which offload-bundle entries a one-target wheel keeps: the rule inspect uses, with features."""

from __future__ import annotations

import pytest

from rocm_build.binary import elf
from rocm_build.bundle import prune
from rocm_build.common import arch

HIP = "hipv4-amdgcn-amd-amdhsa--"


@pytest.mark.parametrize(
    ("entry", "target", "kept"),
    [
        ("gfx90a:xnack+", "gfx90a:xnack+", True),
        ("gfx90a", "gfx90a:xnack+", True),  # feature-less code runs in either mode
        ("gfx90a:xnack-", "gfx90a:xnack+", False),
        ("gfx90a:xnack-", "gfx90a", True),  # no feature asked: the GPU's mode is unknown
        ("gfx90a:sramecc+:xnack+", "gfx90a:xnack+", True),
        ("gfx90a:sramecc-:xnack+", "gfx90a:sramecc+", False),
        ("gfx9-4-generic", "gfx942", True),
        ("gfx11-generic", "gfx1100", True),
        ("gfx11-generic", "gfx942", False),
        ("gfx942", "gfx9-4-generic", False),  # a processor's code does not serve its family
        ("gfx1030", "gfx1100", False),
    ],
)
def test_serves_id(entry: str, target: str, kept: bool) -> None:
    assert arch.serves_id(entry, target) is kept
    assert prune.keeps_entry(HIP + entry, [target]) is kept


def test_host_and_unknown_entries_are_kept() -> None:
    assert prune.keeps_entry("host-x86_64-unknown-linux-gnu-", ["gfx942"])
    assert prune.keeps_entry("openmp-x86_64-pc-linux-gnu", ["gfx942"])
    assert not prune.keeps_entry(HIP + "gfx942", ["gfx1100", "gfx90a"])
    assert prune.keeps_entry(HIP + "gfx942", ["gfx1100", "gfx942"])


def test_cache_key_names_what_is_kept() -> None:
    """The deflate cache keys a pruned file by what it keeps: another target, another entry."""
    entries = (elf.OffloadEntry(HIP + "gfx90a", 64, 10), elf.OffloadEntry(HIP + "gfx942", 80, 10))
    bundles = [elf.OffloadBundle(4096, 100, False, entries, 60)]
    gfx90a = prune.plan_prune("a.so", ["gfx90a"], bundles)
    assert gfx90a.key() == prune.plan_prune("b.so", ["gfx90a:xnack+"], bundles).key()
    assert gfx90a.key() != prune.plan_prune("a.so", ["gfx942"], bundles).key()
    assert prune.plan_prune("a.so", ["gfx90a", "gfx942"], bundles).changed == ()
