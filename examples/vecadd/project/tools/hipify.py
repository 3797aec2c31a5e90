"""Hipify this project's CUDA sources in place: csrc/*.cu -> csrc/*.hip.

Uses the hipify that ships inside the PyTorch wheels (``torch.utils.hipify.hipify_python``); it
imports only the standard library, so a full torch install is not needed. It is found, in order:
  1. importable as ``torch.utils.hipify`` (torch installed in this interpreter);
  2. in the folder named by ``TORCH_HIPIFY_PATH``, which holds ``torch/utils/hipify/*.py`` (the
     files extracted from a torch wheel; ``python tools/fetch_hipify.py DEST`` makes one).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    extra = os.environ.get("TORCH_HIPIFY_PATH")
    if extra:
        sys.path.insert(0, extra)
    try:
        from torch.utils.hipify import hipify_python
    except ImportError:
        print(
            "hipify: torch.utils.hipify not found; install torch, or set TORCH_HIPIFY_PATH to a "
            "folder made by 'python tools/fetch_hipify.py DEST'",
            file=sys.stderr,
        )
        return 2
    results = hipify_python.hipify(
        project_directory=str(ROOT),
        output_directory=str(ROOT),
        includes=[str(ROOT / "csrc" / "*")],
        is_pytorch_extension=True,
        hip_clang_launch=True,
        show_progress=False,
    )
    done = sorted(
        os.path.relpath(r.hipified_path, ROOT) for r in results.values() if r.hipified_path
    )
    print(f"hipify: {len(done)} files: {', '.join(done)}")
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
