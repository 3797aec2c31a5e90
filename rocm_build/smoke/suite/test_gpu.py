"""GPU checks (torch): each test is skipped, with its reason, when there is no GPU.

Tolerances, against the CPU result in float32:
  matmul fp32 rtol=1e-4 atol=1e-4 (plain FMA accumulation; TF32 stays off by default)
  conv2d fp32 rtol=1e-3 atol=1e-3 (MIOpen may pick Winograd/FFT algorithms)
  matmul fp16 rtol=1e-2 atol=1e-2, bf16 rtol=5e-2 atol=5e-2 (inputs rounded to the type)
  SDPA fp32 rtol=1e-3 atol=1e-3, fp16 rtol=2e-2 atol=2e-2
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import smoke_support as sup
from smoke_support import SmokeConfig

pytestmark = pytest.mark.gpu

if "torch" not in sup.current().packages:
    pytest.skip("the GPU checks use torch, which is not under test", allow_module_level=True)

CHECK_SCRIPT = Path(__file__).resolve().parent / "smoke_gpu_check.py"


@pytest.fixture(scope="module")
def torch(smoke: SmokeConfig) -> Any:
    try:
        import torch
    except ImportError as exc:
        pytest.skip(f"torch does not import here ({exc}); see test_generic")
    if not torch.cuda.is_available():
        pytest.skip("no GPU visible (torch.cuda.is_available() is False)")
    count = torch.cuda.device_count()
    for index in range(count):
        props = torch.cuda.get_device_properties(index)
        smoke.facts["devices"].append(
            {
                "index": index,
                "name": props.name,
                "gfx": getattr(props, "gcnArchName", "?"),
                "memory_gib": props.total_memory / 2**30,
                "compute_units": props.multi_processor_count,
            }
        )
    return torch


def _devices(torch: Any) -> list[Any]:
    return [torch.device("cuda", i) for i in range(torch.cuda.device_count())]


def test_device_count_respects_visibility_filter(torch: Any) -> None:
    filt = sup.visible_device_filter()
    count = torch.cuda.device_count()
    assert count > 0
    if filt is not None:
        name, entries = filt
        assert count <= len(entries), f"{name}={','.join(entries)} but {count} devices visible"


def test_tensor_on_every_device(torch: Any) -> None:
    for dev in _devices(torch):
        t = torch.arange(10, device=dev, dtype=torch.float32)
        assert t.sum().item() == 45.0, dev


def test_matmul_matches_cpu(torch: Any) -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(256, 128, generator=gen)
    b = torch.randn(128, 64, generator=gen)
    want = a @ b
    for dev in _devices(torch):
        got = (a.to(dev) @ b.to(dev)).cpu()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_conv2d_matches_cpu(torch: Any) -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 32, 32, generator=gen)
    w = torch.randn(8, 3, 3, 3, generator=gen)
    want = torch.nn.functional.conv2d(x, w, padding=1)
    for dev in _devices(torch):
        got = torch.nn.functional.conv2d(x.to(dev), w.to(dev), padding=1).cpu()
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(("dtype_name", "tol"), [("float16", 1e-2), ("bfloat16", 5e-2)])
def test_half_precision_matmul(torch: Any, dtype_name: str, tol: float) -> None:
    dtype = getattr(torch, dtype_name)
    if dtype_name == "bfloat16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU does not support bfloat16")
    gen = torch.Generator().manual_seed(2)
    a = torch.randn(64, 64, generator=gen).to(dtype)
    b = torch.randn(64, 64, generator=gen).to(dtype)
    want = a.float() @ b.float()
    for dev in _devices(torch):
        got = (a.to(dev) @ b.to(dev)).float().cpu()
        torch.testing.assert_close(got, want, rtol=tol, atol=tol * 8)


@pytest.mark.parametrize(("dtype_name", "tol"), [("float32", 1e-3), ("float16", 2e-2)])
def test_scaled_dot_product_attention(torch: Any, dtype_name: str, tol: float) -> None:
    dtype = getattr(torch, dtype_name)
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 4, 16, 32, generator=gen) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    for dev in _devices(torch):
        got = torch.nn.functional.scaled_dot_product_attention(
            q.to(dev, dtype), k.to(dev, dtype), v.to(dev, dtype)
        )
        torch.testing.assert_close(got.float().cpu(), want, rtol=tol, atol=tol)


def test_nms_on_gpu(torch: Any, smoke: SmokeConfig) -> None:
    if "torchvision" not in smoke.packages:
        pytest.skip("torchvision is not under test")
    import torchvision

    gen = torch.Generator().manual_seed(4)
    xy = torch.rand(200, 2, generator=gen) * 100
    boxes = torch.cat([xy, xy + torch.rand(200, 2, generator=gen) * 20 + 1], dim=1)
    scores = torch.rand(200, generator=gen)
    want = torchvision.ops.nms(boxes, scores, 0.5)
    for dev in _devices(torch):
        got = torchvision.ops.nms(boxes.to(dev), scores.to(dev), 0.5).cpu()
        assert got.tolist() == want.tolist(), dev


def test_each_gfx_target_in_its_own_process(torch: Any, tmp_path: Path) -> None:
    by_target: dict[str, list[int]] = {}
    for i in range(torch.cuda.device_count()):
        gfx = getattr(torch.cuda.get_device_properties(i), "gcnArchName", "?").split(":")[0]
        by_target.setdefault(gfx, []).append(i)
    filt = sup.visible_device_filter()
    failures = []
    for gfx, indices in sorted(by_target.items()):
        env = dict(os.environ)
        # Renumber through the filter already in force: index i is its i-th entry.
        physical = [filt[1][i] for i in indices] if filt else [str(i) for i in indices]
        env.pop("CUDA_VISIBLE_DEVICES", None)
        env["HIP_VISIBLE_DEVICES"] = ",".join(physical)
        # The result has a file of its own: stdout belongs to torch, which may print.
        out = tmp_path / f"{gfx}.json"
        proc = subprocess.run(
            [sys.executable, str(CHECK_SCRIPT), "--result", str(out), gfx],
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        if proc.returncode != 0:
            failures.append(f"{gfx} (devices {','.join(physical)}):\n{proc.stderr[-2000:]}")
        elif not out.is_file():
            failures.append(f"{gfx}: the check ended without a result:\n{proc.stdout[-2000:]}")
        else:
            result = json.loads(out.read_text(encoding="utf-8"))
            assert result["gfx"] == gfx
    assert not failures, "per-target checks failed:\n" + "\n".join(failures)


def test_torch_compile_on_device(torch: Any, smoke: SmokeConfig) -> None:
    if "triton" not in smoke.packages:
        pytest.skip("torch.compile's GPU code is Triton's, and triton is not under test")

    def f(x: Any, y: Any) -> Any:
        return torch.sin(x) * y + torch.cos(y)

    compiled = torch.compile(f)
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(1024, generator=gen), torch.randn(1024, generator=gen)
    want = f(x, y)
    for dev in _devices(torch):
        got = compiled(x.to(dev), y.to(dev)).cpu()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_sdpa_flash_backend(torch: Any, smoke: SmokeConfig) -> None:
    if smoke.flash_attention is False:
        pytest.skip("torch was built without flash attention (--flash-attention off)")
    if not torch.backends.cuda.is_flash_attention_available():
        if smoke.flash_attention:
            pytest.fail("built with flash attention, but torch says it is not available")
        pytest.skip("this torch has no flash attention")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    gen = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, 4, 64, 64, generator=gen) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    for dev in _devices(torch):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            got = torch.nn.functional.scaled_dot_product_attention(
                q.to(dev, torch.float16), k.to(dev, torch.float16), v.to(dev, torch.float16)
            )
        torch.testing.assert_close(got.float().cpu(), want, rtol=2e-2, atol=2e-2)
