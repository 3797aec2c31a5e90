"""Pruning on ROCm 6.4 (Debian sid), checked inside the sid root with the sid tree's own tools.

The runtime's two ways into an offload bundle are both asked, through the tree's comgr 3 (see
tests/integration/bundle/comgr.py): ``amd_comgr_lookup_code_object`` (HIP's way into an
uncompressed bundle) and comgr's unbundle action, which HIP 6.x takes for a compressed bundle
(the lookup refuses a ``CCOB``) and for generic targets: it asks for the device's own id and its
generic one and runs the device's own code object where there is one. For each kept target the
pruned bundle must give byte for byte the code object the unpruned one gives, for a dropped one
nothing; the tree's clang-offload-bundler must list exactly the kept ids.

- rocRAND (15 uncompressed bundles, 10 targets), its first 4 bundles, pruned for gfx1100;
- rocSOLVER (235 uncompressed bundles, generic targets only: no gfx942, no gfx1100 code
  object), 3 of its bundles (two of the smallest, the median one), pruned for gfx942 (keeps
  ``gfx9-4-generic``) and for gfx1100 (keeps ``gfx11-generic``);
- a library compiled by the tree's hipcc (clang 21) with ``--offload-compress``, compressed
  bundle format v2 (clang 21's default) and v3 (``COMPRESSED_BUNDLE_FORMAT_VERSION=3``), for
  exact, generic and xnack± targets, pruned for gfx1100, gfx942 and gfx90a:xnack+;
- a wheel with that library and rocRAND, bundled with ``--arch gfx1100``, installed into a venv
  of the sid root with the tree out of reach: HIP 6.4 from the wheel initialises (no GPU: status
  100) and the wheel's own comgr finds gfx1100's code in the installed, pruned files.

comgr's action cache (on by default, in ``$HOME/.cache/comgr``) answers an unbundle of a second
bundle of the same layout with the first one's code objects, so every check runs with
``AMD_COMGR_CACHE=0``.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from rocm_build.binary import elf, elfpatch
from rocm_build.binary.elf import OffloadBundle
from rocm_build.bundle import prune
from rocm_build.rocm import sysroot

pytestmark = pytest.mark.slow

COMGR = Path(__file__).resolve().parent.parent / "bundle" / "comgr.py"
HIP = "hipv4-amdgcn-amd-amdhsa--"
HOST = "host-x86_64-unknown-linux-gnu-"
NO_CACHE = {"AMD_COMGR_CACHE": "0"}

#: Run inside the sid root: argv = folder of comgr.py, folder whose lib/ has comgr,
#: clang-offload-bundler (or ""), work folder with spec.json and the bundles it names.
CHECK = r"""
import hashlib, json, subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from comgr import Comgr
comgr, bundler, work = Comgr(Path(sys.argv[2])), sys.argv[3], Path(sys.argv[4])
HIP = "hipv4-amdgcn-amd-amdhsa--"
def digest(code):
    return hashlib.sha256(code).hexdigest() if code else ""
def tool(f, *args):
    cmd = [bundler, *args, "--type=o", f"--input={f}"]
    return subprocess.run(cmd, capture_output=True, text=True, check=True)
out = {}
for name, ask in json.loads((work / "spec.json").read_text()).items():
    f = work / name
    blob, got = f.read_bytes(), {}
    for isa in ask.get("lookup", ()):
        isa_name = "amdgcn-amd-amdhsa--" + isa
        got["lookup " + isa] = digest(comgr.lookup(blob, [isa_name])[isa_name])
    for device, generic in ask.get("pick", ()):
        ids = [HIP + device] + ([HIP + generic] if generic else [])
        found = comgr.unbundle(blob, ids)
        got["pick " + device] = digest(found[ids[0]] or (found[ids[-1]] if generic else b""))
    if bundler:
        got["listed"] = sorted(tool(f, "--list").stdout.split())
    if bundler and ask.get("hash"):
        done = tool(f, "--unbundle", f"--output={work / 'x.co'}", f"--targets={HIP}{ask['hash']}",
                    "-verbose")
        got["hash"] = "Hashes match: Yes" in done.stdout + done.stderr
    out[name] = got
