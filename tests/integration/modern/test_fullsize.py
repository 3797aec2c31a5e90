"""Full size: a torch-shaped wheel whose HIP library needs ROCm 6.4's math libraries, bundled for
gfx942 alone and for every target of the sid tree; data trees filtered by target and put where
Debian's rocBLAS looks; a missing target's data named; ZIP64 where it is needed; both wheels
checked with zipfile: every member of the gfx942 one inflated and CRC-checked, a sample of the
all-targets one.

CI cost: the gfx942 wheel is deflated at level 1 and the all-targets one stored (-z 0), which
also takes it past 4 GiB so its ZIP64 records are exercised for real (see the README). Neither is
installed here: installing a full-size fat wheel with pip into a venv of the sid root and
importing it with the tree out of reach is test_split_sid.py's (the same libraries, the same
tree); a deflated one would add a minute of pip unpacking 5 GB to CI for no other fact."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocm_build import config
from rocm_build.bundle.data import gfx_tokens
from rocm_build.rocm import dist
from tests.conftest import DEFLATE_CACHE_ENV, _test_cache
from tests.integration.modern.fullsize_wheel import LINKED, build_wheel

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fullsize_wheel(sid_tree: Path, sid_root: Path) -> Path:
    return build_wheel(_test_cache(), sid_tree, sid_root)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Multi-GB wheels and venvs: removed at the end, not kept with pytest's last runs."""
    folder = tmp_path_factory.mktemp("fullsize")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def all_targets(tree: Path) -> str:
    known = config.from_environment().known_targets
    return ";".join(t for t in dist.open_tree(tree).bitcode_targets if t in known)


def _bundle(run_cli: Any, wheel: Path, tree: Path, out: Path, arch: str, level: int) -> Any:
    # sid's rocBLAS, rocSPARSE and rocRAND have no gfx942 code, and no library code for all 34
    # targets: the coverage check would stop these bundles (exit 11)
    args = ["--json", "bundle", str(wheel), "--rocm", str(tree), "--arch", arch]
    args.append("--allow-missing-arch")
    result = run_cli([*args, "-z", str(level), "--output-dir", str(out)], cwd=out.parent)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)
    return row


def _sample_crc(wheel: Path, every: int) -> None:
    """Read (and so CRC-check) every ``every``-th member, the largest and the last ones."""
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
        largest = max(infos, key=lambda i: i.file_size)
        for info in {*infos[::every], *infos[-3:], largest}:
            with zf.open(info) as fh:
                while fh.read(1 << 24):
                    pass


