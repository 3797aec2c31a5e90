"""bundle --split-arch at full size: the torch-shaped wheel on the ROCm 6.4 (sid) tree, split for
gfx942 and gfx1100; the host wheel plus the gfx1100 device wheel installed by pip from the folder
(--no-index) into a fresh venv of the sid root, the tree out of reach, and imported.

CI cost: members stored (-z 0); about 1.5 minutes on 2 cores."""

from __future__ import annotations

import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rocm_build.bundle.data import gfx_tokens
from tests.conftest import _test_cache
from tests.integration.modern.fullsize_wheel import LINKED, build_wheel

pytestmark = pytest.mark.slow

SMOKE = r"""
import os, sys, torch
maps = open("/proc/self/maps").read().split()
print("SMOKE", torch.linked, torch._C.device_status())
lib = os.path.join(os.path.dirname(torch.__file__), "lib")
print("DATA", len([f for d, _, fs in os.walk(lib) for f in fs if "gfx1100" in os.path.join(d, f)]))
print("\n".join(sorted({p for p in maps if "/torch/lib/lib" in p})))
"""


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)  # GBs: not kept with pytest's last runs


def test_split_arch_full_size_in_the_sid_root(
    sid_tree: Path, sid_root: Path, run_cli: Any, work: Path
) -> None:
    wheel = build_wheel(_test_cache(), sid_tree, sid_root)
    out = work / "index"
    res = run_cli(
        ["--json", "bundle", str(wheel), "--rocm", str(sid_tree), "--arch", "gfx942;gfx1100",
         "-z", "0", "--output-dir", str(out), "--split-arch",
         "--allow-missing-arch"],  # sid's rocBLAS, rocSPARSE, rocRAND: no gfx942 code
        cwd=work,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)
    host = Path(row["host"])
    devices = {t: Path(p) for t, p in row["devices"].items()}
    assert set(devices) == {"gfx942", "gfx1100"}
    assert row["moved"]["gfx1100"][1] > 100_000_000  # rocBLAS and hipBLASLt kernels for gfx1100
    with zipfile.ZipFile(host) as zf:
        names = zf.namelist()
        meta = zf.read("torch-2.9.0.dist-info/METADATA").decode()
    assert "torch/lib/librocblas.so.4" in names
    data = [n for n in names if n.startswith(("torch/lib/rocblas/", "torch/lib/hipblaslt/"))]
    assert data  # the target-neutral files
    assert not [n for n in data if gfx_tokens(n) & {"gfx942", "gfx1100"}]
    assert "Provides-Extra: device-gfx1100\n" in meta
    with zipfile.ZipFile(devices["gfx1100"]) as zf:
        kernels = [n for n in zf.namelist() if ".dist-info/" not in n]
    # where Debian's rocBLAS looks: its versioned folder beside the library
    assert any(n.startswith("torch/lib/rocblas/4.4.1/library/") for n in kernels)
    assert all("gfx1100" in gfx_tokens(n) for n in kernels)

    (work / "smoke.py").write_text(SMOKE)
    venv = work / "venv"
    script = (
        f"python3 -m venv {venv} && {venv}/bin/pip install -q --no-index --find-links {out}"
        f" 'torch[device-gfx1100]' && cd / && {venv}/bin/python {work}/smoke.py"
    )
    # the work folder is bound in; the tree is not
    ran = run_cli(["rocm", "run", str(sid_root), "--", "sh", "-c", script], cwd=work)
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.strip().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("SMOKE "))
    linked, status = (int(x) for x in lines[first].split()[1:])
    assert linked == len(LINKED)
    assert status == 100  # hipErrorNoDevice: HIP 6.4 loaded from the host wheel
    assert int(lines[first + 1].split()[1]) == len(kernels)
    loaded = lines[first + 2 :]
    assert any(p.endswith("/torch/lib/libamdhip64.so.6") for p in loaded), loaded
    assert any(p.endswith("/torch/lib/librocblas.so.4") for p in loaded), loaded
    assert not any(str(sid_tree) in p for p in loaded)
