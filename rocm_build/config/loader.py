"""The one place that reads flags, environment and config files into a frozen ``Config``:
one typed, frozen dataclass per section, each field with its type, range and help.

Precedence, lowest first: the built-in defaults (each scalar setting's in its schema field, the
tables in ``defaults.toml``) < ``rocm-build.toml`` or
``[tool.rocm-build]`` in ``pyproject.toml`` (working directory, or ``--config``) < environment
(``ROCM_BUILD_*``, ``PYTORCH_ROCM_ARCH``, ``ROCM_PATH``/``ROCM_HOME``) < command-line flags.
Every value remembers where it came from, so a run can print and record its settings.

Size: one reader for every source of settings (defaults, files, environment, flags) and where each
value came from; split, the precedence rule would live in more than one place.
"""

from __future__ import annotations

import difflib
import enum
import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

from rocm_build.common import arch
from rocm_build.common.errors import ConfigError
from rocm_build.config.files import CONFIG_FILE, find_config_file, shown_path
from rocm_build.config.schema import (
    PROJECT_SETTINGS,
    SECTIONS,
    SETTINGS,
    BuildSettings,
    BundleSettings,
    CheckoutSettings,
    FeatureSettings,
    GeneralSettings,
    MatrixSettings,
    Setting,
    SmokeSettings,
    Switch,
    TritonSettings,
    check,
    dotted,
    flag_name,
    plain_name,
)

#: config's own names, and the schema's (read through config too).
__all__ = [
    "PROJECT_SETTINGS",
    "SECTIONS",
    "SETTINGS",
    "BuildSettings",
    "BundleSettings",
    "CheckoutSettings",
    "Config",
    "FeatureSettings",
    "GeneralSettings",
    "MatrixSettings",
    "ProjectSpec",
    "Setting",
    "SmokeSettings",
    "Source",
    "Switch",
    "TritonSettings",
    "check",
    "dotted",
    "flag_name",
    "load",
    "load_defaults",
]

SCALAR_SECTIONS = ("checkout", "build", "bundle", "smoke", "matrix", "triton", "features")
TABLE_SECTIONS = ("projects", "trains", "targets", "forks", "floors")
ENV_ALIASES: dict[str, tuple[str, ...]] = {
    # Ecosystem variables, lowest priority first: ROCM_HOME loses to ROCM_PATH.
    "arch": ("PYTORCH_ROCM_ARCH",),
    "rocm": ("ROCM_HOME", "ROCM_PATH"),
}


class Source(enum.IntEnum):
    DEFAULT = 0
    FILE = 1
    ENVIRONMENT = 2
    FLAG = 3


@dataclass(frozen=True, kw_only=True)
class ProjectSpec:
    """One buildable project: where it comes from and how it is treated."""

    name: str
    origin: str
    ref: str = ""
    hipify: tuple[str, ...] = ()
    patches: str = ""
    lib_dir: str = ""
    depends: tuple[str, ...] = ()
    job_memory_gb: float = 2.0
    version_env: tuple[str, ...] = ()
    cmake_packages: tuple[str, ...] = ()
    #: "PACKAGE | feature that needs it | setting that turns the feature off": used when present.
    #: PACKAGE is a CMake package, or lib:NAME for a library found by name (libNAME.so).
    optional_cmake_packages: tuple[str, ...] = ()
    #: "PATH | what the build links when PATH is in the tree | setting that leaves it out": the
    #: project's build turns a dependency on by itself when the tree has it (doctor and the
    #: build plan say so).
    tree_links: tuple[str, ...] = ()
    # build (rocm_build/build.py)
    build_tool: str = "pip"  # "pip" (PEP 517, pip wheel) | "setup.py" (setup.py bdist_wheel)
    requirements: tuple[str, ...] = ()  # requirement files in the checkout, for the build venv
    version_file: str = "version.txt"  # base version, in the checkout; "" = the project's own
    build_env: tuple[str, ...] = ()  # "NAME=VALUE" set for this project's build
    pin_env: tuple[str, ...] = ()  # "NAME=PROJECT": NAME = the built version of PROJECT
    #: The wheel must carry HIP code objects for the targets (a wheel without them fell back to
    #: CPU); false for a project whose ROCm build has host code only (torchaudio >= 2.9).
    device_code: bool = True
    #: The version comes from the release tag checked out (version.txt + "+git<sha8>" for a
    #: branch or commit), as PyTorch's release builds take it; false = version.txt as it is.
    version_from_tag: bool = False
    #: "NAME=VALUE" the reference builds set (TheRock, PyTorch CI); build_env wins over these.
    reference_env: tuple[str, ...] = ()
    #: Variables taken from the ROCm tree (building.switches.TREE_ENV): rocm-source-dir, host-blas,
    #: sysdeps-pkgconfig, aotriton.
    tree_env: tuple[str, ...] = ()
    #: Built before this project when they are built in the same run (no install needed).
    build_after: tuple[str, ...] = ()
    #: The project whose checkout pins this one's ref (triton: torch's pin files).
    pinned_by: str = ""


