"""Config files: which one applies (``--config``, ``rocm-build.toml``, ``pyproject.toml``'s
``[tool.rocm-build]``) and reading it as untrusted input: a regular file of bounded size, TOML
in UTF-8, one line for anything else."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from rocm_build.common import statefile
from rocm_build.common.errors import ConfigError
from rocm_build.common.treepath import denied

__all__ = ["CONFIG_FILE", "CONFIG_LIMIT", "find_config_file", "read_toml", "shown_path"]

CONFIG_FILE = "rocm-build.toml"


def find_config_file(cwd: Path, explicit: Path | None) -> tuple[Path | None, dict[str, Any]]:
    if explicit is not None:
        path = explicit if explicit.is_absolute() else cwd / explicit
        if not path.exists():
            msg = f"config file {explicit} does not exist; check --config"
            raise ConfigError(msg)
        data = read_toml(path)
        if path.name == "pyproject.toml":
            data = data.get("tool", {}).get("rocm-build", {})
        return path, data
    candidate = cwd / CONFIG_FILE
    if candidate.exists():
        return candidate, read_toml(candidate)
    pyproject = cwd / "pyproject.toml"
    if pyproject.is_file():
        section = read_toml(pyproject).get("tool", {}).get("rocm-build")
        if section is not None:
            return pyproject, section
    return None, {}


def shown_path(path: Path, cwd: Path) -> str:
    """A config file's path as messages show it: relative to the working directory if inside."""
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


#: More than any config file holds: a bigger one is not read.
CONFIG_LIMIT = 4 << 20


def _regular(path: Path, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = statefile.file_kind(st.st_mode)
        msg = f"config file {path} is {kind}, not a file; pass a TOML file with --config"
        raise ConfigError(msg)


def _config_bytes(path: Path) -> bytes:
    """A config file's bytes: a regular file (a link to one is fine) of at most
    ``CONFIG_LIMIT`` bytes. A FIFO, device, socket or folder is refused without waiting on it."""
    _regular(path, path.stat())  # before opening: a socket cannot be opened at all
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        _regular(path, os.fstat(file.fileno()))
        data = file.read(CONFIG_LIMIT + 1)
    if len(data) > CONFIG_LIMIT:
        msg = (
            f"config file {path} is larger than {CONFIG_LIMIT >> 20} MiB, more than any config "
            "holds; pass a TOML file with --config"
        )
        raise ConfigError(msg)
    return data


def read_toml(path: Path) -> dict[str, Any]:
    """A config file's TOML. A UTF-8 byte order mark (what some Windows editors write) is
    accepted; anything that is not UTF-8 text is a one-line error."""
    try:
        return tomllib.loads(_config_bytes(path).decode("utf-8-sig"))
    except tomllib.TOMLDecodeError as exc:
        msg = f"{path}: not valid TOML ({exc}); fix the file or pass another --config"
        raise ConfigError(msg) from None
    except RecursionError:
        msg = (
            f"{path}: not a usable config (arrays or tables nested too deeply); fix the file or "
            "pass another --config"
        )
        raise ConfigError(msg) from None
    except UnicodeDecodeError as exc:
        msg = (
            f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
            "a config file is TOML in UTF-8: fix the file or pass another --config"
        )
        raise ConfigError(msg) from None
    except PermissionError as exc:
        raise denied(exc, "the config file") from None
    except OSError as exc:
        msg = f"config file {path}: cannot read it ({exc.strerror or exc}); check --config"
        raise ConfigError(msg) from None
