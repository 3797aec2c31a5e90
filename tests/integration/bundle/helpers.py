"""Builders for real ELF files (gcc) and offload bundles in the documented clang formats."""

from __future__ import annotations

import hashlib
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path

import zstandard


def cc_shared(
    out: Path,
    source: str,
    *,
    soname: str | None = None,
    libs: Sequence[Path] = (),
    rpath: str | None = None,
    runpath: bool = False,
    extra: Sequence[str] = (),
) -> Path:
    """Compile ``source`` (C) into the shared library ``out`` with gcc."""
    out.parent.mkdir(parents=True, exist_ok=True)
    src = out.with_name(out.name.replace(".", "_") + ".c")
    src.write_text(source)
    cmd = ["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(src)]
    if soname:
        cmd.append(f"-Wl,-soname,{soname}")
    for lib in libs:
        cmd += [f"-L{lib.parent}", f"-l:{lib.name}"]
    if rpath is not None:
        cmd.append(f"-Wl,-rpath,{rpath}")
        cmd.append("-Wl,--enable-new-dtags" if runpath else "-Wl,--disable-new-dtags")
    cmd += list(extra)
    subprocess.run(cmd, check=True)
    src.unlink()
    return out


def versioned_lib(libdir: Path, stem: str, version: str, source: str, **kw: object) -> Path:
    """``lib<stem>.so.<version>`` with SONAME ``lib<stem>.so.<major>`` and both symlinks."""
    major = version.split(".")[0]
    real = libdir / f"lib{stem}.so.{version}"
    soname = f"lib{stem}.so.{major}"
    cc_shared(real, source, soname=soname, **kw)  # type: ignore[arg-type]
    for link in (libdir / soname, libdir / f"lib{stem}.so"):
        if link.name != real.name:
            link.unlink(missing_ok=True)
            link.symlink_to(real.name)
    return real


def make_bundle(entries: Sequence[tuple[str, bytes]]) -> bytes:
    """An uncompressed ``__CLANG_OFFLOAD_BUNDLE__`` with the given (id, code) entries."""
    header = bytearray(b"__CLANG_OFFLOAD_BUNDLE__")
    header += struct.pack("<Q", len(entries))
    table_len = sum(24 + len(i.encode()) for i, _ in entries)
    offset = len(header) + table_len
    body = bytearray()
    for bundle_id, code in entries:
        header += struct.pack("<QQQ", offset + len(body), len(code), len(bundle_id))
        header += bundle_id.encode()
        body += code
    return bytes(header + body)


def make_ccob(bundle: bytes, *, version: int = 3, method: str = "zstd") -> bytes:
    """A ``CCOB`` compressed bundle (clang's --offload-compress layout) around ``bundle``."""
    if method == "zstd":
        payload = zstandard.ZstdCompressor(level=3).compress(bundle)
        method_id = 1
    else:
        import zlib

        payload = zlib.compress(bundle)
        method_id = 0
    digest = hashlib.md5(bundle).digest()[:8]
    if version == 1:
        head = struct.pack("<4sHHI", b"CCOB", 1, method_id, len(bundle))
    elif version == 2:
        total = 24 + len(payload)
        head = struct.pack("<4sHHII", b"CCOB", 2, method_id, total, len(bundle))
    else:
        total = 32 + len(payload)
        head = struct.pack("<4sHHQQ", b"CCOB", 3, method_id, total, len(bundle))
    return head + digest + payload


def fatbin_source(bundles: Sequence[bytes], *, name: str = "fatbin") -> str:
    """C source placing each bundle, 4 KiB aligned, in a ``.hip_fatbin`` section."""
    parts = ["int fatbin_marker(void) { return 1; }"]
    for n, blob in enumerate(bundles):
        data = ",".join(str(b) for b in blob)
        parts.append(
            f'__attribute__((section(".hip_fatbin"), aligned(4096), used))\n'
            f"const unsigned char {name}_{n}[{len(blob)}] = {{{data}}};"
        )
    return "\n".join(parts) + "\n"


def device_code(seed: int, size: int = 3000) -> bytes:
    """Stand-in device code bytes (opaque to the bundle reader), including fake magics."""
    base = hashlib.sha256(str(seed).encode()).digest()
    return (base * (size // len(base) + 1))[:size] + b"CCOB" + b"__CLANG_OFFLOAD_BUNDLE"


def make_wheel(
    out_dir: Path,
    name: str,
    version: str,
    files: dict[str, bytes | Path],
    *,
    tag: str = "cp311-cp311-linux_x86_64",
    requires: Sequence[str] = (),
) -> Path:
    """A wheel as ``wheel``/setuptools lay it out (deflated members, RECORD with sha256)."""
    import base64
    import csv
    import io
    import zipfile

    dist_info = f"{name}-{version}.dist-info"
    members: dict[str, tuple[bytes, int]] = {}
    for arc, content in files.items():
        if isinstance(content, Path):
            members[arc] = (content.read_bytes(), content.stat().st_mode & 0o777)
        else:
            members[arc] = (content, 0o644)
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires)
    members[f"{dist_info}/METADATA"] = (meta.encode(), 0o644)
    members[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: {tag}\n".encode(),
        0o644,
    )
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for arc, (data, _mode) in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow([arc, f"sha256={digest}", len(data)])
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    members[f"{dist_info}/RECORD"] = (record.getvalue().encode(), 0o644)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, (data, mode) in members.items():
            info = zipfile.ZipInfo(arc, (2024, 1, 2, 3, 4, 6))
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return path
