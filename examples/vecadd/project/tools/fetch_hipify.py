"""``python tools/fetch_hipify.py DEST``: put PyTorch's hipify into DEST for tools/hipify.py.

Downloads one torch wheel (``pip download torch==VERSION --no-deps``, kept in DEST/wheels) and
extracts only ``torch/utils/hipify/*.py`` from it: a namespace package (no torch/__init__.py),
so importing it does not import torch. Then ``TORCH_HIPIFY_PATH=DEST`` makes hipify work.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import zipfile
from pathlib import Path

MEMBER_PREFIX = "torch/utils/hipify/"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--torch-version", default="2.13.0")
    args = parser.parse_args()
    dest = args.dest.resolve()
    if (dest / MEMBER_PREFIX / "hipify_python.py").is_file():
        print(f"fetch_hipify: already in {dest}")
        return 0
    wheels = dest / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob(f"torch-{args.torch_version}*.whl"))
    if not found:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary",
                ":all:",
                "-d",
                str(wheels),
                f"torch=={args.torch_version}",
            ],
            check=True,
        )
        found = sorted(wheels.glob(f"torch-{args.torch_version}*.whl"))
    tmp = dest / ".extract"
    with zipfile.ZipFile(found[0]) as zf:
        members = [m for m in zf.namelist() if m.startswith(MEMBER_PREFIX) and m.endswith(".py")]
        zf.extractall(tmp, members=members)
    target = dest / "torch"
    (tmp / "torch").replace(target)
    tmp.rmdir()
    print(f"fetch_hipify: {len(members)} files from {found[0].name} in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
