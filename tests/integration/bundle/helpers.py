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