(work / "result.json").write_text(json.dumps(out))
"""


def check_in_root(
    root: Path, work: Path, spec: dict[str, Any], *, comgr_dir: Path, tree: Path
) -> dict[str, dict[str, Any]]:
    """CHECK run in the sid root on the bundles of ``spec`` (files in ``work``)."""
    shutil.copy(COMGR, work / "comgr.py")
    (work / "check.py").write_text(CHECK)
    (work / "spec.json").write_text(json.dumps(spec))
    bundler = tree / "lib/llvm/bin/clang-offload-bundler"
    cmd = ["python3", str(work / "check.py"), str(work), str(comgr_dir), str(bundler), str(work)]
    env = {**os.environ, **NO_CACHE}
    assert sysroot.run(root, cmd, binds=[tree.resolve()], cwd=work, env=env) == 0
    result: dict[str, dict[str, Any]] = json.loads((work / "result.json").read_text())
    return result


def pruned_file(src: Path, targets: Sequence[str], out: Path) -> prune.PrunePlan:
    """``src`` pruned for ``targets`` into ``out``, streamed as bundle writes it."""
    plan = prune.plan_prune(src, targets)
    with elfpatch.PatchedFile(src, None, prune.overlays(plan)) as pf, out.open("wb") as fh:
        while block := pf.read(1 << 20):
            fh.write(block)
    return plan


def pruned_bundle(src: Path, bundle: OffloadBundle, targets: Sequence[str]) -> tuple[bytes, bytes]:
    """One bundle of a big library before and after pruning: the overlays the stream applies
    (tests/integration/bundle/test_prune.py shows the stream is exactly them), on its bytes."""
    with src.open("rb") as fh:
        fh.seek(bundle.file_offset)
        old = fh.read(bundle.size)
    new = bytearray(old)
    for o in prune.overlays(prune.plan_prune(src, targets, [bundle])):
        data = o.make() if o.make is not None else o.data
        at = o.offset - bundle.file_offset
        new[at : at + o.length] = data + bytes(o.length - len(data))
    return old, bytes(new)


def bundles_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return [data[b.file_offset : b.file_offset + b.size] for b in elf.offload_bundles(path)]


def test_sid_rocrand_pruned_for_gfx1100(sid_tree: Path, sid_root: Path, tmp_path: Path) -> None:
    src = sid_tree / "lib" / "librocrand.so.1.1"
    out = tmp_path / "lib" / "librocrand.so.1"
    out.parent.mkdir()
    plan = pruned_file(src, ["gfx1100"], out)
    assert plan.ids_after == ("gfx1100",)
    assert out.stat().st_size == src.stat().st_size
    assert elf.offload_targets(out) == {"gfx1100"}
    spec = {}
    for i, (old, new) in enumerate(zip(bundles_of(src)[:4], bundles_of(out)[:4], strict=True)):
        (tmp_path / f"old{i}.bin").write_bytes(old)  # the first few: a 42 MB one among them
        (tmp_path / f"new{i}.bin").write_bytes(new)
        for name in (f"old{i}.bin", f"new{i}.bin"):
            spec[name] = {"lookup": ["gfx1100", "gfx942", "gfx90a:xnack-", "gfx1030"]}
    result = check_in_root(sid_root, tmp_path, spec, comgr_dir=sid_tree, tree=sid_tree)
    for i in range(4):
        before, after = result[f"old{i}.bin"], result[f"new{i}.bin"]
        assert before["lookup gfx1100"]
        assert after["lookup gfx1100"] == before["lookup gfx1100"]
        assert before["lookup gfx90a:xnack-"]
        assert before["lookup gfx1030"]
        assert after["lookup gfx90a:xnack-"] == after["lookup gfx1030"] == ""
        assert after["lookup gfx942"] == ""
        assert after["listed"] == sorted([HOST, HIP + "gfx1100"])


#: device id (as HIP names the GPU) -> the generic processor HIP also asks for (or None)
DEVICES = {
    "gfx1100": "gfx11-generic",
    "gfx1101": "gfx11-generic",
    "gfx942:sramecc+:xnack-": "gfx9-4-generic",
    "gfx90a:sramecc+:xnack+": None,
    "gfx90a:sramecc+:xnack-": None,
    "gfx1030": "gfx10-3-generic",
}


def test_sid_rocsolver_generic_targets(sid_tree: Path, sid_root: Path, tmp_path: Path) -> None:
    """rocSOLVER has code for gfx942 and gfx1100 only through gfx9-4-generic and gfx11-generic:
    pruning for them keeps exactly those, and the runtime finds the same code objects."""
    (src,) = [p for p in (sid_tree / "lib").glob("librocsolver.so.*") if not p.is_symlink()]
    found = elf.offload_bundles(src)
    by_size = sorted(found, key=lambda b: b.size)
    sample = [*by_size[:2], by_size[len(by_size) // 2]]  # 0.3 MB, 0.3 MB, 1.5 MB on sid
    keeps = {"gfx942": "gfx9-4-generic", "gfx1100": "gfx11-generic"}
    spec: dict[str, Any] = {}
    for i, b in enumerate(sample):
        assert not b.compressed
        assert {"gfx9-4-generic", "gfx11-generic"} <= {e.bundle_id[len(HIP) :] for e in b.entries}
        for target in keeps:
            old, new = pruned_bundle(src, b, [target])
            assert len(new) == len(old)
            (tmp_path / f"old{i}.bin").write_bytes(old)
            (tmp_path / f"{target}-{i}.bin").write_bytes(new)
            for name in (f"old{i}.bin", f"{target}-{i}.bin"):
                spec[name] = {
                    "lookup": ["gfx9-4-generic", "gfx11-generic", "gfx90a", "gfx908"],
                    "pick": list(DEVICES.items()),
                }
    result = check_in_root(sid_root, tmp_path, spec, comgr_dir=sid_tree, tree=sid_tree)
    for i in range(len(sample)):
        before = result[f"old{i}.bin"]
        for target, generic in keeps.items():
            after = result[f"{target}-{i}.bin"]
            assert after["listed"] == sorted([HOST, HIP + generic])
            assert before[f"lookup {generic}"]
            assert after[f"lookup {generic}"] == before[f"lookup {generic}"]
            for other in {"gfx9-4-generic", "gfx11-generic", "gfx90a", "gfx908"} - {generic}:
                assert before[f"lookup {other}"]
                assert after[f"lookup {other}"] == "", other
            for device, its_generic in DEVICES.items():
                key = f"pick {device}"
                assert before[key], device  # every one of them has code in rocSOLVER
                if its_generic == generic:  # gfx1101 too: the generic code serves the family
                    assert after[key] == before[key], device
                else:
                    assert after[key] == "", device
        assert before["pick gfx942:sramecc+:xnack-"] == before["lookup gfx9-4-generic"]
        assert before["pick gfx1100"] == before["lookup gfx11-generic"]


#: request -> the ids pruning keeps, the devices (of DEVICES) whose code stays
REQUESTS = {
    "gfx1100": (("gfx1100", "gfx11-generic"), {"gfx1100", "gfx1101"}),
    "gfx942": (("gfx942", "gfx9-4-generic"), {"gfx942:sramecc+:xnack-"}),
    "gfx90a:xnack+": (("gfx90a:xnack+",), {"gfx90a:sramecc+:xnack+"}),
}


def test_sid_compressed_v2_v3_generic_and_features(
    packed: dict[int, Path], sid_tree: Path, sid_root: Path, tmp_path: Path
) -> None:
    spec: dict[str, Any] = {}
    for version, src in packed.items():
        found = elf.offload_bundles(src)
        assert len(found) == 2
        assert all(b.ccob is not None and b.ccob.version == version for b in found)
        for i, old in enumerate(bundles_of(src)):
            (tmp_path / f"v{version}-old{i}.bin").write_bytes(old)
            spec[f"v{version}-old{i}.bin"] = {"pick": list(DEVICES.items())}
        for request, (kept, _) in REQUESTS.items():
            out = tmp_path / f"{request}-v{version}.so"
            plan = pruned_file(src, [request], out)
            assert sorted(plan.ids_after) == sorted(kept)
            assert out.stat().st_size == src.stat().st_size
            for i, (b, new) in enumerate(
                zip(elf.offload_bundles(out), bundles_of(out), strict=True)
            ):
                assert b.ccob is not None  # the same format, smaller
                assert b.ccob.version == version
                assert b.size < found[i].size
                name = f"{request}-v{version}-{i}.bin"
                (tmp_path / name).write_bytes(new)
                spec[name] = {"pick": list(DEVICES.items()), "hash": kept[0]}
    result = check_in_root(sid_root, tmp_path, spec, comgr_dir=sid_tree, tree=sid_tree)
    for version in packed:
        for i in range(2):
            before = result[f"v{version}-old{i}.bin"]
            assert all(before[f"pick {d}"] for d in DEVICES), before
            for request, (kept, served) in REQUESTS.items():
                after = result[f"{request}-v{version}-{i}.bin"]
                assert after["listed"] == sorted([HOST, *(HIP + k for k in kept)])
                assert after["hash"] is True  # LLVM checks the header's hash of the new payload
                for device in DEVICES:
                    want = before[f"pick {device}"] if device in served else ""
                    assert after[f"pick {device}"] == want, (version, request, device)


INIT = b"""import ctypes, os
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "_kern.so"))

