"""The setting flags the user gave on this command line, by dotted key.

A flag bound to a setting (``options.setting_option``, or a shared option declared with
``options.bound``) is not a parameter of its command: its callback records the value given here,
in the click context's ``meta`` (shared by the group and its commands), and ``State.context``
takes the recorded flags as the run's flag settings. A flag not given records nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

#: ``ctx.meta`` keys: the values given, by dotted key; the ``PROJECT=VALUE`` pairs given, parsed
#: when the run's settings are made (a bad pair is the command's one-line error, as before).
VALUES = "rocm_build.given"
PAIRS = "rocm_build.given_pairs"


def plain(value: Any) -> Any:
    """A flag's value as a setting takes it: tuples as lists, paths as strings."""
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def recorder(
    keys: Sequence[str], convert: Callable[[Any], Any] | None = None
) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """The callback of a flag bound to the settings ``keys``: a value the user gave (not None,
    not a repeatable flag's empty tuple), made plain and ``convert``-ed, recorded under each
    key (a ``convert`` that returns None records nothing)."""

    def record(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is None or (param.multiple and not value):
            return value
        shown = plain(value)
        if convert is not None:
            shown = convert(shown)
        if shown is not None:
            for key in keys:
                ctx.meta.setdefault(VALUES, {})[key] = shown
        return value

    return record


def pair_recorder(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """The callback of a repeatable ``PROJECT=VALUE`` flag (``--ref``): one project's ``key``."""

    def record(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value:
            flag = next(x for x in param.opts if x.startswith("--"))
            ctx.meta.setdefault(PAIRS, []).append((flag, tuple(value), key))
        return value

    return record


def parse_pairs(option: str, pairs: Sequence[str], key: str) -> dict[str, str]:
    """``('torch=v2.9.1',)`` -> ``{'projects.torch.<key>': 'v2.9.1'}``."""
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name or not value:
            msg = f"{option} expects PROJECT=VALUE, got '{pair}'"
            raise click.BadParameter(msg)
        out[f"projects.{name.strip()}.{key}"] = value.strip()
    return out


def flags() -> dict[str, Any]:
    """Every setting flag given on the running command line, by dotted key ({} outside one)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return {}
    out = dict(ctx.meta.get(VALUES, {}))
    for option, pairs, key in ctx.meta.get(PAIRS, []):
        out.update(parse_pairs(option, pairs, key))
    return out


def value(key: str) -> Any:
    """The value given for one setting's flag on this command line, or None."""
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.meta.get(VALUES, {}).get(key)
