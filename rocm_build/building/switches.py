"""Switches the reference builds set that a project's own defaults would leave to the build
machine: the project's ``reference_env`` (constant values, as TheRock's
``external-builds/pytorch/build_prod_wheels.py`` and PyTorch's CI set them) and the variables its
``tree_env`` names, which come from the ROCm tree. ``docs/fidelity.md`` lists each with the
reference it mirrors.

``tree_env`` entries:

- ``rocm-source-dir``: ``ROCM_SOURCE_DIR`` = the tree (PyTorch's Kineto defaults it to
  ``/opt/rocm``, so a machine with another ROCm there would build the profiler against that one);
- ``host-blas``: CPU BLAS/LAPACK from the tree's ``lib/host-math`` OpenBLAS (``BLAS=OpenBLAS``,
  ``OpenBLAS_HOME``, ``OpenBLAS_LIB_NAME``), or a note that the tree has none;
- ``sysdeps-pkgconfig``: ``PKG_CONFIG_PATH`` at ``lib/rocm_sysdeps/lib/pkgconfig`` (aotriton's
  build finds liblzma there);
- ``aotriton``: with flash or memory-efficient attention on (PyTorch's default), the build
  downloads the aotriton runtime in the middle of CMake (or clones and builds it); instead the
  one ``rocm-build fetch`` put in the cache for the checkout's ``aotriton.cmake`` (or one unpacked
  by hand into ``<cache>/aotriton/rocm<version>``) is passed as ``AOTRITON_INSTALLED_PREFIX``, or
  both are turned off with a note naming what is missing. The ROCm tree is never taken for an
  aotriton prefix (its ``lib`` would be installed into torch whole).

Triton's build (any project named ``triton``) downloads its pinned LLVM and the packages its
``setup.py`` names (nlohmann JSON; pybind11 on older releases); those ``fetch --what llvm`` put in
the cache are passed as ``LLVM_SYSPATH``, ``JSON_SYSPATH`` and ``PYBIND11_SYSPATH``, with
``TRITON_OFFLINE_BUILD=1`` when each the setup.py reads is set (by the cache or the user); else
a note names what is missing and the fetch command.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.building.prefetch import (
    FETCH_COMMAND,
    aotriton_cache_dir,
    aotriton_set,
    triton_llvm,
    triton_packages,
    unknown_note,
)
from rocm_build.common.errors import ConfigError, RocmBuildError
from rocm_build.config.loader import ProjectSpec
from rocm_build.rocm.dist import EXTENDED_FLAGS, EXTENDED_PATHS, RocmTree, join_values

__all__ = [
    "AOTRITON_LIB",
    "TREE_ENV",
    "AotritonWhere",
    "LlvmWhere",
    "Switches",
    "aotriton_cache_dir",
    "fetched_aotriton",
    "find_aotriton",
    "merge_env",
    "pairs",
    "switches",
]

TREE_ENV = ("rocm-source-dir", "host-blas", "sysdeps-pkgconfig", "aotriton")
#: What marks an aotriton install prefix (PyTorch's aotriton.cmake links this library).
AOTRITON_LIB = "libaotriton_v2.so*"
_OFF = frozenset({"0", "off", "false", "no", "n"})
_ATTENTION = ("USE_FLASH_ATTENTION", "USE_MEM_EFF_ATTENTION")


@dataclass(frozen=True)
class LlvmWhere:
    """Where Triton's LLVM is: the download cache's folder and the ``triton.llvm_url`` setting."""

    cache: Path
    url: str = ""


@dataclass(frozen=True)
class Switches:
    """The variables for one project's build and what the plan should say about them."""

    env: Mapping[str, str]
    notes: tuple[str, ...] = ()


