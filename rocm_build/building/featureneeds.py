"""What each of torch's build features (``[features]``) needs, and whether this run has it.

``doctor`` shows one line per feature: flash attention needs a target with aotriton kernels and an
aotriton install at hand (``build.aotriton``); the composable-kernel backends need torch's own
``third_party/composable_kernel`` submodule in the checkout (torch builds CK from it, not from the
ROCm tree); MSLK has kernels for gfx942 and gfx950; GPU asserts need nothing but cost speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.building import features, switches
from rocm_build.building.features import CK_HEADER, Feature
from rocm_build.common.errors import ConfigError, RocmBuildError, RocmTreeError
from rocm_build.config.loader import Config
from rocm_build.rocm.dist import RocmTree

__all__ = ["CK_HEADER", "FeatureNeed", "ck_problem", "needs"]

_CK = ("ck_sdpa", "ck_gemm")


@dataclass(frozen=True)
class FeatureNeed:
    """One feature: its setting, what it needs, and ``good`` True (served), None (off or a note)
    or False (asked for and cannot be served: ``error`` is the error it stops a build with)."""

    name: str
    setting: str
    needs: str
    state: str
    good: bool | None
    error: type[RocmBuildError] | None = None


def ck_problem(features: Sequence[Feature], torch_source: Path) -> str:
    """Why torch's checkout cannot build the composable-kernel backends that are on ("" when it
    can, or when both are off)."""
    on = [f for f in features if f.name in _CK and f.on]
    if not on or (torch_source / CK_HEADER).is_file():
        return ""
    return (
        f"{' and '.join(f'{f.name} ({f.why})' for f in on)} build composable_kernel from torch's "
        f"own submodule, and {torch_source / CK_HEADER} is missing: check torch out with its "
        "submodules (rocm-build checkout torch), or set "
        f"{' and '.join(f'features.{f.name}' for f in on)} to false"
    )


def _setting(value: object) -> str:
    return "default" if value is None else str(value).lower()


def _flash(
    cfg: Config, tree: RocmTree, targets: Sequence[str], cache: Path, torch_source: Path
) -> FeatureNeed:
    setting = cfg.features.flash_attention
    needs = (
        f"a target starting with {', '.join(features.FLASH_PREFIXES)}, and aotriton "
        "at hand (build.aotriton)"
    )
    try:
        on = features.flash_attention(setting, targets=targets)
    except ConfigError as err:
        return FeatureNeed("flash_attention", setting, needs, str(err), False, ConfigError)
    if not on:
        state = "off" if setting == "off" else "off (no target with aotriton kernels)"
        return FeatureNeed("flash_attention", setting, needs, state, None)
    found = switches.find_aotriton(tree, cfg.build.aotriton, cache)
    where = switches.AotritonWhere(cache)
    if cfg.build.aotriton in ("", "auto") and torch_source.is_dir():
        where = switches.fetched_aotriton(torch_source, tree, targets, cfg.env, cache)
        found = where.fetched or found
    if found is not None:
        return FeatureNeed("flash_attention", setting, needs, f"on (aotriton {found})", True)
    if cfg.build.aotriton in ("", "auto"):
        if setting == "on":  # the build stops too: no aotriton without the network
            state = "on needs aotriton, and build.aotriton = auto finds none pre-fetched"
            return FeatureNeed("flash_attention", setting, needs, state, False, ConfigError)
        why = f"the cache lacks {where.missing}" if where.missing else ""
        state = f"off: no pre-fetched aotriton ({why or 'build.aotriton = auto finds none'})"
        return FeatureNeed("flash_attention", setting, needs, state, None)
    state = f"build.aotriton = {cfg.build.aotriton} is not an aotriton install"
    return FeatureNeed("flash_attention", setting, needs, state, False, ConfigError)


def _ck(feature: Feature, setting: object, torch_source: Path) -> FeatureNeed:
    var = "USE_ROCM_CK_SDPA" if feature.name == "ck_sdpa" else "USE_ROCM_CK_GEMM"
    need = f"torch's {CK_HEADER.parents[2]} submodule ({CK_HEADER} in its checkout); {var}"
    state = f"{'on' if feature.on else 'off'} ({feature.why})"
    if not feature.on:
        return FeatureNeed(feature.name, _setting(setting), need, state, None)
    if not torch_source.is_dir():
        return FeatureNeed(feature.name, _setting(setting), need, f"{state}; not checked out", None)
    if (torch_source / CK_HEADER).is_file():
        return FeatureNeed(feature.name, _setting(setting), need, state, True)
    state = f"{state}, but torch's checkout has no {CK_HEADER}"
    return FeatureNeed(feature.name, _setting(setting), need, state, False, RocmTreeError)


def needs(
    cfg: Config,
    tree: RocmTree,
    targets: Sequence[str],
    work_dir: Path,
    torch_source: Path,
) -> list[FeatureNeed]:
    """Each feature and whether a build of torch for ``targets`` with ``tree`` and the checkout
    at ``torch_source`` has it."""
    cache = switches.aotriton_cache_dir(cfg.env, work_dir)
    decided = {f.name: f for f in features.decide(cfg.features, targets=targets)}
    out = [_flash(cfg, tree, targets, cache, torch_source)]
    out += [_ck(decided[n], getattr(cfg.features, n), torch_source) for n in _CK]
    mslk = decided["mslk"]
    out.append(
        FeatureNeed(
            "mslk",
            _setting(cfg.features.mslk),
            f"a target among {', '.join(features.MSLK_TARGETS)}; USE_MSLK",
            f"{'on' if mslk.on else 'off'} ({mslk.why})",
            True if mslk.on else None,
        )
    )
    asserts = cfg.features.gpu_asserts
    out.append(
        FeatureNeed(
            "gpu_asserts",
            "true" if asserts else "false",
            "nothing (slower kernels); ROCM_FORCE_ENABLE_GPU_ASSERTS through CMake",
            "on" if asserts else "off",
            True if asserts else None,
        )
    )
    return out
