"""The settings' schema: one frozen dataclass per section, each field with its type, range and
help (``Setting``), and ``check``, the one validation the config file, the environment and the
command-line flags all go through. ``config.load`` fills the sections in; ``config`` re-exports
every public name here (``config.SETTINGS``, ``config.check``).

A new setting is a field in one of these sections (with its default in ``defaults.toml``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement

from rocm_build.common.errors import ConfigError

#: The choices of ``bundle.deflater`` (``rocm_build.wheel.rawdeflate`` runs them); the first is
#: the default: the fastest within 1% of auditwheel's size at level 6 (benchmarks/README.md,
#: "Deflaters"), though it needs the splice scan; those after it join their pieces by a sync
#: flush.
DEFLATERS = ("libdeflate", "zlib", "zlib-ng", "isal")


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


def _setting(
    kind: type,
    help: str,
    *,
    min: float | None = None,
    max: float | None = None,
    choices: tuple[str, ...] = (),
    shape: Callable[[Any], str] | None = None,
    output: bool = False,
) -> Any:
    """A section field: its value comes from ``load``; its type, range and help live here.
    ``output``: the setting changes what the stage writes, so every fingerprint of its outputs
    takes it in (:func:`output_settings`): declared here, once."""
    spec = Setting(kind, help, min, max, choices, shape)
    return field(metadata={"setting": spec, "output": output})


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


@dataclass(frozen=True, kw_only=True)
class GeneralSettings:
    """The top-level keys of the config file (``ROCM_BUILD_<KEY>``)."""

    src_dir: str = _setting(str, "checkouts, one folder per project")
    patches_dir: str = _setting(str, "saved patch series")
    patchset: str = _setting(
        str,
        "patch series name; '' = the release train's name",
        shape=lambda value: plain_name(value) if value else "",
    )
    train: str = _setting(str, "release train: which project refs go together", shape=plain_name)
    default_projects: tuple[str, ...] = _setting(
        list, "projects a command works on when none are named"
    )
    arch: str = _setting(str, "gfx targets, ';' or ',' separated; families expand")
    rocm: str = _setting(str, "the ROCm tree; '' = ROCM_PATH, ROCM_HOME, then /opt/rocm")
    output_dir: str = _setting(str, "built and bundled wheels")
    work_dir: str = _setting(str, "logs, reports, the build environment")
    jobs: int = _setting(int, "parallel compile jobs; 0 = from cores and memory", min=0)
    no_wait: bool = _setting(bool, "stop (exit 13) instead of waiting for another run's lock")
    source: str = _setting(
        str, "upstream repositories, or the forks in [forks]", choices=("upstream", "fork")
    )


@dataclass(frozen=True, kw_only=True)
class CheckoutSettings:
    """``[checkout]``."""

    depth: int = _setting(int, "history depth; 0 = full history", min=0)
    jobs: int = _setting(int, "parallel submodule fetches", min=1)
    hipify: bool = _setting(bool, "run the project's hipify step")
    patches: bool = _setting(bool, "apply the patch series")
    force: bool = _setting(bool, "discard local changes and commits")
    manifest: str = _setting(str, "replay this source manifest instead of the train")
    retries: int = _setting(int, "network attempts before failing (0 counts as 1)", min=0)
    retry_delay: float = _setting(float, "seconds before the first retry (doubles)", min=0)


@dataclass(frozen=True, kw_only=True)
class BuildSettings:
    """``[build]``."""

    cache: str = _setting(str, "compiler cache", choices=("auto", "ccache", "sccache", "none"))
    cache_url: str = _setting(str, "remote compiler cache storage")
    version_suffix: str = _setting(
        str,
        "local version label ({rocm}: the tree's ROCm version); '' = +rocm<ROCm version>",
        output=True,
    )
    venv: str = _setting(str, "create, current, or a venv folder")
    index_url: str = _setting(str, "index for build requirements")
    find_links: tuple[str, ...] = _setting(list, "local folders of wheels for build requirements")
    no_index: bool = _setting(bool, "only the find_links folders")
    dry_run: bool = _setting(bool, "print the plan, build nothing")
    force: bool = _setting(bool, "rebuild projects whose inputs are unchanged")
    allow_dirty: bool = _setting(
        bool, "build checkouts with uncommitted changes (their wheels' labels end in .dirty)"
    )
    rocm_cache: str = _setting(str, "downloaded ROCm trees")
    aotriton: str = _setting(
        str, "pre-fetched aotriton for flash attention: auto, off or a folder", output=True
    )


@dataclass(frozen=True, kw_only=True)
class BundleSettings:
    """``[bundle]``. A setting that changes the bundled wheel is marked ``output=True``: the
    Linux and the Windows fingerprints take it in from that mark alone."""

    compression_level: int = _setting(
        int, "deflate level of new members (zlib's scale; 0 stores)", min=0, max=9, output=True
    )
    deflater: str = _setting(
        str,
        "deflate library: libdeflate (fastest within 1% of auditwheel's size), zlib, zlib-ng, isal",
        choices=DEFLATERS,
        output=True,
    )
    deflate_cache: str = _setting(str, "deflated members kept for the next bundle; none = off")
    deflate_cache_gb: float = _setting(
        float, "size bound of the deflate cache, in GB", min=0, max=1_000_000
    )
    dry_run: bool = _setting(bool, "print the plan, write nothing")
    platform: str = _setting(
        str, "auto (from the wheel tag), linux or windows", choices=("auto", "linux", "windows")
    )
    policy: str = _setting(
        str,
        "manylinux tag of the output (--plat); auto = the best that fits",
        shape=manylinux_tag,
        output=True,
    )
    exclude: tuple[str, ...] = _setting(
        list,
        "libraries not bundled: left NEEDED, found at run time (sonames or patterns)",
        output=True,
    )
    dlopen_libs: tuple[str, ...] = _setting(
        list, "libraries ROCm loads by name (fnmatch patterns)", output=True
    )
    data_trees: tuple[str, ...] = _setting(
        list, "data the bundled libraries find next to themselves", output=True
    )
    allow_outside: tuple[str, ...] = _setting(
        list, "folders outside the tree its symlinks may lead to", output=True
    )
    system_libs: tuple[str, ...] = _setting(
        list, "libraries that may come from the build machine", output=True
    )
    rocm_libs: tuple[str, ...] = _setting(
        list, "ROCm's libraries: never from the build machine", output=True
    )
    device_name: str = _setting(str, "--split-arch: device wheel name, from {project} and {target}")
    allow_rocm_mismatch: bool = _setting(
        bool,
        "bundle a wheel built with another ROCm than the tree's, relabelled +rocm<tree's>",
        output=True,
    )
    keep_other_rocm: bool = _setting(
        bool, "keep unused copies of another ROCm's libraries the wheel carries", output=True
    )
    prune_device_code: bool = _setting(
        bool, "with arch: drop other targets' device code", output=True
    )
    allow_missing_arch: bool = _setting(
        bool, "a target without device code warns, not exit 11", output=True
    )


@dataclass(frozen=True, kw_only=True)
class SmokeSettings:
    """``[smoke]``."""

    python: str = _setting(str, "interpreter for the smoke venv; '' = this one")
    offline: bool = _setting(bool, "install only from find_links")
    find_links: tuple[str, ...] = _setting(list, "local folders of wheels: dependencies, pytest")
    packages: tuple[str, ...] = _setting(list, "import names to test; [] = what the wheels install")
    upstream_tests: str = _setting(str, "glob of PyTorch's own test files to run too")


@dataclass(frozen=True, kw_only=True)
class MatrixSettings:
    """``[matrix]``."""

    pythons: tuple[str, ...] = _setting(list, "Python versions of the CI jobs")
    trains: tuple[str, ...] = _setting(
        list, "release trains of the CI jobs; [] = the train setting"
    )
    arch_groups: tuple[str, ...] = _setting(list, "gfx target groups of the CI jobs")
    rocm: str = _setting(str, "the ROCm tree (folder or URL) each job builds against; required")
    gpu_labels: tuple[str, ...] = _setting(list, "runs-on labels of the GPU smoke job")
    version_suffix: str = _setting(str, "build --version-suffix per job, distinct per group")
    extra_projects: tuple[str, ...] = _setting(
        list, "projects every job builds besides the train's (triton: Linux)"
    )


@dataclass(frozen=True, kw_only=True)
class TritonSettings:
    """``[triton]``: where the ``triton`` project comes from and how torch requires it."""

    repo: str = _setting(
        str, "fork (ROCm's, TheRock's choice) or upstream Triton", choices=("fork", "upstream")
    )
    fork_url: str = _setting(str, "git URL of ROCm's Triton fork")
    upstream_url: str = _setting(str, "git URL of upstream Triton")
    release: bool = _setting(bool, "check out release/X.Y.x of torch's Triton version")
    wheel_name: str = _setting(
        str, "distribution name torch's wheel requires", shape=distribution_name
    )
    marker: str = _setting(
        str, "environment marker of torch's Triton requirement", shape=requirement_marker
    )
    llvm_url: str = _setting(
        str, "folder URL of Triton's LLVM builds for fetch (\"\": the one Triton's setup.py uses)"
    )


@dataclass(frozen=True, kw_only=True)
class FeatureSettings:
    """``[features]``: torch's ROCm build features."""

    flash_attention: str = _setting(
        str, "aotriton flash attention: auto, on or off", choices=("auto", "on", "off")
    )
    ck_sdpa: bool | None = _setting(
        Switch, "composable-kernel SDPA backend (USE_ROCM_CK_SDPA); unset: torch's default"
    )
    ck_gemm: bool | None = _setting(
        Switch, "composable-kernel GEMM backend (USE_ROCM_CK_GEMM); unset: torch's default"
    )
    mslk: bool | None = _setting(
        Switch, "MSLK, formerly FBGEMM GenAI (USE_MSLK, USE_FBGEMM_GENAI); unset: torch's default"
    )
    gpu_asserts: bool = _setting(bool, "HIP kernel asserts (ROCM_FORCE_ENABLE_GPU_ASSERTS)")


