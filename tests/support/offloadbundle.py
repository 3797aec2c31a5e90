"""Clang offload bundles made byte by byte, for the readers of ``.hip_fatbin`` sections."""

from __future__ import annotations

import struct

#: What every uncompressed clang offload bundle starts with.
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"


def offload_bundle(ids: list[str]) -> bytes:
    """An uncompressed clang offload bundle with empty payloads."""
    header = BUNDLE_MAGIC + struct.pack("<Q", len(ids))
    entries_size = sum(24 + len(i) for i in ids)
    body = b""
    offset = len(header) + entries_size
    for bundle_id in ids:
        body += struct.pack("<QQQ", offset, 8, len(bundle_id)) + bundle_id.encode()
    payload = b"\0" * 8 * len(ids)
    return header + body + payload
