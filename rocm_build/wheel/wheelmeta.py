"""Edits of a wheel's METADATA and WHEEL texts (re-exported by :mod:`.wheelfile`)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from email.parser import HeaderParser

from packaging.utils import canonicalize_name
from packaging.version import Version

log = logging.getLogger("rocm_build.wheel.wheelfile")


def metadata_version(metadata: str) -> str:
    return HeaderParser().parsestr(metadata).get("Version", "")


def set_metadata_version(metadata: str, version: str) -> str:
    return re.sub(r"(?m)^Version: .*$", f"Version: {version}", metadata, count=1)


def add_requirement(metadata: str, requirement: str) -> str:
    """Add ``Requires-Dist: requirement``, replacing any other requirement on the same name."""
    req_name = canonicalize_name(re.split(r"[\s\[<>=!~;(]", requirement, maxsplit=1)[0])
    lines = metadata.split("\n")
    kept: list[str] = []
    insert_at = None
    in_headers = True
    for line in lines:
        if in_headers and line == "":
            in_headers = False
            if insert_at is None:
                insert_at = len(kept)
        if in_headers and line.startswith("Requires-Dist:"):
            value = line.split(":", 1)[1].strip()
            name = canonicalize_name(re.split(r"[\s\[<>=!~;(]", value, maxsplit=1)[0])
            if name == req_name and ";" not in value:
                insert_at = len(kept) if insert_at is None else insert_at
                continue
            insert_at = len(kept) + 1
        kept.append(line)
    if insert_at is None:
        insert_at = len(kept)
    kept.insert(insert_at, f"Requires-Dist: {requirement}")
    return "\n".join(kept)


def set_wheel_tags(wheel_info: str, tags: Iterable[str]) -> str:
    """Replace the ``Tag:`` lines of a WHEEL file (and say the wheel is not pure)."""
    lines = [
        line
        for line in wheel_info.splitlines()
        if not line.startswith("Tag:") and not line.startswith("Root-Is-Purelib:")
    ]
    while lines and not lines[-1]:
        lines.pop()
    lines.append("Root-Is-Purelib: false")
    lines += [f"Tag: {t}" for t in tags]
    return "\n".join(lines) + "\n"


def consistent_version(file_version: str, metadata: str) -> str:
    """The version both file name and METADATA should carry (METADATA wins on local labels)."""
    meta = metadata_version(metadata)
    if not meta:
        return file_version
    if Version(meta) != Version(file_version.replace("_", "-")):
        log.info("version in METADATA (%s) and file name (%s) differ", meta, file_version)
    return meta
