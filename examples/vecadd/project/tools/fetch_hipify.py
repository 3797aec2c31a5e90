"""``python tools/fetch_hipify.py DEST``: put PyTorch's hipify into DEST for tools/hipify.py.

Downloads one torch wheel (``pip download torch==VERSION --no-deps``) into a temporary folder
inside DEST, extracts only ``torch/utils/hipify/*.py`` from it and deletes the wheel: DEST keeps
the hipify files alone (about 0.3 MB), never the wheel. They form a namespace package (no
torch/__init__.py), so importing it does not import torch. Then ``TORCH_HIPIFY_PATH=DEST`` makes
hipify work. A run that finds them in DEST downloads nothing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

MEMBER_PREFIX = "torch/utils/hipify/"


def _download(version: str, into: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-cache-dir",  # pip's own cache would keep the whole wheel
            "--only-binary",
            ":all:",
            "-d",
            str(into),
            f"torch=={version}",
        ],
        check=True,
    )
    return sorted(into.glob(f"torch-{version}*.whl"))[0]


def _drop_old_wheels(dest: Path) -> None:
    """Earlier versions of this script kept the wheel in DEST/wheels: remove those wheels."""
    wheels = dest / "wheels"
    if not wheels.is_dir() or wheels.is_symlink():
        return
    for whl in wheels.glob("torch-*.whl"):
        whl.unlink()
        print(f"fetch_hipify: removed {whl} (only hipify's files are kept)")
    if not any(wheels.iterdir()):
        wheels.rmdir()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--torch-version", default="2.13.0")
    args = parser.parse_args()
    dest = args.dest.resolve()
    dest.mkdir(parents=True, exist_ok=True)
    _drop_old_wheels(dest)
    if (dest / MEMBER_PREFIX / "hipify_python.py").is_file():
        print(f"fetch_hipify: already in {dest}")
        return 0
    # One temporary folder for the wheel and the extracted files, removed whatever happens.
    tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=dest))
    try:
        wheel = _download(args.torch_version, tmp / "wheel")
        with zipfile.ZipFile(wheel) as zf:
            members = [
                m for m in zf.namelist() if m.startswith(MEMBER_PREFIX) and m.endswith(".py")
            ]
            zf.extractall(tmp / "extract", members=members)
        shutil.copytree(tmp / "extract" / "torch", dest / "torch", dirs_exist_ok=True)
    finally:
        shutil.rmtree(tmp)
    print(f"fetch_hipify: {len(members)} files from {wheel.name} in {dest} (the wheel deleted)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
