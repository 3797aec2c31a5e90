"""The one way a digest or a file's stat facts are taken: a whole file's sha256, the digest of
settings (what decides an output: a different value makes it stale), and the (path, size,
mtime) facts that tell whether a file an output was made from has changed since."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["facts_unchanged", "file_facts", "file_sha256", "settings_digest"]


def file_sha256(path: Path) -> str:
    """The sha256 of the file's bytes, hex."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def settings_digest(settings: Any) -> str:
    """The sha256 (hex) of ``settings`` as JSON with sorted keys (``str()`` for what JSON has no
    type for): the same for the same values in any order."""
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def file_facts(path: Path) -> list[Any]:
    """``[path, size, mtime_ns]``: what :func:`facts_unchanged` compares."""
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns]


def facts_unchanged(facts: Sequence[Sequence[Any]]) -> bool:
    """Whether the files these :func:`file_facts` name are as they were (a gone file is not)."""
    try:
        entries = [(Path(path), size, mtime) for path, size, mtime in facts]
    except (TypeError, ValueError):  # a record of other shapes (crafted): not these files
        return False
    for path, size, mtime in entries:
        try:
            st = path.stat()
        except OSError:
            return False
        if st.st_size != size or st.st_mtime_ns != mtime:
            return False
    return True
