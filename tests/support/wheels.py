"""Small wheels made in place: a complete one holding given members (METADATA, WHEEL and a right
RECORD added), and a tiny pure one for tests that need a wheel file and not what is in it."""

from __future__ import annotations

import base64
import hashlib
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


def make_wheel(path: Path, members: dict[str, str] | dict[str, str | bytes]) -> Path:
    """A complete wheel (METADATA, WHEEL and a right RECORD added) holding ``members``."""
    name, version = path.name.split("-")[:2]
    dist_info = f"{name}-{version}.dist-info"
    files: dict[str, str | bytes] = {
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: false\n",
        **{k: v for k, v in members.items() if not k.endswith("/RECORD")},
    }
    rows = []
    for arc, text in files.items():
        data = text.encode() if isinstance(text, str) else text
        digest = hashlib.sha256(data).digest()
        b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        rows.append(f"{arc},sha256={b64},{len(data)}\n")
    files[f"{dist_info}/RECORD"] = "".join(rows) + f"{dist_info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, text in files.items():
            zf.writestr(arc, text)
    return path