#: Each section of scalar settings and its dataclass; "" holds the top-level keys. A new setting
#: is a field in one of these (with its default in defaults.toml: a unit test holds them together).
SECTIONS: Mapping[str, type] = {
    "": GeneralSettings,
    "checkout": CheckoutSettings,
    "build": BuildSettings,
    "bundle": BundleSettings,
    "smoke": SmokeSettings,
    "matrix": MatrixSettings,
    "triton": TritonSettings,
    "features": FeatureSettings,
}


def dotted(section: str, name: str) -> str:
    return f"{section}.{name}" if section else name


#: Every scalar setting by dotted key (``bundle.compression_level``), made from the sections'
#: fields: the one table of types, ranges and help that the file, the environment and the flags
#: are all checked against.
SETTINGS: Mapping[str, Setting] = {
    dotted(section, f.name): f.metadata["setting"]
    for section, cls in SECTIONS.items()
    for f in fields(cls)
}


#: The scalar fields of ``[projects.NAME]`` tables that have a type or range to check.
PROJECT_SETTINGS: Mapping[str, Setting] = {
    "job_memory_gb": Setting(float, "peak memory of one compile job, in GB", min=0.1),
    "build_tool": Setting(str, "how the project is built", choices=("pip", "setup.py")),
    "device_code": Setting(bool, "the wheel must carry HIP code objects for the targets"),
    "version_from_tag": Setting(bool, "version from the release tag (else version.txt +git<sha>)"),
}


