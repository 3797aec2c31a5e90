"""A setting's flag is one decorator: ``options.setting_option`` binds a flag to a setting key,
and the value the user gives reaches ``ctx.settings`` with no code in the command's body."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from rocm_build.cli import options as o
from rocm_build.cli.render import State, pass_state
from rocm_build.common.errors import ConfigError


def probe(*options: Any) -> tuple[click.Command, dict[str, Any]]:
    """A command whose body only makes the run context; what it saw is kept in ``seen``."""
    seen: dict[str, Any] = {}

    @pass_state
    def body(state: State) -> None:
        seen["settings"] = state.context().settings

    for option in reversed(options):
        body = option(body)
    return o.command("probe")(body), seen


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no config file of the working tree's


def run(command: click.Command, args: list[str]) -> Any:
    return CliRunner().invoke(command, args, catch_exceptions=False)


def test_a_bound_flag_reaches_the_settings_with_no_code_in_the_command() -> None:
    command, seen = probe(
        o.setting_option("-z", "--compression-level", key="bundle.compression_level", help="z")
    )
    assert command.callback is not None
    assert list(inspect.signature(command.callback).parameters) == ["state"]
    result = run(command, ["-z", "3"])
    assert result.exit_code == 0, result.output
    cfg = seen["settings"]
    assert cfg.bundle.compression_level == 3
    assert cfg.sources["bundle.compression_level"].name == "FLAG"
    # its type is the setting's: the range and the one-line error come from the schema
    assert isinstance(command.params[-1].type, o.Setting)


def _repeatable_and_negated() -> tuple[Any, Any]:
    """A repeatable flag and a negating one, each bound to a setting."""
    return (
        o.setting_option("--exclude", key="bundle.exclude", multiple=True, help="x"),
        o.setting_option(
            "--no-patches",
            key="checkout.patches",
            convert=lambda _: False,
            is_flag=True,
            default=None,
            help="p",
        ),
    )


def test_a_flag_not_given_leaves_the_default() -> None:
    command, seen = probe(
        *_repeatable_and_negated(),
    )
    assert run(command, []).exit_code == 0
    cfg = seen["settings"]
    assert cfg.sources["bundle.exclude"].name == "DEFAULT"
    assert cfg.sources["checkout.patches"].name == "DEFAULT"
    assert cfg.checkout.patches is True


def test_repeated_and_negated_flags_and_one_flag_for_two_settings() -> None:
    command, seen = probe(
        *_repeatable_and_negated(),
        o.offline_option("o", key=("build.no_index", "smoke.offline")),
        o.ref_option,
    )
    args = [
        "--exclude",
        "libfoo.so.*",
        "--exclude",
        "libbar.so",
        "--no-patches",
        "--offline",
        "--ref",
        "torch=v2.9.1",
    ]
    result = run(command, args)
    assert result.exit_code == 0, result.output
    cfg = seen["settings"]
    assert cfg.bundle.exclude == ("libfoo.so.*", "libbar.so")
    assert cfg.checkout.patches is False
    assert cfg.build.no_index is True
    assert cfg.smoke.offline is True
    assert cfg.projects["torch"].ref == "v2.9.1"


def test_a_bad_value_is_the_settings_one_line_error() -> None:
    command, _ = probe(
        o.setting_option("-z", "--compression-level", key="bundle.compression_level", help="z")
    )
    with pytest.raises(ConfigError) as info:
        run(command, ["-z", "12"])
    assert str(info.value) == (
        "flag --compression-level: 'bundle.compression_level' must be int (0 to 9), got '12'"
    )
