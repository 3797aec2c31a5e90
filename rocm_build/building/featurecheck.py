"""What each of torch's build features (``[features]``) needs, and whether this run has it.

``doctor`` shows one line per feature: flash attention needs Triton built in the same run, a
target with aotriton kernels and an aotriton install (``build.aotriton``); the composable-kernel
backends need the tree's composable_kernel headers; GPU asserts need nothing but cost speed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.building import buildfeatures, buildswitches
from rocm_build.config.loader import Config
from rocm_build.errors import ConfigError, RocmBuildError, RocmTreeError
from rocm_build.rocm.dist import RocmTree

__all__ = ["CK_HEADER", "FeatureNeed", "ck_problem", "needs"]

#: composable_kernel's main header, installed with its headers under the tree's include/ck/.
CK_HEADER = Path("include") / "ck" / "ck.hpp"


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


def ck_problem(cfg: Config, tree: RocmTree) -> str:
    """Why the tree cannot serve the composable-kernel features asked for ("" when it can)."""
    asked = [n for n in ("ck_sdpa", "ck_gemm") if getattr(cfg.features, n)]
    if not asked or (tree.root / CK_HEADER).is_file():
        return ""
    return (
        f"features.{' and features.'.join(asked)} need composable_kernel's headers "
        f"({CK_HEADER} in the tree {tree.root}); use a tree with composable_kernel or turn "
        f"{'them' if len(asked) > 1 else 'it'} off"
    )


def _flash(
    cfg: Config, tree: RocmTree, targets: Sequence[str], triton: bool, cache: Path
) -> FeatureNeed:
    setting = cfg.features.flash_attention
    needs = (
        "Triton built in the same run, a target starting with "
        f"{', '.join(buildfeatures.FLASH_PREFIXES)}, and aotriton (build.aotriton)"
    )
    try:
        on = buildfeatures.flash_attention(setting, triton=triton, targets=targets)
    except ConfigError as err:
        return FeatureNeed("flash_attention", setting, needs, str(err), False, ConfigError)
    if not on:
        why = "no Triton in this run" if not triton else "no target with aotriton kernels"
        state = "off" if setting == "off" else f"off ({why})"
        return FeatureNeed("flash_attention", setting, needs, state, None)
    found = buildswitches.find_aotriton(tree, cfg.build.aotriton, cache)
    if found is not None:
        return FeatureNeed("flash_attention", setting, needs, f"on (aotriton {found})", True)
    if cfg.build.aotriton in ("", "auto"):
        if setting == "on":  # the build stops too: no aotriton without the network
            state = "on needs aotriton, and build.aotriton = auto finds none pre-fetched"
            return FeatureNeed("flash_attention", setting, needs, state, False, ConfigError)
        state = "off: no pre-fetched aotriton (build.aotriton = auto finds none)"
        return FeatureNeed("flash_attention", setting, needs, state, None)
    state = f"build.aotriton = {cfg.build.aotriton} is not an aotriton install"
    return FeatureNeed("flash_attention", setting, needs, state, False, ConfigError)


def needs(
    cfg: Config, tree: RocmTree, targets: Sequence[str], projects: Sequence[str], work_dir: Path
) -> list[FeatureNeed]:
    """Each feature and whether a build of ``projects`` for ``targets`` with ``tree`` has it."""
    cache = buildswitches.aotriton_cache_dir(cfg.env, work_dir)
    out = [_flash(cfg, tree, targets, "triton" in projects, cache)]
    has_ck = (tree.root / CK_HEADER).is_file()
    for name, var in (("ck_sdpa", "USE_ROCM_CK_SDPA"), ("ck_gemm", "USE_ROCM_CK_GEMM")):
        on = bool(getattr(cfg.features, name))
        need = f"composable_kernel's headers ({CK_HEADER} in the tree); {var}=1"
        if not on:
            out.append(FeatureNeed(name, "false", need, "off", None))
        elif has_ck:
            out.append(FeatureNeed(name, "true", need, "on", True))
        else:
            state = f"asked for, but the tree has no {CK_HEADER}"
            out.append(FeatureNeed(name, "true", need, state, False, RocmTreeError))
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