PROJECT_KEYS = tuple(f for f in ProjectSpec.__dataclass_fields__ if f != "name")


@dataclass(frozen=True, kw_only=True)
class Config:
    """Every resolved setting: one frozen dataclass per section (``cfg.general.jobs``,
    ``cfg.bundle.compression_level``), where each value came from, and the tables."""

    general: GeneralSettings
    checkout: CheckoutSettings
    build: BuildSettings
    bundle: BundleSettings
    smoke: SmokeSettings
    matrix: MatrixSettings
    triton: TritonSettings
    features: FeatureSettings
    #: Where each scalar setting came from, by dotted key.
    sources: Mapping[str, Source]
    projects: Mapping[str, ProjectSpec]
    trains: Mapping[str, Mapping[str, str]]
    #: Per train: ``rocm`` (the oldest ROCm its torch builds with) and, per project, the CMake
    #: packages that train requires besides ``cmake_packages`` (``torch = ["hipfile"]``).
    floors: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: The ``[forks.NAME]`` tables (``origin``, ``ref``), whether or not ``source = "fork"``
    #: applied them, and each project's own origin before it did: which source a checkout's
    #: origin is (``build --dry-run``).
    forks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    own_origins: Mapping[str, str] = field(default_factory=dict)
    known_targets: tuple[str, ...]
    target_families: Mapping[str, tuple[str, ...]]
    cwd: Path
    config_file: Path | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def values(self) -> dict[str, Any]:
        """Every scalar setting by dotted key, lists as lists: the flat view that ``describe``,
        the run report and the stage stamps show and hash."""
        out: dict[str, Any] = {}
        for section in SECTIONS:
            part = getattr(self, section) if section else self.general
            for f in fields(part):
                value = getattr(part, f.name)
                out[dotted(section, f.name)] = list(value) if isinstance(value, tuple) else value
        return out

    def absolute(self, value: str) -> Path:
        """A path setting's value, made absolute against the working directory."""
        return (self.cwd / value).resolve() if value else self.cwd

    def project(self, name: str) -> ProjectSpec:
        try:
            return self.projects[name]
        except KeyError:
            raise ConfigError(_unknown("project", name, self.projects)) from None

    def selected_projects(self, names: Sequence[str] = ()) -> tuple[ProjectSpec, ...]:
        """The named projects, else the configured list, else the train's projects; in
        dependency order (a project after everything it depends on)."""
        chosen = list(names) or list(self.general.default_projects) or list(self.train_refs())
        specs = [self.project(n) for n in chosen]
        return _dependency_order(specs)

    def train_refs(self) -> Mapping[str, str]:
        train = self.general.train
        try:
            return self.trains[train]
        except KeyError:
            raise ConfigError(_unknown("release train", train, self.trains)) from None

    @property
    def patchset(self) -> str:
        """The patch series name: the setting, else the release train's name."""
        return self.general.patchset or self.general.train

    def describe(self) -> list[tuple[str, Any, str]]:
        """(key, value, where it came from) for every scalar setting, sorted."""
        values = self.values
        return [(key, values[key], self.sources[key].name.lower()) for key in sorted(values)]

    def as_json(self) -> dict[str, Any]:
        return {
            "settings": {k: _jsonable(v) for k, v in sorted(self.values.items())},
            "sources": {k: s.name.lower() for k, s in sorted(self.sources.items())},
            "config_file": str(self.config_file) if self.config_file else None,
            "projects": {
                name: {k: _jsonable(getattr(p, k)) for k in PROJECT_KEYS}
                for name, p in sorted(self.projects.items())
            },
        }


