"""One validation for every setting, whether it comes from the config file, the environment or a
flag: the type, the range or the choices in ``config.SETTINGS``, checked before any work starts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from rocm_build import config
from rocm_build.common.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]

#: Every setting with a range or choices: (key, values it refuses, a value it takes).
RANGED: dict[str, tuple[tuple[Any, ...], Any]] = {
    "jobs": ((-4, -1), 0),
    "checkout.depth": ((-1,), 0),
    "checkout.jobs": ((0, -2), 1),
    "checkout.retries": ((-1, -3), 0),
    "checkout.retry_delay": ((-0.5, -1), 0.0),
    "build.cache": (("redis", "CCACHE"), "sccache"),
    "bundle.compression_level": ((42, -1, 10), 9),
    "bundle.deflate_cache_gb": ((-1, -0.5, 1e300, 2e6), 0.5),
    "bundle.deflater": (("zlibng", "ZLIB", "pigz"), "isal"),
    "bundle.platform": (("macos",), "windows"),
    "source": (("forked", "UPSTREAM"), "fork"),
    "triton.repo": (("mine", "Fork"), "upstream"),
    "features.flash_attention": (("yes", "ON"), "off"),
}

CASES = [(key, bad) for key, (bads, _) in RANGED.items() for bad in bads]


def _toml(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def _file_text(key: str, value: Any) -> str:
    if "." in key:
        section, sub = key.split(".", 1)
        return f"[{section}]\n{sub} = {_toml(value)}\n"
    return f"{key} = {_toml(value)}\n"


def _env_name(key: str) -> str:
    return "ROCM_BUILD_" + key.replace(".", "_").upper()


def test_the_table_covers_every_default_and_every_default_is_valid(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    assert set(config.SETTINGS) == set(cfg.values)
    for key, value in cfg.values.items():
        assert config.check(key, value, "defaults") == value, key


def test_every_setting_has_one_default_the_schemas(tmp_path: Path) -> None:
    """A setting's default is its schema field's, and only there: ``defaults.toml`` holds the
    tables (projects, trains, ...), none of the scalar settings, and a run with no file and no
    environment gets the field's default for each."""
    import tomllib
    from dataclasses import MISSING, fields

    from rocm_build.config.schema import dotted

    raw = tomllib.loads((REPO / "rocm_build/config/defaults.toml").read_text(encoding="utf-8"))
    in_file = {
        key
        for key in config.SETTINGS
        if (key.split(".")[0] in raw and key.split(".")[-1] in raw[key.split(".")[0]])
        or ("." not in key and key in raw)
    }
    assert in_file == set()
    assert set(raw) == set(config.loader.TABLE_SECTIONS)
    cfg = config.load(cwd=tmp_path, env={})
    for section, cls in config.SECTIONS.items():
        for f in fields(cls):
            key = dotted(section, f.name)
            assert f.default is not MISSING, key
            assert cfg.sources[key] is config.Source.DEFAULT, key
            shown = list(f.default) if isinstance(f.default, tuple) else f.default
            assert cfg.values[key] == shown, key


def test_every_ranged_setting_is_tested_here() -> None:
    ranged = {key for key, spec in config.SETTINGS.items() if spec.ranged}
    assert ranged == set(RANGED)


@pytest.mark.parametrize(("key", "bad"), CASES)
def test_file_value_out_of_range(tmp_path: Path, key: str, bad: Any) -> None:
    (tmp_path / "rocm-build.toml").write_text(_file_text(key, bad))
    with pytest.raises(ConfigError) as info:
        config.load(cwd=tmp_path, env={})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("rocm-build.toml: ")
    assert f"'{key}'" in message
    assert config.SETTINGS[key].allowed() in message
    assert repr(bad) in message


@pytest.mark.parametrize(("key", "bad"), CASES)
def test_environment_value_out_of_range(tmp_path: Path, key: str, bad: Any) -> None:
    name = _env_name(key)
    with pytest.raises(ConfigError) as info:
        config.load(cwd=tmp_path, env={name: str(bad)})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"environment variable {name}: ")
    assert f"'{key}'" in message
    assert config.SETTINGS[key].allowed() in message


@pytest.mark.parametrize(("key", "bad"), CASES)
def test_flag_value_out_of_range(tmp_path: Path, key: str, bad: Any) -> None:
    with pytest.raises(ConfigError) as info:
        config.load(cwd=tmp_path, env={}, flags={key: bad})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"flag {config.flag_name(key)}: ")
    assert f"'{key}'" in message
    assert config.SETTINGS[key].allowed() in message


@pytest.mark.parametrize("key", sorted(RANGED))
def test_values_in_range_pass_from_every_source(tmp_path: Path, key: str) -> None:
    good = RANGED[key][1]
    (tmp_path / "rocm-build.toml").write_text(_file_text(key, good))
    assert config.load(cwd=tmp_path, env={}).values[key] == good
    empty = tmp_path / "empty"
    empty.mkdir()
    assert config.load(cwd=empty, env={_env_name(key): str(good)}).values[key] == good
    assert config.load(cwd=empty, env={}, flags={key: good}).values[key] == good


