"""A wheel's METADATA and WHEEL texts, read and edited in one place: read through the e-mail
header parser (the headers only, never the description), edited line by line in the headers.

Reading: :func:`metadata_name`, :func:`metadata_version`, :func:`requirements` (``Requires-Dist``
as written), :func:`parsed_requirements`. Editing: :func:`set_metadata_version`,
:func:`add_requirement`, :func:`add_extras`, :func:`set_wheel_tags`. New texts:
:func:`new_metadata`, :func:`new_wheel_info`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from email.message import Message
from email.parser import HeaderParser

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from rocm_build import __version__

__all__ = [
    "add_extras",
    "add_requirement",
    "consistent_version",
    "metadata_name",
    "metadata_version",
    "new_metadata",
    "new_wheel_info",
    "parsed_requirements",
    "requirements",
    "set_metadata_version",
    "set_wheel_tags",
]

log = logging.getLogger("rocm_build.wheel.wheelfile")

_REQUIRES = "Requires-Dist:"


def _headers(metadata: str) -> Message:
    return HeaderParser().parsestr(metadata)


def metadata_name(metadata: str) -> str:
    return _headers(metadata).get("Name", "")


def metadata_version(metadata: str) -> str:
    return _headers(metadata).get("Version", "")


def requirements(metadata: str) -> tuple[str, ...]:
    """The ``Requires-Dist`` values, as written."""
    return tuple(str(v) for v in _headers(metadata).get_all("Requires-Dist") or ())


def parsed_requirements(metadata: str) -> list[Requirement]:
    """The ``Requires-Dist`` values that are valid requirements (the others are passed over)."""
    out = []
    for value in requirements(metadata):
        try:
            out.append(Requirement(value))
        except InvalidRequirement:
            continue
    return out


def set_metadata_version(metadata: str, version: str) -> str:
    return re.sub(r"(?m)^Version: .*$", f"Version: {version}", metadata, count=1)


def _name_of(requirement: str) -> str:
    return canonicalize_name(re.split(r"[\s\[<>=!~;(]", requirement.strip(), maxsplit=1)[0])


def add_requirement(metadata: str, requirement: str) -> str:
    """Add ``Requires-Dist: requirement``, replacing any other requirement on the same name
    that has no marker (in place; else it goes after the last ``Requires-Dist``)."""
    req_name = _name_of(requirement)
    lines = metadata.split("\n")
    kept: list[str] = []
    insert_at = None
    in_headers = True
    for line in lines:
        if in_headers and line == "":
            in_headers = False
            if insert_at is None:
                insert_at = len(kept)
        if in_headers and line.startswith(_REQUIRES):
            value = line.split(":", 1)[1].strip()
            if _name_of(value) == req_name and ";" not in value:
                insert_at = len(kept) if insert_at is None else insert_at
                continue
            insert_at = len(kept) + 1
        kept.append(line)
    if insert_at is None:
        insert_at = len(kept)
    kept.insert(insert_at, f"{_REQUIRES} {requirement}")
    return "\n".join(kept)


def add_extras(metadata: str, extras: Mapping[str, str]) -> str:
    """METADATA with one ``Provides-Extra`` and its ``Requires-Dist`` per extra (extra ->
    requirement; replacing earlier ones of the same extra), placed at the end of the headers."""
    head, sep, body = metadata.partition("\n\n")
    lines = [
        line
        for line in head.rstrip("\n").split("\n")
        if not any(
            line == f"Provides-Extra: {extra}"
            or (line.startswith(_REQUIRES) and f"extra == '{extra}'" in line)
            or (line.startswith(_REQUIRES) and f'extra == "{extra}"' in line)
            for extra in extras
        )
    ]
    for extra, requirement in extras.items():
        lines.append(f"Provides-Extra: {extra}")
        lines.append(f'{_REQUIRES} {requirement}; extra == "{extra}"')
    return "\n".join(lines) + ("\n\n" + body if sep else "\n")


def new_metadata(
    name: str,
    version: str,
    summary: str,
    requires: Sequence[str] = (),
    extras: Sequence[str] = (),
) -> str:
    """The METADATA of a wheel rocm-build makes from nothing: headers only, no description."""
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {summary}",
        *(f"Provides-Extra: {e}" for e in extras),
        *(f"{_REQUIRES} {r}" for r in requires),
    ]
    return "\n".join(lines) + "\n"


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


def new_wheel_info(tags: Iterable[str], *, purelib: bool = False) -> str:
    """The WHEEL file of a wheel rocm-build makes from nothing."""
    lines = [
        "Wheel-Version: 1.0",
        f"Generator: rocm-build {__version__}",
        f"Root-Is-Purelib: {'true' if purelib else 'false'}",
        *(f"Tag: {t}" for t in tags),
    ]
    return "\n".join(lines) + "\n"


def consistent_version(file_version: str, metadata: str) -> str:
    """The version both file name and METADATA should carry (METADATA wins on local labels)."""
    meta = metadata_version(metadata)
    if not meta:
        return file_version
    if Version(meta) != Version(file_version.replace("_", "-")):
        log.info("version in METADATA (%s) and file name (%s) differ", meta, file_version)
    return meta
