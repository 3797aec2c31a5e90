"""ROCm 6.4's rocSOLVER (Debian sid) carries code objects for LLVM's generic processors: they
serve gfx942, gfx1100 and the rest of their families."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build.binary import elf
from rocm_build.common import arch


@pytest.mark.slow
def test_real_rocsolver_serves_gfx942_through_gfx9_4_generic(sid_tree: Path) -> None:
    (lib,) = [p for p in (sid_tree / "lib").glob("librocsolver.so.*") if not p.is_symlink()]
    targets = elf.offload_targets(lib)
    assert "gfx9-4-generic" in targets
    assert "gfx942" not in targets
    for target in ("gfx942", "gfx1100", "gfx1201", "gfx1030", "gfx906"):
        assert arch.covered(target, targets), target
    assert arch.covered("gfx90a", targets)  # its own code object
    assert not arch.covered("gfx1150:xnack-", targets - {"gfx11-generic"})