def test_a_later_source_does_not_excuse_a_bad_earlier_one(tmp_path: Path) -> None:
    # The file's value is refused even though the environment overrides it: the file is wrong.
    (tmp_path / "rocm-build.toml").write_text("[bundle]\ncompression_level = 42\n")
    with pytest.raises(ConfigError, match="compression_level"):
        config.load(cwd=tmp_path, env={"ROCM_BUILD_BUNDLE_COMPRESSION_LEVEL": "5"})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("jobs = 4.7\n", "'jobs' must be int (>= 0), got 4.7"),
        ("jobs = true\n", "'jobs' must be int (>= 0), got True"),
        ("jobs = '-4'\n", "'jobs' must be int (>= 0), got '-4'"),
        ("[checkout]\nretry_delay = 'soon'\n", "must be float (>= 0), got 'soon'"),
        ("[checkout]\nforce = 'maybe'\n", "'checkout.force' must be bool"),
        ("[build]\nfind_links = 3\n", "'build.find_links' must be list of str"),
        ("src_dir = ['a']\n", None),  # a list joins into a str, as before
    ],
)
def test_file_types_are_checked(tmp_path: Path, text: str, expected: str | None) -> None:
    (tmp_path / "rocm-build.toml").write_text(text)
    if expected is None:
        config.load(cwd=tmp_path, env={})
        return
    with pytest.raises(ConfigError, match=re.escape(expected)):
        config.load(cwd=tmp_path, env={})


def test_environment_types_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"ROCM_BUILD_CHECKOUT_DEPTH: 'checkout.depth' must be"):
        config.load(cwd=tmp_path, env={"ROCM_BUILD_CHECKOUT_DEPTH": "deep"})
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_JOBS": " 6 "})
    assert cfg.general.jobs == 6


def test_config_file_outside_the_working_directory_is_named_by_its_path(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere" / "ci.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text("jobs = -4\n")
    cwd = tmp_path / "work"
    cwd.mkdir()
    with pytest.raises(ConfigError, match=re.escape(f"{elsewhere}: 'jobs' must be int (>= 0)")):
        config.load(cwd=cwd, env={}, config_file=elsewhere)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("job_memory_gb", 0, "'projects.torch.job_memory_gb' must be float (>= 0.1), got 0"),
        (
            "job_memory_gb",
            "lots",
            "'projects.torch.job_memory_gb' must be float (>= 0.1), got 'lots'",
        ),
        ("build_tool", "make", "'projects.torch.build_tool' must be one of pip, setup.py"),
    ],
)
def test_project_fields_are_checked(tmp_path: Path, field: str, value: Any, expected: str) -> None:
    (tmp_path / "rocm-build.toml").write_text(f"[projects.torch]\n{field} = {_toml(value)}\n")
    with pytest.raises(ConfigError, match=re.escape(f"rocm-build.toml: {expected}")):
        config.load(cwd=tmp_path, env={})


def test_docs_list_every_ranged_setting_with_what_it_allows() -> None:
    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = page.split("# Configuration", 1)[1].split("\n## ", 1)[0]
    table = section.split("| setting | allowed |", 1)[1].split("\n\n", 1)[0]
    rows = dict(re.findall(r"^\| `([\w.*]+)` \| (.+?) \|$", table, flags=re.M))
    for key, spec in config.SETTINGS.items():
        if spec.ranged:
            assert rows.get(key) == spec.allowed(), key
    for key, spec in config.PROJECT_SETTINGS.items():
        assert rows.get(f"projects.*.{key}") == spec.allowed(), key


def test_each_section_field_is_typed_as_its_setting() -> None:
    """The dataclass fields (what mypy sees) and the table (what values are checked against)
    say the same type: a list setting is a tuple of str, a switch a bool or None, the rest their
    own type."""
    import dataclasses
    import typing

    expected = {
        str: str,
        int: int,
        float: float,
        bool: bool,
        list: tuple[str, ...],
        config.Switch: bool | None,  # unset: the project's own default
    }
    for section, cls in config.SECTIONS.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            spec = f.metadata["setting"]
            key = f"{section}.{f.name}" if section else f.name
            assert config.SETTINGS[key] is spec
            assert hints[f.name] == expected[spec.kind], key
    assert set(config.SECTIONS) - {""} == set(config.SCALAR_SECTIONS)


def test_sections_hold_the_checked_values(tmp_path: Path) -> None:
    (tmp_path / "rocm-build.toml").write_text("[bundle]\ncompression_level = 3\n")
    cfg = config.load(cwd=tmp_path, env={"ROCM_BUILD_CHECKOUT_RETRY_DELAY": "1"})
    assert cfg.bundle.compression_level == 3
    assert cfg.checkout.retry_delay == 1.0
    assert isinstance(cfg.checkout.retry_delay, float)
    assert cfg.bundle.system_libs == ("*",)  # frozen: a tuple
    assert cfg.values["bundle.system_libs"] == ["*"]  # the flat view keeps lists, as before
    with pytest.raises(AttributeError):
        cfg.bundle.compression_level = 4  # type: ignore[misc]
