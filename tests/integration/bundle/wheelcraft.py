"""Wheels crafted member by member with ``zipfile``, for the tests of hostile and broken input
wheels: exact members with a correct RECORD (``raw_wheel``), and members streamed from blocks so
that a bomb is never held (``streamed_wheel``)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import warnings
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

TAG = "cp311-cp311-linux_x86_64"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def raw_wheel(
    out_dir: Path,
    members: Sequence[tuple[str, bytes, int]],
    *,
    name: str = "evil",
    skip: Sequence[str] = (),
    record_override: dict[str, bytes] | None = None,
) -> Path:
    """A wheel holding exactly ``members`` (name, bytes, st_mode) plus METADATA, WHEEL, RECORD
    (unless named in ``skip``). RECORD is right unless ``record_override`` gives other bytes to
    hash for a member."""
    dist = f"{name}-1.0.dist-info"
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()
    wheel = f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: {TAG}\n".encode()
    all_members = [
        *members,
        (f"{dist}/METADATA", meta, 0o100644),
        (f"{dist}/WHEEL", wheel, 0o100644),
    ]
    all_members = [m for m in all_members if m[0].rsplit("/", 1)[-1] not in skip]
    record = io.StringIO()
    rows = csv.writer(record, lineterminator="\n")
    for arc, data, _mode in all_members:
        hashed = (record_override or {}).get(arc, data)
        rows.writerow([arc, _record_hash(hashed), len(hashed)])
    rows.writerow([f"{dist}/RECORD", "", ""])
    if "RECORD" not in skip:
        all_members.append((f"{dist}/RECORD", record.getvalue().encode(), 0o100644))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}-1.0-{TAG}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data, mode in all_members:
            info = zipfile.ZipInfo(arc, (2024, 1, 2, 3, 4, 6))
            info.external_attr = mode << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            with warnings.catch_warnings():  # "Duplicate name": the point of one case
                warnings.simplefilter("ignore", UserWarning)
                zf.writestr(info, data)
    return path


def _record_digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def streamed_wheel(
    out_dir: Path, blocks: dict[str, Iterable[bytes]], *, name: str = "bomb"
) -> Path:
    """A wheel with METADATA, WHEEL and RECORD whose members' bytes come from ``blocks`` (any
    of them may be replaced there: RECORD's blocks are written after the rows of the others)."""
    dist = f"{name}-1.0.dist-info"
    defaults: dict[str, Iterable[bytes]] = {
        f"{name}/__init__.py": [b""],
        f"{dist}/METADATA": [f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()],
        f"{dist}/WHEEL": [f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {TAG}\n".encode()],
    }
    members = {**defaults, **{k: v for k, v in blocks.items() if not k.endswith("RECORD")}}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}-1.0-{TAG}.whl"
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, parts in members.items():
            digest, size = hashlib.sha256(), 0
            info = zipfile.ZipInfo(arc, (2024, 1, 2, 3, 4, 6))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o100644 << 16
            with zf.open(info, "w", force_zip64=True) as fh:
                for part in parts:
                    digest.update(part)
                    size += len(part)
                    fh.write(part)
            writer.writerow([arc, _record_digest(digest.digest()), size])
        writer.writerow([f"{dist}/RECORD", "", ""])
        info = zipfile.ZipInfo(f"{dist}/RECORD", (2024, 1, 2, 3, 4, 6))
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as fh:
            fh.write(rows.getvalue().encode())
            for part in blocks.get(f"{dist}/RECORD", ()):
                fh.write(part)
    return path
