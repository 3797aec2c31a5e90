"""PyTorch, torchvision and torchaudio checks that need no GPU.

Skipped as a whole, with the reason, when torch is not among the packages under test.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import smoke_support as sup
from smoke_support import SmokeConfig

if "torch" not in sup.current().packages:
    pytest.skip(
        f"torch is not under test (packages: {', '.join(sup.current().packages) or 'none'})",
        allow_module_level=True,
    )


def _base(target: str) -> str:
    return target.split(":", 1)[0]


def test_torch_is_a_rocm_build(smoke: SmokeConfig) -> None:
    facts = sup.imported(smoke, "torch")["torch"]
    assert facts["hip"], (
        f"torch.version.hip is not set: torch {facts['version']} is not a ROCm build"
    )


def test_arch_flags_equal_requested_targets(smoke: SmokeConfig) -> None:
    if not smoke.targets:
        pytest.skip("no requested targets given (--rocm-arch / SMOKE_ARCH)")
    facts = sup.imported(smoke, "torch")["torch"]
    flags = facts["arch_flags"]
    assert flags is not None, "torch._C._cuda_getArchFlags is missing: not a GPU build of torch"
    compiled = sorted({_base(f) for f in flags})
    assert compiled == sorted(set(smoke.targets)), (
        f"torch was compiled for {';'.join(compiled) or 'nothing'}, "
        f"requested {';'.join(sorted(smoke.targets))}"
    )
    # get_arch_list() is empty without a GPU (it checks is_available() first).
    if facts["cuda_available"]:
        listed = sorted({_base(a) for a in facts["arch_list"]})
        assert listed == compiled, f"torch.cuda.get_arch_list() says {listed}"


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=600
    )


def test_torchvision_nms_is_registered(smoke: SmokeConfig) -> None:
    if "torchvision" not in smoke.packages:
        pytest.skip("torchvision is not under test")
    sup.imported(smoke, "torch", "torchvision")
    code = (
        "import torch, torchvision\n"
        "assert hasattr(torch.ops.torchvision, 'nms'), 'torchvision::nms is not registered'\n"
        "boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]], "
        "dtype=torch.float32)\n"
        "scores = torch.tensor([0.9, 0.8, 0.7])\n"
        "keep = torchvision.ops.nms(boxes, scores, 0.5)\n"
        "assert keep.tolist() == [0, 2], keep.tolist()\n"
    )
    proc = _run(code)
    assert proc.returncode == 0, proc.stderr[-3000:]


def _torch_library_dirs(maps: list[str]) -> set[str]:
    names = ("libtorch", "libc10", "libtorch_hip", "libc10_hip")
    return {
        str(Path(p).parent)
        for p in maps
        if Path(p).name.startswith(names) and ".so" in Path(p).name
    }


@pytest.mark.parametrize("extension", ["torchvision", "torchaudio"])
def test_extension_uses_the_same_torch(smoke: SmokeConfig, extension: str) -> None:
    if extension not in smoke.packages:
        pytest.skip(f"{extension} is not under test")
    alone = sup.imported(smoke, "torch")
    both = sup.imported(smoke, "torch", extension)
    dirs = _torch_library_dirs(both["maps"])
    assert dirs == _torch_library_dirs(alone["maps"]), (
        f"import {extension} loaded torch libraries from {sorted(dirs)}"
    )
    assert Path(both["imported"]["torch"]).parent == Path(alone["imported"]["torch"]).parent
    rocm_outside = [p for p in both["maps"] if sup.is_rocm_library(p) and not smoke.in_site(p)]
    assert not rocm_outside, f"{extension} pulled ROCm libraries from outside: {rocm_outside}"