def _sections(values: Mapping[str, Any]) -> dict[str, Any]:
    """The section dataclasses of flat, checked values (lists become tuples: frozen)."""
    out: dict[str, Any] = {}
    for section, cls in SECTIONS.items():
        kwargs = {}
        for f in fields(cls):
            value = values[dotted(section, f.name)]
            kwargs[f.name] = tuple(value) if isinstance(value, list) else value
        out[section or "general"] = cls(**kwargs)
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    return value


def natural_key(name: str) -> tuple[tuple[int, str], ...]:
    """Sort key that puts ``2.9`` before ``2.10`` and ``gfx90a`` before ``gfx1100``."""
    return tuple(
        (int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", name)
    )


def _unknown(kind: str, name: str, known: Mapping[str, Any] | Sequence[str]) -> str:
    names = sorted(known, key=natural_key)
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    listing = f"known: {', '.join(names)}" if len(names) <= 12 else ""
    tail = " ".join(p for p in (hint, listing) if p)
    return f"unknown {kind} '{name}'" + (f"; {tail}" if tail else "")


def _dependency_order(specs: Sequence[ProjectSpec]) -> tuple[ProjectSpec, ...]:
    by_name = {s.name: s for s in specs}
    ordered: list[ProjectSpec] = []
    visiting: set[str] = set()

    def visit(spec: ProjectSpec) -> None:
        if spec in ordered:
            return
        if spec.name in visiting:
            msg = f"projects depend on each other in a cycle through '{spec.name}'; fix 'depends'"
            raise ConfigError(msg)
        visiting.add(spec.name)
        for dep in (*spec.depends, *spec.build_after):
            if dep in by_name:
                visit(by_name[dep])
        visiting.discard(spec.name)
        ordered.append(spec)

    for spec in specs:
        visit(spec)
    return tuple(ordered)


def schema_defaults() -> dict[str, Any]:
    """Every scalar setting's built-in default (its schema field's), by dotted key; lists as
    lists, as a config file gives them."""
    out: dict[str, Any] = {}
    for section, cls in SECTIONS.items():
        for f in fields(cls):
            value = f.default
            out[dotted(section, f.name)] = list(value) if isinstance(value, tuple) else value
    return out


def load_defaults() -> dict[str, Any]:
    """The built-in defaults as a config file would hold them: the scalar settings' (from the
    schema, :func:`schema_defaults`) and the tables of ``defaults.toml`` (projects, trains,
    forks, floors, targets)."""
    text = (
        resources.files("rocm_build.config").joinpath("defaults.toml").read_text(encoding="utf-8")
    )
    data = tomllib.loads(text)
    for key, value in schema_defaults().items():
        section, _, name = key.rpartition(".")
        (data.setdefault(section, {}) if section else data)[name] = value
    return data


def _flatten_scalars(data: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if key in TABLE_SECTIONS:
            continue
        if key in SCALAR_SECTIONS:
            for sub, subvalue in value.items():
                flat[f"{key}.{sub}"] = subvalue
        else:
            flat[key] = value
    return flat


def _check_name(where: str, what: str, name: str) -> None:
    """A name that becomes a folder (a project's checkout, a patch series): one plain name."""
    if problem := plain_name(name):
        raise ConfigError(f"{where}: {what} name {name!r} {problem}")


def _check_keys(where: str, given: Mapping[str, Any], allowed: Sequence[str]) -> None:
    for key in given:
        if key not in allowed:
            raise ConfigError(f"{where}: " + _unknown("key", key, list(allowed)))


def _project(name: str, data: Mapping[str, Any], where: str) -> ProjectSpec:
    _check_keys(f"{where} [projects.{name}]", data, PROJECT_KEYS)
    if not data.get("origin"):
        msg = f"{where}: [projects.{name}] needs an 'origin' (a git URL)"
        raise ConfigError(msg)
    kwargs: dict[str, Any] = {"name": name}
    for key in PROJECT_KEYS:
        if key not in data:
            continue
        value = data[key]
        if key in (
            "hipify",
            "depends",
            "version_env",
            "cmake_packages",
            "optional_cmake_packages",
            "tree_links",
            "requirements",
            "build_env",
            "pin_env",
            "reference_env",
            "tree_env",
            "build_after",
        ):
            if isinstance(value, str):
                value = value.split() if key == "hipify" else [value]
            if not isinstance(value, list):
                msg = f"{where}: [projects.{name}] {key} must be a list"
                raise ConfigError(msg)
            value = tuple(str(v) for v in value)
        elif key in PROJECT_SETTINGS:
            value = check(f"projects.{name}.{key}", value, where, PROJECT_SETTINGS[key])
        else:
            value = str(value)
        kwargs[key] = value
    kwargs.setdefault("patches", name)
    kwargs.setdefault("lib_dir", name)
    return ProjectSpec(**kwargs)


def load(
    *,
    cwd: Path,
    env: Mapping[str, str],
    flags: Mapping[str, Any] | None = None,
    config_file: Path | None = None,
) -> Config:
    """Resolve every setting. ``flags`` maps dotted keys to values the user actually gave
    (``checkout.depth``); ``projects.NAME.KEY`` keys override one project's field."""
    defaults = load_defaults()
    values = schema_defaults()
    sources = dict.fromkeys(values, Source.DEFAULT)
    allowed = list(values)

    path, file_data = find_config_file(cwd, config_file)
    where = shown_path(path, cwd) if path else CONFIG_FILE
    _file_values(values, sources, defaults, file_data, where)
    _env_values(values, sources, env, allowed)
    project_flags = _flag_values(values, sources, flags or {}, allowed)
    projects = _projects(defaults, file_data, project_flags, where)

    trains: dict[str, dict[str, str]] = {
        name: dict(refs) for name, refs in defaults["trains"].items()
    }
    for name, refs in file_data.get("trains", {}).items():
        _check_name(where, "release train", name)
        trains.setdefault(str(name), {}).update({str(k): str(v) for k, v in refs.items()})

    targets = defaults["targets"]
    user_targets = file_data.get("targets", {})
    _check_keys(f"{where} [targets]", user_targets, list(targets))
    known = tuple(
        dict.fromkeys([*arch.BOOTSTRAP_TARGETS, *targets["known"], *user_targets.get("known", [])])
    )
    families = {k: tuple(v) for k, v in targets["families"].items()}
    families.update({k: tuple(v) for k, v in user_targets.get("families", {}).items()})

    sections = _sections(values)
    floors = {**defaults["floors"], **file_data.get("floors", {})}
    forks = {**defaults["forks"], **file_data.get("forks", {})}
    own_origins = {name: spec.origin for name, spec in projects.items()}
    if sections["general"].source == "fork":
        projects = _forked(projects, forks, sections["general"].train, where)
    return Config(
        **sections,
        sources=sources,
        projects=projects,
        trains=trains,
        floors=floors,
        forks=forks,
        own_origins=own_origins,
        known_targets=known,
        target_families=families,
        cwd=cwd,
        config_file=path,
        env=dict(env),
    )


def _forked(
    projects: Mapping[str, ProjectSpec], forks: Mapping[str, Any], train: str, where: str
) -> dict[str, ProjectSpec]:
    """``source = "fork"``: the projects that have a ``[forks.NAME]`` table come from it (its
    ``origin``, and its ``ref`` with ``{train}`` filled in unless the project names a ref)."""
    out = dict(projects)
    for name, fork in forks.items():
        if name not in out:
            continue
        if not isinstance(fork, dict) or not fork.get("origin") or not fork.get("ref"):
            msg = f"{where}: [forks.{name}] needs an 'origin' and a 'ref'"
            raise ConfigError(msg)
        spec = out[name]
        ref = spec.ref or str(fork["ref"]).replace("{train}", train)
        out[name] = replace(spec, origin=str(fork["origin"]), ref=ref)
    return out


def _file_values(
    values: dict[str, Any],
    sources: dict[str, Source],
    defaults: Mapping[str, Any],
    file_data: Mapping[str, Any],
    where: str,
) -> None:
    """The config file's scalar settings, checked, over the defaults."""
    top_allowed = [k for k in defaults if k not in SCALAR_SECTIONS] + list(SCALAR_SECTIONS)
    _check_keys(where, file_data, top_allowed)
    for section in SCALAR_SECTIONS:
        if section in file_data and not isinstance(file_data[section], dict):
            raise ConfigError(f"{where}: '{section}' must be a table ([{section}])")
        _check_keys(f"{where} [{section}]", file_data.get(section, {}), list(defaults[section]))
    for key, raw in _flatten_scalars(file_data).items():
        values[key] = check(key, raw, where)
        sources[key] = Source.FILE


def _env_values(
    values: dict[str, Any],
    sources: dict[str, Source],
    env: Mapping[str, str],
    allowed: Sequence[str],
) -> None:
    """``ROCM_BUILD_*`` (and the ecosystem's aliases), checked, over the file."""
    for key in allowed:
        names = [*ENV_ALIASES.get(key, ()), "ROCM_BUILD_" + key.replace(".", "_").upper()]
        for name in names:
            if env.get(name):
                values[key] = check(key, env[name], f"environment variable {name}")
                sources[key] = Source.ENVIRONMENT
    env_names = {"ROCM_BUILD_" + k.replace(".", "_").upper() for k in allowed}
    for name in env:
        if name.startswith("ROCM_BUILD_") and name not in env_names:
            raise ConfigError("environment: " + _unknown("variable", name, sorted(env_names)))


def _flag_values(
    values: dict[str, Any],
    sources: dict[str, Source],
    flags: Mapping[str, Any],
    allowed: Sequence[str],
) -> dict[str, dict[str, Any]]:
    """The flags given, checked, over everything; returns the per-project overrides."""
    project_flags: dict[str, dict[str, Any]] = {}
    for key, raw in flags.items():
        if raw is None:
            continue
        if key.startswith("projects."):
            _, name, sub = key.split(".", 2)
            project_flags.setdefault(name, {})[sub] = raw
            continue
        if key not in values:
            raise ConfigError(_unknown("setting", key, allowed))
        values[key] = check(key, raw, f"flag {flag_name(key)}")
        sources[key] = Source.FLAG
    return project_flags


def _projects(
    defaults: Mapping[str, Any],
    file_data: Mapping[str, Any],
    project_flags: Mapping[str, Mapping[str, Any]],
    where: str,
) -> dict[str, ProjectSpec]:
    """The project tables: built-in, then the file's, then ``projects.NAME.KEY`` flags."""
    projects_data: dict[str, dict[str, Any]] = {
        name: dict(spec) for name, spec in defaults["projects"].items()
    }
    for name, spec in file_data.get("projects", {}).items():
        if not isinstance(spec, dict):
            raise ConfigError(f"{where}: 'projects.{name}' must be a table")
        _check_name(where, "project", name)
        if isinstance(spec.get("patches"), str):
            _check_name(where, f"[projects.{name}] patches", spec["patches"])
        projects_data.setdefault(name, {}).update(spec)
    for name, overrides in project_flags.items():
        if name not in projects_data:
            raise ConfigError(_unknown("project", name, projects_data))
        projects_data[name].update(overrides)
    projects = {
        name: _project(name, data, where if name in file_data.get("projects", {}) else "defaults")
        for name, data in projects_data.items()
    }
    for spec in projects.values():
        for dep in spec.depends:
            if dep not in projects:
                raise ConfigError(
                    f"project '{spec.name}' depends on " + _unknown("project", dep, projects)
                )
    return projects


def from_environment(
    flags: Mapping[str, Any] | None = None, config_file: Path | None = None
) -> Config:
    """``load`` for the running process (the CLI's entry point)."""
    return load(cwd=Path.cwd(), env=os.environ, flags=flags, config_file=config_file)
