"""Flash attention end to end in the build: triton and the fixture torch built in one run for a
target with aotriton kernels, with a pre-fetched aotriton (a real tiny library standing in for
libaotriton_v2 by name, and image folders for two families). The fixture torch installs them into
torch/lib as torch's build does, and inspect reads from the wheel what it was built with."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import Workspace, add_triton, shared_lib

pytestmark = pytest.mark.slow


def test_a_flash_attention_build_says_so_in_its_wheel(workspace: Workspace, tmp_path: Path) -> None:
    add_triton(workspace, tmp_path)
    cache = tmp_path / "xdg-cache"
    prefix = cache / "rocm-build" / "aotriton" / "rocm5.2.3"
    shared_lib(prefix / "lib" / "libaotriton_v2.so.0.9", "libaotriton_v2.so.0")
    for family in ("amd-gfx90a", "amd-gfx942"):
        image = prefix / "lib" / "aotriton.images" / family / "flash" / "attn_fwd.aks2"
        image.parent.mkdir(parents=True)
        image.write_bytes(family.encode() * 16)
    res = workspace.build("triton", "torch", env={"XDG_CACHE_HOME": str(cache)})
    assert res.returncode == 0, res.stderr
    wheel = workspace.wheel("torch")
    got = workspace.run_cli(["--json", "inspect", str(wheel)], cwd=workspace.root)
    assert got.returncode == 0, got.stderr
    features = json.loads(got.stdout)["build_features"]
    assert features["flash_attention"] is True  # auto: Triton in the run, gfx90a requested
    assert features["aotriton"] == ["libaotriton_v2.so.0.9"]
    assert features["aotriton_images"] == ["amd-gfx90a", "amd-gfx942"]
    assert features["gpu_asserts"] is False  # torch's default on ROCm
