"""The writer deflates members on its pool while the next ones are read: members of every size
(empty, one piece, exactly one piece, several pieces) still land whole, in the order added."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

from rocm_build.wheel.wheelfile import DEFLATE_CHUNK, WheelReader, WheelWriter

DIST = "demo-1.0.dist-info"


def _data(size: int, seed: int) -> bytes:
    block = b"".join(hashlib.sha256(f"{seed}-{i}".encode()).digest() for i in range(64)) * 8
    return (block * (size // len(block) + 1))[:size]


def test_members_of_every_size_in_order(tmp_path: Path) -> None:
    sizes = [0, 1, 5000, DEFLATE_CHUNK, DEFLATE_CHUNK + 1, 3 * DEFLATE_CHUNK - 7, 10, 0, 70_000]
    files = {}
    for n, size in enumerate(sizes):
        path = tmp_path / f"f{n}"
        path.write_bytes(_data(size, n))
        files[f"demo/f{n}"] = path
    out = tmp_path / "out" / "demo-1.0-py3-none-any.whl"
    with WheelWriter(out, DIST, workers=2) as writer:
        for n, (arc, path) in enumerate(files.items()):
            if n % 3 == 0:
                writer.add_bytes(arc, path.read_bytes())
            else:
                writer.add_file(arc, path, 0o644)
        writer.add_bytes(f"{DIST}/METADATA", b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
        writer.add_bytes(f"{DIST}/WHEEL", b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
        writer.commit()
    with zipfile.ZipFile(out) as zf:
        assert zf.testzip() is None
        names = zf.namelist()
        assert names[: len(files)] == list(files)
        offsets = [zf.getinfo(n).header_offset for n in names]
        assert offsets == sorted(offsets)
        for arc, path in files.items():
            assert zf.read(arc) == path.read_bytes()
    with WheelReader(out) as reader:
        reader.verify_all()
