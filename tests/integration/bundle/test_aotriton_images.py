"""Flash attention's aotriton images (torch/lib/aotriton.images/amd-<family>/, as torch's build
installs them) are kept per requested target by the bundle: folders of families that serve no
requested target are left out of the fat wheel; ``amd-gfx11xx`` names a family by wildcard."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from .helpers import make_wheel
from .torchwheels import TORCH_INIT

pytestmark = pytest.mark.slow

IMAGES = "torch/lib/aotriton.images"
FAMILIES = ("amd-gfx90a", "amd-gfx942", "amd-gfx11xx", "amd-gfx120x")


@pytest.fixture
def torch_with_images(hip_ext_so: Path, tmp_path: Path) -> Path:
    members: dict[str, bytes | Path] = {
        "torch/__init__.py": TORCH_INIT.encode(),
        "torch/lib/libtorch_hip.so": hip_ext_so,  # device code for gfx90a and gfx1030
    }
    for family in FAMILIES:
        members[f"{IMAGES}/{family}/flash/attn_fwd/FONLY__fp16.aks2"] = family.encode() * 64
    return make_wheel(tmp_path / "dist", "torch", "2.9.0", members)


def _bundle(run_cli, wheel: Path, tree: Path, out: Path, arch: str):  # type: ignore[no-untyped-def]
    return run_cli(
        ["--json", "bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out),
         "-z", "1", "--arch", arch, "--allow-missing-arch"],
        cwd=wheel.parent,
        env={"ROCM_BUILD_BUNDLE_DLOPEN_LIBS": "libhiprtc-builtins.so*"},
    )  # fmt: skip


def _families(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return {n.split("/")[3] for n in zf.namelist() if n.startswith(IMAGES + "/")}


@pytest.mark.parametrize(
    ("arch", "kept"),
    [
        ("gfx90a", {"amd-gfx90a"}),
        ("gfx90a;gfx1100", {"amd-gfx90a", "amd-gfx11xx"}),
        ("gfx942;gfx1201", {"amd-gfx942", "amd-gfx120x"}),
    ],
)
def test_images_of_families_without_a_requested_target_are_left_out(  # type: ignore[no-untyped-def]
    run_cli, torch_with_images: Path, tree_copy: Path, tmp_path: Path, arch: str, kept: set[str]
) -> None:
    out = tmp_path / "out"
    res = _bundle(run_cli, torch_with_images, tree_copy, out, arch)
    assert res.returncode == 0, res.stderr
    (fat,) = out.glob("torch-*.whl")
    assert _families(fat) == kept
    (entry,) = json.loads(res.stdout)
    assert sorted(entry["plan"]["aotriton_images_dropped"]) == sorted(set(FAMILIES) - kept)
