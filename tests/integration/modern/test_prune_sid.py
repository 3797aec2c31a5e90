"""Pruning on ROCm 6.4 (sid): the sid tree's rocRAND (15 uncompressed bundles, 10 targets) pruned
for gfx1100; inside the sid root, the tree's own comgr 3 (the HIP runtime's lookup) finds for
gfx1100 byte for byte what it found before and nothing for the dropped targets, and the pruned
library loads next to HIP 6.4, which initialises (no GPU: status 100)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rocm_build.binary import elf, elfpatch
from rocm_build.bundle import prune
from rocm_build.rocm import sysroot

pytestmark = pytest.mark.slow

COMGR = Path(__file__).resolve().parent.parent / "bundle" / "comgr.py"
SCRIPT = r"""
import ctypes, hashlib, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from comgr import Comgr
tree, work = Path(sys.argv[2]), Path(sys.argv[3])
comgr = Comgr(tree)
isas = ["amdgcn-amd-amdhsa--" + t for t in ("gfx1100", "gfx942", "gfx90a:xnack-", "gfx1030")]
out = {}
for blob in sorted(work.glob("*.bin")):
    found = comgr.lookup(blob.read_bytes(), isas)
    out[blob.name] = {i[19:]: hashlib.sha256(v).hexdigest() if v else "" for i, v in found.items()}
hip = ctypes.CDLL(str(tree / "lib" / "libamdhip64.so.6"), mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL(str(work / "lib" / "librocrand.so.1"))
n = ctypes.c_int(-1)
out["status"] = hip.hipGetDeviceCount(ctypes.byref(n))
(work / "result.json").write_text(json.dumps(out))
"""


def test_sid_rocrand_pruned_for_gfx1100(sid_tree: Path, sid_root: Path, tmp_path: Path) -> None:
    src = sid_tree / "lib" / "librocrand.so.1.1"
    plan = prune.plan_prune(src, ["gfx1100"])
    assert plan.ids_after == ("gfx1100",)
    out = tmp_path / "lib" / "librocrand.so.1"
    out.parent.mkdir()
    with elfpatch.PatchedFile(src, None, prune.overlays(plan)) as pf, out.open("wb") as fh:
        while block := pf.read(1 << 20):
            fh.write(block)
    assert out.stat().st_size == src.stat().st_size
    assert elf.offload_targets(out) == {"gfx1100"}
    old, new = src.read_bytes(), out.read_bytes()
    for i, b in enumerate(elf.offload_bundles(src)[:4]):  # the first few: a 42 MB one among them
        (tmp_path / f"old{i}.bin").write_bytes(old[b.file_offset : b.file_offset + b.size])
        (tmp_path / f"new{i}.bin").write_bytes(new[b.file_offset : b.file_offset + b.size])
    shutil.copy(COMGR, tmp_path / "comgr.py")
    (tmp_path / "check.py").write_text(SCRIPT)
    code = sysroot.run(
        sid_root,
        ["python3", str(tmp_path / "check.py"), str(tmp_path), str(sid_tree), str(tmp_path)],
        binds=[sid_tree.resolve()],
        cwd=tmp_path,
    )
    assert code == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert result.pop("status") == 100  # hipErrorNoDevice: HIP 6.4 initialised, no GPU
    for i in range(4):
        before, after = result[f"old{i}.bin"], result[f"new{i}.bin"]
        assert before["gfx1100"]
        assert after["gfx1100"] == before["gfx1100"]
        assert before["gfx90a:xnack-"]
        assert before["gfx1030"]
        assert after["gfx90a:xnack-"] == after["gfx1030"] == after["gfx942"] == ""
    assert hashlib.sha256(src.read_bytes()).hexdigest() != hashlib.sha256(new).hexdigest()
