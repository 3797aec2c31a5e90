"""tests/support/kpackwriter.py on ROCm 6.4 (Debian sid): the tree's rocRAND (15 uncompressed
bundles, 10 targets) and a library compiled by the tree's hipcc (clang 21) with
``--offload-compress`` (compressed bundle format v2 and v3), split by the writer. Every archived
code object is the original (for compressed bundles: decompressed) entry, and each host library
still loads in the sid root with the tree's HIP 6.4 (no GPU: status 100), as the unsplit one
does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rocm_build.binary import elf
from rocm_build.rocm import sysroot
from tests.integration.modern.conftest import PACKED
from tests.support import kpackwriter
from tests.support.kpackread import Elf, check_archived, mapping_problems

pytestmark = pytest.mark.slow


#: Run inside the sid root: argv = result file, then (library, function) pairs to call
CALL = r"""
import ctypes, json, sys
out = []
for path, name in zip(sys.argv[2::2], sys.argv[3::2]):
    lib = ctypes.CDLL(path)
    if name == "device_count_status":
        n = ctypes.c_int(-1)
        out.append([lib.device_count_status(ctypes.byref(n)), n.value])
    elif name == "rocrand_get_version":
        v = ctypes.c_int(-1)
        out.append([lib.rocrand_get_version(ctypes.byref(v)), v.value])
open(sys.argv[1], "w").write(json.dumps(out))
"""


def call_in_root(
    root: Path, tree: Path, work: Path, calls: list[tuple[Path, str]]
) -> list[list[int]]:
    (work / "call.py").write_text(CALL)
    cmd = ["python3", str(work / "call.py"), str(work / "called.json")]
    for path, name in calls:
        cmd += [str(path), name]
    env = {**os.environ, "LD_LIBRARY_PATH": str(tree.resolve() / "lib")}
    # each library's folder too: the unsplit ones may lie outside ``work``
    folders = {path.parent.resolve() for path, _ in calls} - {work.resolve()}
    binds = [tree.resolve(), *sorted(f for f in folders if work.resolve() not in f.parents)]
    assert sysroot.run(root, cmd, binds=binds, cwd=work, env=env) == 0
    answers: list[list[int]] = json.loads((work / "called.json").read_text())
    return answers


def test_sid_rocrand_split(sid_tree: Path, sid_root: Path, tmp_path: Path) -> None:
    src = sid_tree / "lib" / "librocrand.so.1.1"
    bundles = elf.offload_bundles(src)
    assert len(bundles) == 15
    assert not any(b.compressed for b in bundles)
    prefix = kpackwriter.THEROCK_PREFIXES["librocrand"]
    result = kpackwriter.split_library(src, tmp_path, group="rand_lib", source_prefix=prefix)
    targets = {c.target for c in result.code_objects}
    assert len(targets) == 10
    assert check_archived(src, tmp_path, result.kernel_name, "rand_lib") == len(result.code_objects)
    assert mapping_problems(Elf(result.library)) == []
    # the device code left the file, all but the part pages at its section's ends (on sid: 139
    # MB -> 39 MB, the 100 MB of bundles gone)
    cut = src.stat().st_size - result.library.stat().st_size
    assert cut >= sum(b.size for b in bundles) - 4 * kpackwriter.PAGE
    answers = call_in_root(
        sid_root,
        sid_tree,
        tmp_path,
        [(src, "rocrand_get_version"), (result.library, "rocrand_get_version")],
    )
    assert answers[0] == answers[1]
    assert answers[0][0] == 0


def test_sid_compressed_v2_v3_split(
    packed: dict[int, Path], sid_tree: Path, sid_root: Path, tmp_path: Path
) -> None:
    calls: list[tuple[Path, str]] = []
    for version, src in packed.items():
        bundles = elf.offload_bundles(src)
        assert len(bundles) == 2
        assert all(b.ccob is not None and b.ccob.version == version for b in bundles)
        out = tmp_path / f"v{version}"
        result = kpackwriter.split_library(src, out, group="g", source_prefix="p")
        assert check_archived(src, out, result.kernel_name, "g") == 2 * len(PACKED)
        assert mapping_problems(Elf(result.library)) == []
        calls += [(src, "device_count_status"), (result.library, "device_count_status")]
    answers = call_in_root(sid_root, sid_tree, tmp_path, calls)
    assert answers == [[100, 0]] * 4