def pairs(items: Sequence[str], what: str, project: str) -> dict[str, str]:
    """``NAME=VALUE`` lines as a mapping; a line without ``=`` is a ``ConfigError``."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            msg = f"[projects.{project}] {what}: expected NAME=VALUE, got '{item}'"
            raise ConfigError(msg)
        out[name.strip()] = value.strip()
    return out


def merge_env(*layers: Mapping[str, str]) -> dict[str, str]:
    """Later layers win, except that search paths and compiler flags given by several layers
    are all kept (a user's ``CXXFLAGS`` in ``build_env`` adds to the reference's)."""
    out: dict[str, str] = {}
    for layer in layers:
        for key, value in layer.items():
            if key in out and key in EXTENDED_FLAGS:
                out[key] = join_values(out[key], value, sep=" ")
            elif key in out and key in EXTENDED_PATHS:
                out[key] = join_values(value, out[key])
            else:
                out[key] = value
    return out


def _is_prefix(folder: Path) -> bool:
    return folder.is_dir() and any((folder / "lib").glob(AOTRITON_LIB))


def find_aotriton(tree: RocmTree, setting: str, cache: Path) -> Path | None:
    """The aotriton install ``build.aotriton`` leads to (a folder, or auto's pre-fetched one)."""
    if setting == "off":
        return None
    if setting not in ("", "auto"):
        return Path(setting) if _is_prefix(Path(setting)) else None
    candidate = cache / f"rocm{tree.version or 'unknown'}"
    return candidate if _is_prefix(candidate) else None


@dataclass(frozen=True)
class AotritonWhere:
    """What the aotriton switch looks at besides the setting: the fetched prefix, or what the
    cache lacks of it."""

    cache: Path
    fetched: Path | None = None
    missing: str = ""


def fetched_aotriton(
    source: Path | None,
    tree: RocmTree,
    targets: Sequence[str],
    env: Mapping[str, str],
    cache: Path,
) -> AotritonWhere:
    if source is None:
        return AotritonWhere(cache)
    try:
        found = aotriton_set(source, tree, targets, env, cache)
    except RocmBuildError as exc:  # an aotriton.cmake not understood: said, not guessed
        return AotritonWhere(cache, missing=f"what to fetch: {exc}")
    if found is None:
        return AotritonWhere(cache)
    if found.present:
        return AotritonWhere(cache, fetched=found.prefix)
    names = ", ".join(d.name for d in found.downloads)
    return AotritonWhere(cache, missing=f"{names} (run '{FETCH_COMMAND} --what aotriton' first)")


def _aotriton(
    tree: RocmTree, setting: str, where: AotritonWhere, given: Mapping[str, str]
) -> tuple[dict[str, str], str]:
    if given.get("AOTRITON_INSTALLED_PREFIX"):
        return {}, ""  # the user's own prefix
    if all(given.get(k, "1").strip().lower() in _OFF for k in _ATTENTION):
        return {}, ""  # both off already: aotriton is not built
    off = dict.fromkeys(_ATTENTION, "0")
    if setting == "off":
        return off, "flash and memory-efficient attention are off (build.aotriton = off)"
    if setting not in ("", "auto"):
        prefix = Path(setting)
        if not _is_prefix(prefix):
            msg = (
                f"build.aotriton: {prefix} is not an aotriton install (no lib/{AOTRITON_LIB}); "
                "unpack an aotriton release there, or set it to auto or off"
            )
            raise ConfigError(msg)
        return {"AOTRITON_INSTALLED_PREFIX": str(prefix)}, f"aotriton from {prefix}"
    hand = where.cache / f"rocm{tree.version or 'unknown'}"
    found = where.fetched or (hand if _is_prefix(hand) else None)
    if found is not None:
        return {"AOTRITON_INSTALLED_PREFIX": str(found)}, f"aotriton from {found}"
    missing = (
        f"the cache lacks {where.missing}"
        if where.missing
        else f"none fetched, none unpacked in {hand} (lib/{AOTRITON_LIB})"
    )
    asked = [k for k in _ATTENTION if given.get(k, "").strip().lower() not in _OFF | {""}]
    if asked:
        return {}, (
            f"{', '.join(f'{k}={given[k]}' for k in asked)} and no pre-fetched aotriton "
            f"({missing}): torch's CMake downloads aotriton during the build, which needs the "
            "network"
        )
    note = (
        f"no pre-fetched aotriton ({missing}): flash and memory-efficient attention are off, so "
        "the build does not download aotriton in the middle of CMake"
    )
    return off, note


def _llvm(
    source: Path, given: Mapping[str, str], cache: Path, llvm_url: str
) -> tuple[dict[str, str], str]:
    found = None if given.get("LLVM_SYSPATH") else triton_llvm(source, given, cache, llvm_url)
    if found is None and not given.get("LLVM_SYSPATH"):
        return {}, ""  # no pin: nothing rocm-build knows to fetch
    packages, unknown = triton_packages(source, cache)
    env = {}
    missing = []
    if found is not None:
        wanted, folder = found
        if folder is None:
            missing.append(f"its pinned LLVM ({wanted.name}.tar.gz, about 0.5 GB)")
        else:
            env["LLVM_SYSPATH"] = str(folder)
    for p in packages:
        if given.get(p.package.syspath):
            continue  # the user's own
        if p.folder is None:
            missing.append(f"{p.package.download.what} ({p.package.download.name})")
        else:
            env[p.package.syspath] = str(p.folder)
    if given.get("LLVM_SYSPATH") and not packages and not unknown:
        return env, ""  # the user's own LLVM, nothing else to download
    blockers = [v for v in unknown if not given.get(v)]
    if missing:
        return env, (
            f"Triton's build downloads {' and '.join(missing)} mid-build; run "
            f"'{FETCH_COMMAND} --what llvm' first to use cached ones and build offline"
        )
    if blockers:
        return env, "; ".join(unknown_note(v) for v in blockers)
    shown = ", ".join(f"{k}={v}" for k, v in env.items()) or "the environment's folders"
    note = f"Triton builds offline (TRITON_OFFLINE_BUILD=1) with {shown}"
    return {**env, "TRITON_OFFLINE_BUILD": "1"}, note


def _attention_wanted(given: Mapping[str, str]) -> bool:
    return not given.get("AOTRITON_INSTALLED_PREFIX") and not all(
        given.get(k, "1").strip().lower() in _OFF for k in _ATTENTION
    )


def _host_blas(tree: RocmTree) -> tuple[dict[str, str], str]:
    host = tree.root / "lib" / "host-math"
    if not host.is_dir():
        return {}, (
            "the tree has no lib/host-math: CPU BLAS/LAPACK is whatever torch's CMake finds "
            "on this machine (or none)"
        )
    name = "rocm-openblas" if any((host / "lib").glob("librocm-openblas.so*")) else "openblas"
    env = {"BLAS": "OpenBLAS", "OpenBLAS_HOME": str(host), "OpenBLAS_LIB_NAME": name}
    return env, ""


def switches(
    spec: ProjectSpec,
    tree: RocmTree,
    *,
    given: Mapping[str, str],
    aotriton: str = "auto",
    aotriton_cache: Path,
    source: Path | None = None,
    targets: Sequence[str] = (),
    llvm: LlvmWhere | None = None,
) -> Switches:
    """The project's reference and tree variables. ``given`` is what the user's environment and
    the project's ``build_env`` already set (they win over these); ``source`` is the project's
    checkout (its aotriton.cmake or LLVM pin tell what ``fetch`` would have cached); ``llvm``
    where Triton's LLVM is cached and the ``triton.llvm_url`` setting."""
    unknown = [e for e in spec.tree_env if e not in TREE_ENV]
    if unknown:
        msg = (
            f"[projects.{spec.name}] tree_env: unknown {', '.join(unknown)} "
            f"(known: {', '.join(TREE_ENV)})"
        )
        raise ConfigError(msg)
    env = pairs(spec.reference_env, "reference_env", spec.name)
    notes: list[str] = []
    if "rocm-source-dir" in spec.tree_env:
        env["ROCM_SOURCE_DIR"] = str(tree.root)
    parts = []
    if "host-blas" in spec.tree_env:
        parts.append(_host_blas(tree))
    if "aotriton" in spec.tree_env:
        where = (
            fetched_aotriton(source, tree, targets, given, aotriton_cache)
            if aotriton in ("", "auto") and _attention_wanted(given)
            else AotritonWhere(aotriton_cache)
        )
        parts.append(_aotriton(tree, aotriton, where, given))
    if spec.name == "triton" and source is not None and llvm is not None:
        parts.append(_llvm(source, given, llvm.cache, llvm.url))
    for part_env, note in parts:
        env.update(part_env)
        if note:
            notes.append(note)
    pkgconfig = tree.root / "lib" / "rocm_sysdeps" / "lib" / "pkgconfig"
    if "sysdeps-pkgconfig" in spec.tree_env and pkgconfig.is_dir():
        env["PKG_CONFIG_PATH"] = str(pkgconfig)
    return Switches(env=env, notes=tuple(notes))