def flag_name(key: str) -> str:
    """The flag of a setting: ``bundle.compression_level`` -> ``--compression-level``."""
    return "--" + key.rsplit(".", 1)[-1].replace("_", "-")


def check(key: str, raw: Any, origin: str, spec: Setting | None = None) -> Any:
    """``raw`` made the setting's type and checked against its range or choices.

    ``origin`` names where the value came from (the config file's path, ``environment variable
    ROCM_BUILD_JOBS``, ``flag --jobs``); a bad value is a one-line ``ConfigError`` that names the
    origin, the key and what is allowed."""
    spec = spec or SETTINGS[key]
    value = _coerce(raw, spec.kind)
    bad = value is _INVALID
    if not bad and spec.choices:
        bad = value not in spec.choices
    if not bad and spec.min is not None:
        bad = value < spec.min
    if not bad and spec.max is not None:
        bad = value > spec.max
    if bad:
        msg = f"{origin}: '{key}' must be {spec.allowed()}, got {raw!r}"
        raise ConfigError(msg)
    if spec.shape is not None and (problem := spec.shape(value)):
        raise ConfigError(f"{origin}: '{key}' {problem}, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


_INVALID: Any = object()


def _coerce(raw: Any, kind: type) -> Any:
    """``raw`` as ``kind``; strings (the environment, flags) are parsed. ``_INVALID`` if it is
    not one: a float where an int is wanted is refused, not truncated."""
    if kind is Switch:
        if raw is None or isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("", "default"):
            return None
        return _coerce(text, bool)
    if kind is bool:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off", ""):
            return False
        return _INVALID
    if isinstance(raw, bool):
        return _INVALID
    if kind is int:
        if isinstance(raw, int):
            return raw
        if isinstance(raw, str):
            try:
                return int(raw.strip())
            except ValueError:
                return _INVALID
        return _INVALID
    if kind is float:
        if isinstance(raw, (int, float)):
            value = float(raw)
        elif isinstance(raw, str):
            try:
                value = float(raw.strip())
            except ValueError:
                return _INVALID
        else:
            return _INVALID
        return value if math.isfinite(value) else _INVALID
    if kind is list:
        if isinstance(raw, str):
            return [p.strip() for p in raw.replace(";", ",").split(",") if p.strip()]
        if isinstance(raw, (list, tuple)):
            return [str(x) for x in raw]
        return _INVALID
    if kind is str:
        if isinstance(raw, (list, tuple)):
            return ";".join(str(x) for x in raw)
        if isinstance(raw, (str, int, float, Path)):
            return str(raw)
        return _INVALID
    return _INVALID
