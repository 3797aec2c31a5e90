"""A settings section with one more setting, for the tests that show a fingerprint follows the
schema's ``output`` marks with no other edit."""

from __future__ import annotations

from dataclasses import field, fields, make_dataclass
from typing import Any


def with_extra_setting(base: Any, *, output: bool, value: int) -> Any:
    """``base`` (an instance of a section class) with one more setting, ``extra``, marked
    ``output`` or not, set to ``value``."""
    section = type(base)
    extended = make_dataclass(
        f"Extended{section.__name__}",
        [("extra", int, field(default=0, metadata={"output": output}))],
        bases=(section,),
        frozen=True,
        kw_only=True,
    )
    return extended(**{f.name: getattr(base, f.name) for f in fields(base)}, extra=value)
