"""Small wheels made in place for tests that need a wheel file and not what is in it."""

from __future__ import annotations

import zipfile
from pathlib import Path


def tiny_wheel(folder: Path) -> Path:
    path = folder / "tiny-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tiny/__init__.py", "")
        zf.writestr(
            "tiny-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: tiny\nVersion: 1.0\n"
        )
        zf.writestr(
            "tiny-1.0.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        zf.writestr(
            "tiny-1.0.dist-info/RECORD",
            "".join(f"{i.filename},,\n" for i in zf.infolist()) + "tiny-1.0.dist-info/RECORD,,\n",
        )
    return path