def test_fullsize_bundles(
    fullsize_wheel: Path,
    sid_tree: Path,
    sid_root: Path,
    run_cli: Any,
    work: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the wheel's HIP library needs what torch's does from ROCm
    with zipfile.ZipFile(fullsize_wheel) as zf:
        zf.extract("torch/lib/libtorch_hip.so", work / "input")
    from rocm_build.binary import elf

    info = elf.read_elf(work / "input/torch/lib/libtorch_hip.so")
    for lib in ("librocblas.so.4", "libhipblaslt.so.1", "libMIOpen.so.1", "libroctx64.so.4"):
        assert lib in info.needed
    assert len(info.needed) == len(LINKED) + 2  # and libamdhip64, libc
    assert elf.offload_targets(work / "input/torch/lib/libtorch_hip.so") == {
        "gfx942", "gfx1100", "gfx1201",
    }  # fmt: skip

    # a dry run says which data trees have nothing for the target, and which libraries no code:
    # the bundle would stop there (exit 11) unless that is allowed
    dry = ["bundle", str(fullsize_wheel), "--rocm", str(sid_tree), "--arch", "gfx942", "--dry-run"]
    plan = run_cli(dry, cwd=work)
    assert plan.returncode == 11, plan.stderr
    assert "librocblas.so.4 has no code for gfx942 (it has " in plan.stderr
    assert "libtorch_hip.so" not in plan.stderr  # built for gfx942
    plan = run_cli([*dry, "--allow-missing-arch"], cwd=work)
    assert plan.returncode == 0, plan.stderr
    assert "lib/rocblas/library has no files for gfx942" in plan.stdout
    assert "warning: librocblas.so.4 has no code for gfx942" in plan.stdout

    # one wheel at a time (bundled, checked, removed): the run's peak disk stays near the
    # larger one; the deflate cache is the test's own, removed with it
    monkeypatch.setenv(DEFLATE_CACHE_ENV, str(work / "deflate-cache"))
    one = _bundle(run_cli, fullsize_wheel, sid_tree, work / "one", "gfx942", 1)
    assert one["status"] == "bundled"
    assert one["plan"]["data_missing"]["lib/rocblas/library"] == ["gfx942"]
    assert one["zip64"] == []  # deflated (about 250 MB): no size or offset reaches 4 GiB
    one_size = _check_bundled(Path(one["output"]), {"gfx942"}, every=1)
    again = _bundle(run_cli, fullsize_wheel, sid_tree, work / "one", "gfx942", 1)
    assert again["status"] == "up-to-date"
    shutil.rmtree(work / "one")
    shutil.rmtree(work / "deflate-cache", ignore_errors=True)

    everything = all_targets(sid_tree)
    assert "gfx1100" in everything.split(";")
    full = _bundle(run_cli, fullsize_wheel, sid_tree, work / "all", everything, 0)
    assert full["status"] == "bundled"
    missing = full["plan"]["data_missing"]["lib/rocblas/library"]
    assert "gfx942" in missing
    assert "gfx1100" not in missing
    assert any("start past 4 GiB" in why for why in full["zip64"]), full["zip64"]
    assert any("central directory" in why for why in full["zip64"])
    all_wheel = Path(full["output"])

    # bytes per target: code objects (Debian's libraries carry gfx9-4-generic, not gfx942: the
    # generic code runs on gfx942 and counts for it) and data files (rocBLAS and hipBLASLt have
    # some for gfx1100, none for gfx942)
    shown = run_cli(["--json", "inspect", str(all_wheel)], cwd=work)
    assert shown.returncode == 0, shown.stderr
    coverage = {row["target"]: row for row in json.loads(shown.stdout)["coverage"]}
    assert coverage["gfx1100"]["code_bytes"] > 100_000_000
    assert coverage["gfx1100"]["data_bytes"] > 100_000_000
    assert coverage["gfx942"]["code_bytes"] > 100_000_000  # gfx9-4-generic in the math libraries
    assert coverage["gfx942"]["data_bytes"] == 0

    all_size = _check_bundled(all_wheel, set(everything.split(";")), every=25)
    assert all_size > one_size + 2_000_000_000  # the data of 34 targets
    shutil.rmtree(work / "all")


def _check_bundled(wheel: Path, targets: set[str], *, every: int) -> int:
    """Members, data filtered by ``targets``, CRCs of every ``every``-th member (and the largest
    and the last ones); returns the wheel's uncompressed size."""
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
    names = [i.filename for i in infos]
    # rocBLAS data where Debian's rocBLAS looks (beside the library, versioned folder)
    rocblas = [n for n in names if n.startswith("torch/lib/rocblas/")]
    assert rocblas
    assert all(n.startswith("torch/lib/rocblas/4.4.1/library/") for n in rocblas)
    data = [n for n in names if n.startswith(("torch/lib/rocblas/", "torch/lib/hipblaslt/"))]
    assert all(gfx_tokens(n) <= targets for n in data)
    for name in ("libamdhip64.so.6", "librocblas.so.4", "libMIOpen.so.1", "libamd_comgr.so.3"):
        assert f"torch/lib/{name}" in names
    _sample_crc(wheel, every=every)
    return sum(i.file_size for i in infos)
