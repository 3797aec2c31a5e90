"""Every command's ``--help`` states the defaults the settings have: an option with a setting
behind it (its ``Setting`` type, or its flag named after a setting of the command's section or
the top level) that states a default (click's ``show_default``, "default: X", "X (the
default", "(./X)" for a folder) states the one in ``defaults.toml``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import click
import pytest

from rocm_build import config
from rocm_build.cli import cli
from rocm_build.cli.options import Setting

#: Words that start a description, not a value ("default: the targets of the wheel's code").
DESCRIPTIVE = {"the", "a", "an", "all", "this", "that", "from", "with", "only", "when", "if", "by"}

STATED = (
    re.compile(r"(?<!the )\bdefault(?::| is)? ([^\s,;)]+)", re.IGNORECASE),
    re.compile(r"([^\s(]+) \(the default\b"),
    re.compile(r"\((\./[^\s,;)]*)\)"),
)


def commands(cmd: click.Command, path: tuple[str, ...]) -> Iterator[tuple[str, click.Command]]:
    """``cmd`` and every command under it, by their full names."""
    yield " ".join(path), cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from commands(sub, (*path, name))


def setting_of(command: str, option: click.Option) -> str | None:
    """The setting an option sets: its ``Setting`` type's, else the setting of the command's
    section (``bundle`` -> ``bundle.*``) or the top level its flag is named after."""
    if isinstance(option.type, Setting):
        return option.type.key
    section = command.split()[-1] if " " in command else ""
    for key in config.SETTINGS:
        if "." in key and key.split(".", 1)[0] != section:
            continue
        if config.flag_name(key) in option.opts:
            return key
    return None


def default_of(key: str) -> Any:
    node: Any = config.load_defaults()
    for part in key.split("."):
        node = node[part]
    return node


def text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ",".join(text(v) for v in value)
    return str(value)


def normal(stated: str) -> str:
    return stated.removeprefix("./").strip("'\"`").rstrip(".:")


def stated_defaults(option: click.Option) -> list[str]:
    """The defaults an option's help states (literal values only)."""
    found = []
    if option.show_default and option.default is not None:
        found.append(text(option.default))
    for pattern in STATED:
        found += [m.group(1) for m in pattern.finditer(option.help or "")]
    return [normal(s) for s in found if normal(s).lower() not in DESCRIPTIVE and normal(s)]


def stated_against_settings() -> list[tuple[str, str, str, str, str]]:
    """(command, flag, setting, stated default, the setting's default) of every option."""
    rows = []
    for name, cmd in commands(cli, ("rocm-build",)):
        for param in cmd.params:
            if not isinstance(param, click.Option) or param.hidden:
                continue
            key = setting_of(name, param)
            if key is None:
                continue
            for stated in stated_defaults(param):
                rows.append((name, param.opts[-1], key, stated, text(default_of(key))))
    return rows


def test_help_states_the_settings_defaults() -> None:
    rows = stated_against_settings()
    assert rows, "no option with a setting states its default: the walk found nothing"
    wrong = [
        f"{cmd} {flag}: help says default {said!r}, {key} defaults to {real!r}"
        for cmd, flag, key, said, real in rows
        if said != real
    ]
    assert not wrong, "\n".join(wrong)


def test_the_walk_reaches_every_command_and_checks_the_deflater() -> None:
    names = {name for name, _ in commands(cli, ("rocm-build",))}
    assert {"rocm-build bundle", "rocm-build rocm debian", "rocm-build checkout"} <= names
    checked = {(cmd, key) for cmd, _, key, _, _ in stated_against_settings()}
    assert ("rocm-build bundle", "bundle.deflater") in checked
    assert ("rocm-build build", "output_dir") in checked  # (./wheels): bundle's -w has none


@pytest.mark.parametrize(
    ("help_text", "stated"),
    [
        ("What deflates: zlib (the default: auditwheel's size), libdeflate.", ["zlib"]),
        ("Where wheels go (./wheels).", ["wheels"]),
        ("Compiler cache (default: ccache).", ["ccache"]),
        ("Data is kept for these; default: the targets of the wheel's own device code.", []),
    ],
)
def test_stated_default_forms(help_text: str, stated: list[str]) -> None:
    assert stated_defaults(click.Option(["--x"], help=help_text)) == stated


def test_a_wrong_default_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deflater help as it was (zlib named the default while libdeflate is) fails."""
    bundle = cli.commands["bundle"]
    (deflater,) = [p for p in bundle.params if p.name == "deflater"]
    assert isinstance(deflater, click.Option)
    monkeypatch.setattr(
        deflater, "help", "What deflates new members: zlib (the default: auditwheel's size)."
    )
    with pytest.raises(AssertionError, match="bundle --deflater: help says default 'zlib'"):
        test_help_states_the_settings_defaults()
