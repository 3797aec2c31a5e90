"""The settings' schema: one frozen dataclass per section, each field with its type, range,
help (``Setting``) and built-in default, and ``check``, the one validation the config file, the
environment and the command-line flags all go through. ``config.load`` fills the sections in;
``config`` re-exports every public name here (``config.SETTINGS``, ``config.check``).

A new setting is a field in one of these sections, with its default (``_setting(...,
default=...)``); a flag for it is one decorator (``cli.options.setting_option``).

Size: one field per setting (type, range, help, default, and what the default's choice rests on,
in a comment beside it), the sections in one file so that a setting is declared in one place; the
kinds, the field maker and the shape checks are already apart (:mod:`.setting`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from rocm_build.common.errors import ConfigError
from rocm_build.config import rocmlibs
from rocm_build.config.setting import (
    INVALID,
    Setting,
    Switch,
    coerce,
    distribution_name,
    manylinux_tag,
    output_settings,
    plain_name,
    requirement_marker,
)
from rocm_build.config.setting import setting as _setting

#: The names read through the schema (the sections', and :mod:`.setting`'s).
__all__ = [
    "DEFLATERS",
    "PROJECT_SETTINGS",
    "SECTIONS",
    "SETTINGS",
    "BuildSettings",
    "BundleSettings",
    "CheckoutSettings",
    "FeatureSettings",
    "GeneralSettings",
    "MatrixSettings",
    "Setting",
    "SmokeSettings",
    "Switch",
    "TritonSettings",
    "check",
    "distribution_name",
    "dotted",
    "flag_name",
    "manylinux_tag",
    "output_settings",
    "plain_name",
    "requirement_marker",
]

#: The choices of ``bundle.deflater`` (``rocm_build.wheel.rawdeflate`` runs them); the first is
#: the default: the fastest within 1% of auditwheel's size at level 6 (benchmarks/README.md,
#: "Deflaters"), though it needs the splice scan; those after it join their pieces by a sync
#: flush.
DEFLATERS = ("libdeflate", "zlib", "zlib-ng", "isal")


@dataclass(frozen=True, kw_only=True)
class GeneralSettings:
    """The top-level keys of the config file (``ROCM_BUILD_<KEY>``)."""

    src_dir: str = _setting(str, "checkouts, one folder per project", default="src")
    # patches/<patchset>/<project>/...
    patches_dir: str = _setting(str, "saved patch series", default="patches")
    patchset: str = _setting(
        str,
        "patch series name; '' = the release train's name",
        shape=lambda value: plain_name(value) if value else "",
        default="",
    )
    # the newest release (2026-09-02); TheRock builds 2.12-2.14 and nightly
    train: str = _setting(
        str, "release train: which project refs go together", shape=plain_name, default="2.14"
    )
    default_projects: tuple[str, ...] = _setting(
        list, "projects a command works on when none are named", default=()
    )
    # gfx targets, ';' or ',' separated; families (gfx94X) expand
    arch: str = _setting(str, "gfx targets, ';' or ',' separated; families expand", default="")
    rocm: str = _setting(
        str, "the ROCm tree; '' = ROCM_PATH, ROCM_HOME, then /opt/rocm", default=""
    )
    output_dir: str = _setting(str, "built (unbundled) wheels", default="wheels")
    # wheelhouse/gfx942/, wheelhouse/gfx94X-dcgpu/, wheelhouse/gfx90a_gfx942/
    wheelhouse: str = _setting(
        str, "bundled (fat) wheels, one folder per target set", default="wheelhouse"
    )
    work_dir: str = _setting(str, "logs, reports, the build environment", default=".rocm-build")
    jobs: int = _setting(int, "parallel compile jobs; 0 = from cores and memory", min=0, default=0)
    no_wait: bool = _setting(
        bool, "stop (exit 13) instead of waiting for another run's lock", default=False
    )
    # upstream: each project's own repository at the train's tag; fork: the
    # [forks] repositories (torch: ROCm's fork at release/<train>)
    source: str = _setting(
        str,
        "upstream repositories, or the forks in [forks]",
        choices=("upstream", "fork"),
        default="upstream",
    )


@dataclass(frozen=True, kw_only=True)
class CheckoutSettings:
    """``[checkout]``."""

    depth: int = _setting(int, "history depth; 0 = full history", min=0, default=0)
    jobs: int = _setting(int, "parallel submodule fetches", min=1, default=8)
    hipify: bool = _setting(bool, "run the project's hipify step", default=True)
    patches: bool = _setting(bool, "apply the patch series", default=True)
    force: bool = _setting(bool, "discard local changes and commits", default=False)
    manifest: str = _setting(str, "replay this source manifest instead of the train", default="")
    # network attempts (fetch, ls-remote, submodules) before failing
    retries: int = _setting(
        int, "network attempts before failing (0 counts as 1)", min=0, default=3
    )
    # seconds before the first retry; doubles each time
    retry_delay: float = _setting(
        float, "seconds before the first retry (doubles)", min=0, default=2.0
    )


@dataclass(frozen=True, kw_only=True)
class BuildSettings:
    """``[build]``."""

    # auto (ccache when installed) | ccache | sccache | none
    cache: str = _setting(
        str, "compiler cache", choices=("auto", "ccache", "sccache", "none"), default="auto"
    )
    # remote compiler cache: redis://, s3://, gs://, http(s)://
    cache_url: str = _setting(str, "remote compiler cache storage", default="")
    version_suffix: str = _setting(
        str,
        "local version label ({rocm}: the tree's ROCm version); '' = +rocm<ROCm version>",
        output=True,
        default="",
    )
    # create: a build venv under work_dir; current: this Python; or a venv folder
    venv: str = _setting(str, "create, current, or a venv folder", default="create")
    # where build requirements come from ("" = pip's own setting)
    index_url: str = _setting(str, "index for build requirements", default="")
    find_links: tuple[str, ...] = _setting(
        list, "local folders of wheels for build requirements", default=()
    )
    no_index: bool = _setting(bool, "only the find_links folders", default=False)
    dry_run: bool = _setting(bool, "print the plan, build nothing", default=False)
    # rebuild projects whose sources, settings, targets and tree are unchanged
    force: bool = _setting(bool, "rebuild projects whose inputs are unchanged", default=False)
    # true: build a checkout's uncommitted changes (+rocmX.Y.dirty); false: refuse (exit 6)
    allow_dirty: bool = _setting(
        bool,
        "build checkouts with uncommitted changes (their wheels' labels end in .dirty)",
        default=False,
    )
    # downloaded ROCm trees (--rocm URL); "" = ~/.cache/rocm-build/rocm
    rocm_cache: str = _setting(str, "downloaded ROCm trees", default="")
    # Flash/memory-efficient attention need the aotriton runtime, which torch's CMake otherwise
    # downloads mid-build. auto: a pre-fetched one (lib/libaotriton_v2.so* in the tree, or in
    # ~/.cache/rocm-build/aotriton/rocm<ROCm version>), else both attentions off, with a note;
    # off: both off; a folder: that aotriton install (AOTRITON_INSTALLED_PREFIX).
    aotriton: str = _setting(
        str,
        "pre-fetched aotriton for flash attention: auto, off or a folder",
        output=True,
        default="auto",
    )


@dataclass(frozen=True, kw_only=True)
class BundleSettings:
    """``[bundle]``. A setting that changes the bundled wheel is marked ``output=True``: the
    Linux and the Windows fingerprints take it in from that mark alone."""

    # deflate level of new members, 0-9 (zlib's scale; 0 stores)
    compression_level: int = _setting(
        int,
        "deflate level of new members (zlib's scale; 0 stores)",
        min=0,
        max=9,
        output=True,
        default=6,
    )
    # What deflates new members (measured on ROCm device code at level 6, per core; docs/bundle.md):
    # libdeflate: 2x zlib's speed, 1% smaller than auditwheel (each piece is inflated once more to
    # join it to the next) | zlib: auditwheel's size, no second pass | zlib-ng: 2.3x zlib's speed,
    # 3.5% larger | isal: 7x, 11% larger
    deflater: str = _setting(
        str,
        "deflate library: libdeflate (fastest within 1% of auditwheel's size), zlib, zlib-ng, isal",
        choices=DEFLATERS,
        output=True,
        default="libdeflate",
    )
    # deflated members kept for re-bundling: "" = ~/.cache/rocm-build/deflate
    # ($XDG_CACHE_HOME), a folder, or "none" to turn the cache off
    deflate_cache: str = _setting(
        str, "deflated members kept for the next bundle; none = off", default=""
    )
    # size bound; the least recently used entries go first
    # -w DIR: bundled wheels go into DIR as they are (auditwheel's -w)
    wheel_dir: str = _setting(
        str,
        "-w: the folder the bundled wheels go into as they are; '' = wheelhouse/TARGET-SET",
        default="",
    )
    deflate_cache_gb: float = _setting(
        float, "size bound of the deflate cache, in GB", min=0, max=1_000_000, default=20.0
    )
    dry_run: bool = _setting(bool, "print the plan, write nothing", default=False)
    platform: str = _setting(
        str,
        "auto (from the wheel tag), linux or windows",
        choices=("auto", "linux", "windows"),
        default="auto",
    )
    # The manylinux tag of the output (--plat, as auditwheel repair --plat): auto = the best the
    # contents satisfy; a tag (manylinux_2_28_x86_64, manylinux2014) is used when the contents
    # satisfy it (a newer one than they need too), and one older than they need stops the bundle
    # (exit 10).
    policy: str = _setting(
        str,
        "manylinux tag of the output (--plat); auto = the best that fits",
        shape=manylinux_tag,
        output=True,
        default="auto",
    )
    # Libraries not bundled (--exclude, as auditwheel repair --exclude): sonames or fnmatch patterns
    # (libfoo.so.*). Each stays a NEEDED entry the loader finds at run time, and what only it needs
    # is not bundled either.
    exclude: tuple[str, ...] = _setting(
        list,
        "libraries not bundled: left NEEDED, found at run time (sonames or patterns)",
        output=True,
        default=(),
    )
    # what ROCm's libraries are (dlopen_libs, data_trees, rocm_libs): knowledge of ROCm, in rocmlibs
    dlopen_libs: tuple[str, ...] = _setting(
        list,
        "libraries ROCm loads by name (fnmatch patterns)",
        output=True,
        default=rocmlibs.DLOPEN_LIBS,
    )
    data_trees: tuple[str, ...] = _setting(
        list,
        "data the bundled libraries find next to themselves",
        output=True,
        default=rocmlibs.DATA_TREES,
    )
    # Folders outside the ROCm tree that symlinks in the tree may lead to. A file or folder of the
    # tree whose real path is outside the tree (and outside these) stops the bundle (exit 10).
    allow_outside: tuple[str, ...] = _setting(
        list, "folders outside the tree its symlinks may lead to", output=True, default=()
    )
    # Libraries that may come from the build machine's library folders (LD_LIBRARY_PATH, ld.so.conf,
    # the defaults) when the tree lacks them (fnmatch patterns; "*" = any). Each one is named in the
    # plan, the output and the wheel's provenance. ROCm's own libraries (rocm_libs, dlopen_libs and
    # any name the tree has a library of) never come from the system.
    system_libs: tuple[str, ...] = _setting(
        list, "libraries that may come from the build machine", output=True, default=("*",)
    )
    rocm_libs: tuple[str, ...] = _setting(
        list,
        "ROCm's libraries: never from the build machine",
        output=True,
        default=rocmlibs.ROCM_LIBS,
    )
    # --split-arch: name of each device wheel
    device_name: str = _setting(
        str,
        "--split-arch: device wheel name, from {project} and {target}",
        default="amd-{project}-device-{target}",
    )
    # A wheel built with another ROCm (its +rocmX.Y.Z label) than the tree's stops the bundle (exit
    # 8); true bundles it anyway and relabels it with the tree's version.
    allow_rocm_mismatch: bool = _setting(
        bool,
        "bundle a wheel built with another ROCm than the tree's, relabelled +rocm<tree's>",
        output=True,
        default=False,
    )
    # Unused copies of another ROCm's libraries in the wheel's library folder (libamdhip64.so.5
    # beside the tree's libamdhip64.so.6) are left out of the output; true keeps them (with a
    # warning).
    keep_other_rocm: bool = _setting(
        bool,
        "keep unused copies of another ROCm's libraries the wheel carries",
        output=True,
        default=False,
    )
    # with arch: offload bundles keep only the code of those targets
    prune_device_code: bool = _setting(
        bool, "with arch: drop other targets' device code", output=True, default=True
    )
    # a requested target a written library has no code for: warn, not exit 11
    allow_missing_arch: bool = _setting(
        bool, "a target without device code warns, not exit 11", output=True, default=False
    )


@dataclass(frozen=True, kw_only=True)
class SmokeSettings:
    """``[smoke]``."""

    python: str = _setting(str, "interpreter for the smoke venv; '' = this one", default="")
    # install dependencies and pytest only from find_links (no index)
    offline: bool = _setting(bool, "install only from find_links", default=False)
    find_links: tuple[str, ...] = _setting(
        list, "local folders of wheels: dependencies, pytest", default=()
    )
    packages: tuple[str, ...] = _setting(
        list, "import names to test; [] = what the wheels install", default=()
    )
    # glob of PyTorch's own test files (in src/torch/test) to run too
    upstream_tests: str = _setting(str, "glob of PyTorch's own test files to run too", default="")
    # a passing run's venv holds the unpacked wheels (a torch one: gigabytes): removed unless
    # kept; a failing run's is always kept, to look into
    keep_venv: bool = _setting(bool, "keep the smoke venv after a passing run", default=False)


@dataclass(frozen=True, kw_only=True)
class MatrixSettings:
    """``[matrix]``."""

    # `rocm-build matrix`: the CI jobs, one per Python version x release train x arch group.
    # As PyTorch's and TheRock's matrices (3.10-3.14); a job's Python builds its wheels through
    # build.venv when rocm-build runs on another (ci/rocm-build.yml).
    pythons: tuple[str, ...] = _setting(
        list,
        "Python versions of the CI jobs",
        default=(
            "3.10",
            "3.11",
            "3.12",
            "3.13",
            "3.14",
        ),
    )
    trains: tuple[str, ...] = _setting(
        list, "release trains of the CI jobs; [] = the train setting", default=()
    )
    # A group is a family from [targets.families] (gfx94X), targets joined by ';' or '+'
    # (gfx90a+gfx942), or NAME=targets. In ROCM_BUILD_MATRIX_ARCH_GROUPS separate groups with ','
    # and targets with '+'. TheRock's family strings, as its tarballs are named
    # (therock-dist-linux-gfx94X-dcgpu-*.tar.gz), so {group} in `rocm` below names the right one.
    arch_groups: tuple[str, ...] = _setting(
        list,
        "gfx target groups of the CI jobs",
        default=(
            "gfx94X-dcgpu",
            "gfx950-dcgpu",
            "gfx110X-all",
            "gfx120X-all",
        ),
    )
    # The ROCm tree each job builds against: a folder or a tarball URL (build --rocm, rocm fetch).
    # {group}, {arch}, {train} and {python} are replaced per job; "" = the `rocm` setting; with
    # neither, `rocm-build matrix` stops with an error (a hosted runner has no /opt/rocm).
    rocm: str = _setting(
        str, "the ROCm tree (folder or URL) each job builds against; required", default=""
    )
    # runs-on labels of the GPU smoke job for each group ({group} and {arch} are replaced).
    gpu_labels: tuple[str, ...] = _setting(
        list,
        "runs-on labels of the GPU smoke job",
        default=(
            "self-hosted",
            "linux",
            "rocm",
            "{group}",
        ),
    )
    # build --version-suffix per job: each group its own local version label, so the wheels of jobs
    # that differ only in arch group have different file names (a matrix where they would not is an
    # error). {group}, {arch}, {train} and {python} are replaced here; {rocm}, by build, with the
    # tree's ROCm version: +rocm6.4.3.gfx94x.
    version_suffix: str = _setting(
        str, "build --version-suffix per job, distinct per group", default="+rocm{rocm}.{group}"
    )
    # Projects every job checks out and builds besides the train's (or default_projects): each job's
    # `projects` (ROCM_BUILD_DEFAULT_PROJECTS in the workflow). triton is in no train, and without
    # it torch.compile has no GPU backend; the jobs are Linux. [] = the train's projects only.
    extra_projects: tuple[str, ...] = _setting(
        list, "projects every job builds besides the train's (triton: Linux)", default=("triton",)
    )


@dataclass(frozen=True, kw_only=True)
class TritonSettings:
    """``[triton]``: where the ``triton`` project comes from and how torch requires it."""

    # The `triton` project (Linux only): checked out at the pin of the checked-out torch
    # (.ci/docker/ci_commit_pins/triton.txt), or with release = true at release/X.Y.x of its
    # .ci/docker/triton_version.txt. An origin set in [projects.triton] wins over repo.
    # fork (ROCm's Triton, what TheRock builds on Linux) | upstream
    repo: str = _setting(
        str,
        "fork (ROCm's, TheRock's choice) or upstream Triton",
        choices=("fork", "upstream"),
        default="fork",
    )
    fork_url: str = _setting(
        str, "git URL of ROCm's Triton fork", default="https://github.com/ROCm/triton.git"
    )
    upstream_url: str = _setting(
        str, "git URL of upstream Triton", default="https://github.com/triton-lang/triton.git"
    )
    release: bool = _setting(
        bool, "check out release/X.Y.x of torch's Triton version", default=False
    )
    # torch's wheel requires <wheel_name>==<the built version>; <marker>
    wheel_name: str = _setting(
        str, "distribution name torch's wheel requires", shape=distribution_name, default="triton"
    )
    marker: str = _setting(
        str,
        "environment marker of torch's Triton requirement",
        shape=requirement_marker,
        default='platform_system == "Linux"',
    )
    # `fetch`: folder URL of Triton's LLVM builds; "" = the one its setup.py uses
    llvm_url: str = _setting(
        str,
        "folder URL of Triton's LLVM builds for fetch (\"\": the one Triton's setup.py uses)",
        default="",
    )


@dataclass(frozen=True, kw_only=True)
class FeatureSettings:
    """``[features]``: torch's ROCm build features."""

    # torch's ROCm build features. A feature left to its default writes no variable: the train's own
    # CMake decides, as TheRock's and PyTorch's builds leave it; true/false (on/off) write it.
    # flash_attention (aotriton: USE_FLASH_ATTENTION and USE_MEM_EFF_ATTENTION): auto = torch's
    # default (on) when a target starts with gfx90a, gfx942, gfx950, gfx11 or gfx12 and aotriton is
    # at hand (build.aotriton), else off with a note; on without such a target or aotriton is an
    # error.
    flash_attention: str = _setting(
        str,
        "aotriton flash attention: auto, on or off",
        choices=("auto", "on", "off"),
        default="auto",
    )
    # unset ("" in a file): torch's default (on, Linux; from its third_party/composable_kernel)
    ck_sdpa: bool | None = _setting(
        Switch,
        "composable-kernel SDPA backend (USE_ROCM_CK_SDPA); unset: torch's default",
        default=None,
    )
    # unset ("" in a file): torch's default (on, Linux; same submodule)
    ck_gemm: bool | None = _setting(
        Switch,
        "composable-kernel GEMM backend (USE_ROCM_CK_GEMM); unset: torch's default",
        default=None,
    )
    # unset ("" in a file): torch's default (on for gfx942/gfx950); false: USE_MSLK=0
    mslk: bool | None = _setting(
        Switch,
        "MSLK, formerly FBGEMM GenAI (USE_MSLK, USE_FBGEMM_GENAI); unset: torch's default",
        default=None,
    )
    # HIP kernel asserts (ROCM_FORCE_ENABLE_GPU_ASSERTS), off for speed
    gpu_asserts: bool = _setting(
        bool, "HIP kernel asserts (ROCM_FORCE_ENABLE_GPU_ASSERTS)", default=False
    )


#: Each section of scalar settings and its dataclass; "" holds the top-level keys. A new setting
#: is a field in one of these, its default in the field (``defaults.toml`` holds only the tables:
#: projects, trains, forks, floors, targets).
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
    value = coerce(raw, spec.kind)
    bad = value is INVALID
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
