"""Settings: the schema (:mod:`.schema`: each setting's type, range, help and default; the kinds
in :mod:`.setting`), the built-in tables (``defaults.toml``: projects, trains, targets, ...) and
their resolution from files, environment and flags (:mod:`.loader`)."""

from __future__ import annotations

from rocm_build.config.loader import (
    PROJECT_SETTINGS,
    SCALAR_SECTIONS,
    SECTIONS,
    SETTINGS,
    Config,
    ProjectSpec,
    Source,
    Switch,
    check,
    flag_name,
    from_environment,
    load,
    load_defaults,
)

__all__ = [
    "PROJECT_SETTINGS",
    "SCALAR_SECTIONS",
    "SECTIONS",
    "SETTINGS",
    "Config",
    "ProjectSpec",
    "Source",
    "Switch",
    "check",
    "flag_name",
    "from_environment",
    "load",
    "load_defaults",
]
