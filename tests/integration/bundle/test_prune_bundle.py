"""bundle --arch prunes the device code of every ELF file it writes (the wheel's own HIP library
and the grafted ROCm rocRAND), and stops (exit 11) when a requested target would have no code.
Real parts: the ROCm 5.2 tree, its comgr and HIP runtime; no GPU (status 100 is the check)."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from rocm_build.binary import elf

from .comgr import Comgr
from .conftest import make_venv, pip_install
from .helpers import cc_shared, make_wheel
from .runs import RAND_CHECK, run_bundle

pytestmark = pytest.mark.slow

AMDHSA = "amdgcn-amd-amdhsa--"


def member_bundles(fat: Path, arc: str, dest: Path) -> tuple[Path, list[bytes]]:
    with zipfile.ZipFile(fat) as zf:
        dest.write_bytes(zf.read(arc))
    return dest, bundles_of(dest)


def bundles_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    return [data[b.file_offset : b.file_offset + b.size] for b in elf.offload_bundles(path)]


def test_bundle_prunes_and_the_runtime_still_finds_its_code(
    run_cli, rand_wheel: Path, tree_copy: Path, rocm_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    res = run_bundle(run_cli, rand_wheel, tree_copy, out, "--arch", "gfx90a:xnack+", "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)[0]["plan"]
    code = plan["device_code"]
    assert code["hipext/lib/librocrand.so.1"]["kept"] == ["gfx90a:xnack+"]
    assert "gfx90a:xnack-" in code["hipext/lib/librocrand.so.1"]["dropped"]
    assert code["hipext/_kern.so"]["kept"] == ["gfx90a"]  # feature-less code serves xnack+
    (fat,) = out.glob("*.whl")
    with zipfile.ZipFile(fat) as zf:
        prov = json.loads(zf.read("hipext/.rocm-build-bundle.json"))
        sizes = {i.filename: i.file_size for i in zf.infolist()}
    assert prov["device_code"]["hipext/lib/librocrand.so.1"]["kept"] == ["gfx90a:xnack+"]
    assert prov["device_targets"] == ["gfx90a:xnack+"]
    src = rocm_tree / "lib/librocrand.so.1.1"
    assert sizes["hipext/lib/librocrand.so.1"] == src.stat().st_size  # layout unchanged
    lib, after = member_bundles(fat, "hipext/lib/librocrand.so.1", tmp_path / "rand.so")
    comgr = Comgr(rocm_tree)
    for old, new in zip(bundles_of(src), after, strict=True):
        for isa, kept in (("gfx90a:xnack+", True), ("gfx90a:xnack-", False), ("gfx1030", False)):
            want = comgr.lookup(old, [AMDHSA + isa])[AMDHSA + isa] if kept else b""
            assert comgr.lookup(new, [AMDHSA + isa])[AMDHSA + isa] == want, isa
    kern, _ = member_bundles(fat, "hipext/_kern.so", tmp_path / "kern.so")
    assert elf.offload_targets(kern) == {"gfx90a"}
    assert elf.offload_targets(lib) == {"gfx90a"}

    # installed with the tree out of reach: HIP initialises (no GPU: 100), rocRAND loads
    gone = tmp_path / "moved-away"
    tree_copy.rename(gone)
    shutil.rmtree(gone)
    python = make_venv(tmp_path / "venv")
    pip_install(python, fat)
    proc = subprocess.run(
        [str(python), "-c", RAND_CHECK], capture_output=True, text=True, cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == 100
    assert result["rand"].startswith(str(tmp_path / "venv"))


def test_missing_target_stops_the_bundle(
    run_cli, rand_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    before = hashlib.sha256(rand_wheel.read_bytes()).hexdigest()
    for extra in ((), ("--keep-all-device-code",)):
        res = run_bundle(run_cli, rand_wheel, tree_copy, out, "--arch", "gfx90a;gfx942", *extra)
        assert res.returncode == 11, res.stderr
        assert "librocrand.so.1 has no code for gfx942 (it has gfx1030, gfx803, " in res.stderr
        assert "_kern.so has no code for gfx942 (it has gfx1030, gfx90a)" in res.stderr
        assert "gfx90a" not in res.stderr.split("has no code for ", 1)[1].split(" ")[0]
        assert "Traceback" not in res.stderr
        assert not list(out.glob("*.whl")) if out.exists() else True
    assert hashlib.sha256(rand_wheel.read_bytes()).hexdigest() == before
    # the dry run shows the plan, and stops the same way
    dry = run_bundle(run_cli, rand_wheel, tree_copy, out, "--arch", "gfx942", "--dry-run")
    assert dry.returncode == 11
    assert "librocrand.so.1: 0 bytes kept (host only)" in dry.stdout
    split = run_bundle(
        run_cli, rand_wheel, tree_copy, out, "--arch", "gfx942", "--dry-run", "--split-arch"
    )
    assert split.returncode == 11, split.stderr
    assert "librocrand.so.1 has no code for gfx942" in split.stderr
    # --allow-missing-arch: written, with a warning per library and target
    ok = run_bundle(run_cli, rand_wheel, tree_copy, out, "--arch", "gfx942", "--allow-missing-arch")
    assert ok.returncode == 0, ok.stderr
    assert "warning: librocrand.so.1 has no code for gfx942" in ok.stderr
    (fat,) = out.glob("*.whl")
    lib, _ = member_bundles(fat, "hipext/lib/librocrand.so.1", tmp_path / "rand.so")
    assert elf.offload_targets(lib) == set()  # only the host entry is left


def test_keep_all_and_dry_run_numbers(
    run_cli, rand_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    dry = run_bundle(run_cli, rand_wheel, tree_copy, out, "--arch", "gfx1030", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "device code for gfx1030:" in dry.stdout
    line = next(x for x in dry.stdout.splitlines() if "librocrand.so.1:" in x)
    assert "kept (gfx1030)" in line
    assert "dropped" in line
    assert "(pruned)" in line
    res = run_bundle(
        run_cli, rand_wheel, tree_copy, out, "--arch", "gfx1030", "--keep-all-device-code"
    )
    assert res.returncode == 0, res.stderr
    (fat,) = out.glob("*.whl")
    lib, _ = member_bundles(fat, "hipext/lib/librocrand.so.1", tmp_path / "rand.so")
    assert "gfx803" in elf.offload_targets(lib)


def test_damaged_bundle_and_unknown_target(
    run_cli, rocm_tree: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    from .helpers import fatbin_source, make_bundle

    good = make_bundle(
        [("host-x86_64-unknown-linux--", b""), ("hipv4-" + AMDHSA + "gfx90a", b"x" * 64)]
    )
    bad = bytearray(good)
    bad[len(elf.BUNDLE_MAGIC) + 8 + 8 : len(elf.BUNDLE_MAGIC) + 8 + 16] = (1 << 40).to_bytes(
        8, "little"
    )
    so = cc_shared(tmp_path / "build" / "_bad.so", fatbin_source([bytes(bad)]))
    wheel = make_wheel(
        tmp_path / "dist", "badext", "1.0.0", {"badext/__init__.py": b"", "badext/_bad.so": so}
    )
    before = hashlib.sha256(wheel.read_bytes()).hexdigest()
    out = tmp_path / "out"
    res = run_bundle(run_cli, wheel, tree_copy, out, "--arch", "gfx90a")
    assert res.returncode == 10, res.stderr
    assert "_bad.so" in res.stderr
    assert "damaged offload bundle" in res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists() or not list(out.glob("*.whl"))
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == before
    unknown = run_bundle(run_cli, wheel, tree_copy, out, "--arch", "gfx9999")
    assert unknown.returncode == 2


def test_damaged_compressed_payload_is_found_while_writing(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """Damage past the part read for planning: found when the bundle is compressed again, and
    still one line, exit 10, no wheel."""
    from .helpers import device_code, fatbin_source, make_bundle, make_ccob

    hip = "hipv4-" + AMDHSA
    # incompressible and past the first MiB of payload that planning reads
    noise = random.Random(1).randbytes(1_500_000)
    entries = [("host-x86_64-unknown-linux--", b""), (hip + "gfx90a", noise),
               (hip + "gfx942", device_code(2))]  # fmt: skip
    blob = bytearray(make_ccob(make_bundle(entries), version=3, method="zlib"))
    blob[-4:] = bytes(4)  # zlib's checksum of the whole payload, read only at its end
    so = cc_shared(tmp_path / "build" / "_packed.so", fatbin_source([bytes(blob)]))
    files: dict[str, bytes | Path] = {"packed/__init__.py": b"", "packed/_packed.so": so}
    wheel = make_wheel(tmp_path / "dist", "packed", "1.0.0", files)
    out = tmp_path / "out"
    res = run_bundle(run_cli, wheel, tree_copy, out, "--arch", "gfx942")
    assert res.returncode == 10, res.stderr
    assert "_packed.so" in res.stderr
    assert "damaged offload bundle" in res.stderr
    assert "Traceback" not in res.stderr
    assert not out.exists() or not list(out.glob("*.whl"))
