"""What one setting may hold: ``Setting`` (its type, range or choices, shape and one line of
help), ``Switch`` (a switch that may be left unset), :func:`setting` (a section field with its
built-in default and whether it changes a stage's output), the shape checks of names, tags and
markers, and ``coerce`` (a raw value as a kind). The sections themselves are in :mod:`.schema`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement


@dataclass(frozen=True)
class Setting:
    """What one setting may hold: its type, its range or choices, and one line of help.

    The one table of constraints: the config file, the environment and the command-line flags
    are all checked against it, before any work starts."""

    kind: type
    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    #: A check of the value's shape beyond its type: what is wrong with it, "" when nothing.
    shape: Callable[[Any], str] | None = None

    def allowed(self) -> str:
        """What the setting accepts, as the error message and ``--help`` say it."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is Switch:
            return 'true, false or "" (the default)'
        name = "list of str" if self.kind is list else self.kind.__name__
        if self.min is not None and self.max is not None:
            return f"{name} ({_num(self.min)} to {_num(self.max)})"
        if self.min is not None:
            return f"{name} (>= {_num(self.min)})"
        if self.max is not None:
            return f"{name} (<= {_num(self.max)})"
        return name

    @property
    def ranged(self) -> bool:
        return self.min is not None or self.max is not None or bool(self.choices)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class Switch:
    """The kind of a switch that may be left unset: ``True``, ``False`` or ``None`` (not set:
    the project's own default applies). ``""`` and ``default`` read as unset."""


def setting(
    kind: type,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: tuple[str, ...] = (),
    shape: Callable[[Any], str] | None = None,
    output: bool = False,
    default: Any,
) -> Any:
    """A section field: its value comes from ``load``; its type, range, help and built-in
    ``default`` live here, the one place for each (a list's default is a tuple, a switch's
    unset one None). ``output``: the setting changes what the stage writes, so every
    fingerprint of its outputs takes it in (:func:`output_settings`): declared here, once."""
    spec = Setting(kind, help, min, max, choices, shape)
    return field(default=default, metadata={"setting": spec, "output": output})


def output_settings(section: Any) -> dict[str, Any]:
    """The settings of a section (an instance of one of :data:`SECTIONS`' classes) marked
    ``output``, by name: what a fingerprint of the stage's outputs takes in."""
    return {f.name: getattr(section, f.name) for f in fields(section) if f.metadata.get("output")}


#: A distribution name (PEP 508): what a ``Requires-Dist`` line and a wheel's name may hold.
_DIST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")


def distribution_name(value: str) -> str:
    """What makes ``value`` no distribution name (PEP 508), or ""."""
    if _DIST_NAME.fullmatch(value) and len(value) <= 100:
        return ""
    return "must be a distribution name (letters, digits, '.', '_' and '-', at most 100)"


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def plain_name(value: str) -> str:
    """What makes ``value`` no plain name, one folder name of its own (a project, a patch
    series), or "": letters, digits, '-', '_' and '.', not leading, at most 100."""
    if _PLAIN_NAME.fullmatch(value) and len(value) <= 100:
        return ""
    return (
        "must be a plain name (letters, digits, '-', '_' and '.', not leading with '.'; "
        "no '/'), at most 100"
    )


_MANYLINUX = re.compile(
    r"(manylinux1|manylinux2010|manylinux2014|manylinux_2_\d+)"
    r"(_(x86_64|aarch64|ppc64le|s390x|armv7l|i686))?"
)


def manylinux_tag(value: str) -> str:
    """What makes ``value`` neither auto nor a manylinux tag (``manylinux_2_28_x86_64``,
    ``manylinux_2_28``, ``manylinux2014``), or ""."""
    if value in ("auto", "") or _MANYLINUX.fullmatch(value):
        return ""
    return "must be auto or a manylinux tag such as manylinux_2_28_x86_64 or manylinux2014"


def requirement_marker(value: str) -> str:
    """What makes ``value`` no environment marker for one requirement line of a wheel's
    METADATA (and one ``|``-separated entry of ``PYTORCH_EXTRA_INSTALL_REQUIREMENTS``), or ""
    (an empty marker is none)."""
    if not value:
        return ""
    if "|" in value or not value.isprintable():
        return "must be one environment marker, without '|' or control characters"
    try:
        marker = Marker(value)
        Requirement(f"triton==1.0; {marker}")
    except (InvalidMarker, InvalidRequirement) as exc:
        first = str(exc).splitlines()[0] if str(exc) else "not a marker"
        return f"must be a PEP 508 environment marker ({first})"
    return ""


INVALID: Any = object()


def coerce(raw: Any, kind: type) -> Any:
    """``raw`` as ``kind``; strings (the environment, flags) are parsed. ``INVALID`` if it is
    not one: a float where an int is wanted is refused, not truncated."""
    if kind is Switch:
        if raw is None or isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("", "default"):
            return None
        return coerce(text, bool)
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        return INVALID
    if isinstance(raw, bool):
        return INVALID
    if kind is int:
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            try:
                return int(raw.strip())
            except ValueError:
                return INVALID
        return INVALID
    if kind is float:
        if isinstance(raw, (int, float)):
            value = float(raw)
        elif isinstance(raw, str):
            try:
                value = float(raw.strip())
            except ValueError:
                return INVALID
        else:
            return INVALID
        return value if math.isfinite(value) else INVALID
    if kind is list:
        if isinstance(raw, str):
            return [p.strip() for p in raw.replace(";", ",").split(",") if p.strip()]
        if isinstance(raw, (list, tuple)):
            return [str(x) for x in raw]
        return INVALID
    if kind is str:
        if isinstance(raw, (list, tuple)):
            return ";".join(str(x) for x in raw)
        if isinstance(raw, (str, int, float, Path)):
            return str(raw)
        return INVALID
    return INVALID