def device_count_status():
    n = ctypes.c_int(-1)
    return _lib.device_count_status(ctypes.byref(n))
"""
LOAD = r"""
import json, os, sys, hipext
status = hipext.device_count_status()
maps = sorted({p for p in open("/proc/self/maps").read().split() if ".so" in p})
found = {"status": status, "libs": maps, "package": os.path.dirname(hipext.__file__)}
open(sys.argv[1], "w").write(json.dumps(found))
"""


def test_sid_pruned_wheel_runs_with_the_tree_out_of_reach(
    packed: dict[int, Path], sid_tree: Path, sid_root: Path, run_cli: Any, tmp_path: Path
) -> None:
    """bundle --arch gfx1100 of a wheel whose library has compressed device code and NEEDs
    rocRAND: installed into a venv of the sid root, where the tree is not, HIP 6.4 from the
    wheel initialises, rocRAND loads from the wheel, and the wheel's own comgr finds in the
    installed files the code objects the unpruned ones give for gfx1100, none for the rest."""
    fat = bundled_wheel(packed[2], sid_tree, run_cli, tmp_path)
    # the unpruned bundles and the pruned ones (at the same offsets: the layout is unchanged)
    rand = sid_tree / "lib" / "librocrand.so.1.1"
    sizes = [b.size for b in elf.offload_bundles(rand)]
    smallest = sorted(range(len(sizes)), key=sizes.__getitem__)[:2]
    pairs = {"kern": (packed[2], range(2)), "rand": (rand, smallest)}
    spec: dict[str, Any] = {}
    for label, (old_file, picked) in pairs.items():
        old, new = bundles_of(old_file), bundles_of(tmp_path / f"{label}.so")
        for i in picked:
            for when, blob in (("old", old[i]), ("new", new[i])):
                (tmp_path / f"{label}-{when}{i}.bin").write_bytes(blob)
                spec[f"{label}-{when}{i}.bin"] = {"pick": list(DEVICES.items())}
    shutil.copy(COMGR, tmp_path / "comgr.py")
    (tmp_path / "check.py").write_text(CHECK)
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "load.py").write_text(LOAD)
    py, site = tmp_path / "venv" / "bin" / "python", tmp_path / "loaded.json"
    package = f"$({py} -c 'import hipext, os; print(os.path.dirname(hipext.__file__))')"
    script = (
        f"python3 -m venv {tmp_path / 'venv'} && {py} -m pip install -q --no-index --no-deps "
        f"{fat} && cd / && {py} {tmp_path}/load.py {site} && "
        f"{py} {tmp_path}/check.py {tmp_path} {package} '' {tmp_path}"
    )
    # only the work folder is bound in, not the tree: its path does not exist in the root
    env = {**os.environ, **NO_CACHE}
    assert sysroot.run(sid_root, ["sh", "-c", script], cwd=tmp_path, env=env) == 0
    loaded = json.loads(site.read_text())
    assert loaded["status"] == 100  # hipErrorNoDevice: HIP 6.4 initialised, there is no GPU
    ours = [p for p in loaded["libs"] if p.startswith(loaded["package"])]
    for name in ("/_kern.so", "/lib/librocrand.so.1", "/lib/libamdhip64.so.6"):
        assert any(p.endswith(name) for p in ours), (name, loaded["libs"])
    assert not [p for p in loaded["libs"] if "amdhip64" in p and p not in ours]
    result = json.loads((tmp_path / "result.json").read_text())
    for label, (_, picked) in pairs.items():
        for i in picked:
            before, after = result[f"{label}-old{i}.bin"], result[f"{label}-new{i}.bin"]
            assert before["pick gfx1100"]
            assert after["pick gfx1100"] == before["pick gfx1100"], label
            assert before["pick gfx90a:sramecc+:xnack-"]
            assert before["pick gfx1030"]
            assert after["pick gfx90a:sramecc+:xnack-"] == after["pick gfx1030"] == ""
    kern_before, kern_after = result["kern-old0.bin"], result["kern-new0.bin"]
    assert kern_after["pick gfx1101"] == kern_before["pick gfx1101"]  # gfx11-generic: kept
    assert kern_after["pick gfx942:sramecc+:xnack-"] == ""


def bundled_wheel(kern: Path, tree: Path, run_cli: Any, tmp_path: Path) -> Path:
    """The fat wheel of hipext (``kern`` as its _kern.so) for gfx1100; its pruned _kern.so and
    librocrand.so.1 copied out as kern.so and rand.so."""
    from tests.integration.bundle.helpers import make_wheel

    files: dict[str, bytes | Path] = {"hipext/__init__.py": INIT, "hipext/_kern.so": kern}
    wheel = make_wheel(tmp_path / "dist", "hipext", "1.0.0", files, tag="py3-none-linux_x86_64")
    out = tmp_path / "out"
    args = ["--json", "bundle", str(wheel), "--rocm", str(tree), "--arch", "gfx1100", "-z", "1"]
    res = run_cli([*args, "--output-dir", str(out)], cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    code = json.loads(res.stdout)[0]["plan"]["device_code"]
    assert code["hipext/_kern.so"]["kept"] == ["gfx11-generic", "gfx1100"]
    assert code["hipext/lib/librocrand.so.1"]["kept"] == ["gfx1100"]
    assert "gfx90a" in code["hipext/lib/librocrand.so.1"]["dropped"]
    (fat,) = out.glob("*.whl")
    with zipfile.ZipFile(fat) as zf:
        prov = json.loads(zf.read("hipext/.rocm-build-bundle.json"))
        (tmp_path / "kern.so").write_bytes(zf.read("hipext/_kern.so"))
        (tmp_path / "rand.so").write_bytes(zf.read("hipext/lib/librocrand.so.1"))
    assert prov["device_code"]["hipext/_kern.so"]["kept"] == ["gfx11-generic", "gfx1100"]
    return fat
