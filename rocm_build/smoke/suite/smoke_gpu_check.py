"""``python smoke_gpu_check.py --result FILE GFX``: exercise every visible device (all of one gfx
target) in a fresh process, so each target's code objects are loaded and run on their own. The
result goes to FILE as JSON (stdout belongs to the packages, which may print)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def main(gfx: str) -> dict[str, object]:
    count = torch.cuda.device_count()
    assert count > 0, "no device visible"
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(128, 128, generator=gen)
    x = torch.randn(1, 3, 16, 16, generator=gen)
    w = torch.randn(4, 3, 3, 3, generator=gen)
    for i in range(count):
        dev = torch.device("cuda", i)
        arch = torch.cuda.get_device_properties(i).gcnArchName.split(":")[0]
        assert arch == gfx, f"device {i} is {arch}, expected {gfx}"
        torch.testing.assert_close((a.to(dev) @ a.to(dev)).cpu(), a @ a, rtol=1e-4, atol=1e-4)
        conv = torch.nn.functional.conv2d(x.to(dev), w.to(dev)).cpu()
        torch.testing.assert_close(conv, torch.nn.functional.conv2d(x, w), rtol=1e-3, atol=1e-3)
        torch.cuda.synchronize(dev)
    return {"gfx": gfx, "devices": count}


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--result"]:
        out = Path(args[1])
        tmp = out.with_name(out.name + ".tmp")
        tmp.write_text(json.dumps(main(args[2])), encoding="utf-8")
        tmp.replace(out)
    else:
        json.dump(main(args[0]), sys.stdout)
