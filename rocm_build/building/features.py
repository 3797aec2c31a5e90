"""torch's ROCm build features (``[features]``), decided before anything is built.

A feature the user left to its default writes no variable: the train's own CMake decides, as
TheRock's ``build_prod_wheels.py`` and PyTorch's CI leave it (the composable-kernel SDPA and GEMM
backends on for Linux, built from torch's own ``third_party/composable_kernel``; MSLK, the former
FBGEMM GenAI, on for gfx942 and gfx950; flash and memory-efficient attention on). A setting of
true or false (``on``/``off``) writes the switch, so ``false`` still turns a feature off. Each
feature says why it is on or off (``Feature.why``): the user's setting, the train's default for
these targets, or that the targets have no kernels for it.

Flash attention on ROCm is aotriton, switched by ``USE_FLASH_ATTENTION`` and
``USE_MEM_EFF_ATTENTION`` together; a target has aotriton kernels when its name starts with one
of ``FLASH_PREFIXES``. Whether aotriton is at hand without the network is the tree switch's
business (``switches``); the plan folds its answer in.

GPU kernel asserts: torch's CMake keeps them off on ROCm unless ``ROCM_FORCE_ENABLE_GPU_ASSERTS`` is
set, a CMake variable its ``setup.py`` does not forward from the environment (only ``BUILD_*``,
``USE_*``, ``CMAKE_*`` and a fixed list). ``CMAKE_PROJECT_INCLUDE_BEFORE`` is forwarded, and names
the shipped ``gpu_asserts.cmake``, which sets it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rocm_build.common.arch import FLASH_PREFIXES, flash_targets
from rocm_build.common.errors import ConfigError
from rocm_build.config.schema import FeatureSettings

__all__ = [
    "ATTENTION",
    "CK_HEADER",
    "FLASH_PREFIXES",
    "GPU_ASSERTS_CMAKE",
    "MSLK_TARGETS",
    "Feature",
    "aotriton_state",
    "decide",
    "flash_attention",
    "given_wins",
    "torch_env",
]

#: The two switches of aotriton's attention kernels, always set together.
ATTENTION = ("USE_FLASH_ATTENTION", "USE_MEM_EFF_ATTENTION")
#: Sets ROCM_FORCE_ENABLE_GPU_ASSERTS before each project() of torch's CMake run.
GPU_ASSERTS_CMAKE = Path(__file__).resolve().with_name("gpu_asserts.cmake")
#: composable_kernel's main header in torch's checkout: torch builds CK from this submodule.
CK_HEADER = Path("third_party") / "composable_kernel" / "include" / "ck" / "ck.hpp"
#: Targets torch's default builds MSLK for (its FP8 grouped GEMM kernels).
MSLK_TARGETS = ("gfx942", "gfx950")
_INCLUDE = "CMAKE_PROJECT_INCLUDE_BEFORE"

USER = "user setting"
DEFAULT = "the train's default for these targets"
UNSUPPORTED = "not supported on these targets"


@dataclass(frozen=True)
class Feature:
    """One feature of torch's build: on or off, why, and the variables written for it (none
    when the train's default decides)."""

    name: str
    on: bool
    why: str
    env: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "on": self.on, "why": self.why, "env": dict(self.env)}

    def describe(self) -> str:
        return f"{self.name}: {'on' if self.on else 'off'} ({self.why})"


def flash_attention(setting: str, *, targets: Sequence[str]) -> bool:
    """Whether torch is built with flash attention, as far as the setting and targets say."""
    if setting == "off":
        return False
    if setting == "on" and not flash_targets(targets):
        msg = (
            f"features.flash_attention = on, but no target has aotriton kernels "
            f"({', '.join(targets) or 'none'}; they start with {', '.join(FLASH_PREFIXES)}); "
            "set it to auto or off"
        )
        raise ConfigError(msg)
    return bool(flash_targets(targets))


def _flash(setting: str, targets: Sequence[str]) -> Feature:
    on = flash_attention(setting, targets=targets)
    if setting in ("on", "off"):
        return Feature("flash_attention", on, USER, dict.fromkeys(ATTENTION, "1" if on else "0"))
    return Feature("flash_attention", on, DEFAULT if on else f"{UNSUPPORTED} (no aotriton kernels)")


def _switch(name: str, setting: bool | None, default: bool, *names: str) -> Feature:
    if setting is None:
        return Feature(name, default, DEFAULT if default else UNSUPPORTED)
    return Feature(name, setting, USER, dict.fromkeys(names, "1" if setting else "0"))


def decide(features: FeatureSettings, *, targets: Sequence[str]) -> tuple[Feature, ...]:
    """Each feature of torch's build for ``targets``: on or off, why, and what is written."""
    mslk = any(t in MSLK_TARGETS for t in targets)
    asserts = features.gpu_asserts
    return (
        _flash(features.flash_attention, targets),
        _switch("ck_sdpa", features.ck_sdpa, True, "USE_ROCM_CK_SDPA"),
        _switch("ck_gemm", features.ck_gemm, True, "USE_ROCM_CK_GEMM"),
        _switch("mslk", features.mslk, mslk, "USE_MSLK", "USE_FBGEMM_GENAI"),
        Feature("gpu_asserts", asserts, USER if asserts else DEFAULT),
    )


def given_wins(feature: Feature, given: Mapping[str, str]) -> Feature:
    """``feature`` as the user's own variables (``build_env``, the environment) set it."""
    names = {
        "flash_attention": ATTENTION,
        "ck_sdpa": ("USE_ROCM_CK_SDPA",),
        "ck_gemm": ("USE_ROCM_CK_GEMM",),
        "mslk": ("USE_MSLK", "USE_FBGEMM_GENAI"),
    }.get(feature.name, ())
    set_by_user = [n for n in names if n in given]
    if not set_by_user:
        return feature
    on = given[set_by_user[0]].strip().lower() not in ("0", "off", "false", "no", "n", "")
    why = f"{USER} ({', '.join(f'{n}={given[n]}' for n in set_by_user)})"
    return replace(feature, on=on, why=why, env={})


def torch_env(
    features: FeatureSettings,
    *,
    targets: Sequence[str],
    given: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables torch's build gets for the features (``given``: its environment so far)."""
    env: dict[str, str] = {}
    for feature in decide(features, targets=targets):
        env.update(feature.env)
    if features.gpu_asserts:
        if (given or {}).get(_INCLUDE):
            msg = (
                f"features.gpu_asserts needs {_INCLUDE} for torch's build, but it is already set "
                f"({given and given[_INCLUDE]}); unset it, or set "
                "ROCM_FORCE_ENABLE_GPU_ASSERTS ON in your file and turn gpu_asserts off"
            )
            raise ConfigError(msg)
        env[_INCLUDE] = str(GPU_ASSERTS_CMAKE)
    return env


def aotriton_state(feature: Feature, env: Mapping[str, str], setting: str) -> Feature:
    """Flash attention as the aotriton switch left it: off when no aotriton is at hand (the
    build would download it mid-build), an error when the user asked for it on."""
    if feature.name != "flash_attention" or not feature.on or feature.why.startswith(f"{USER} ("):
        return feature
    if env.get("USE_FLASH_ATTENTION") != "0":
        return feature
    if setting == "on":
        msg = (
            "features.flash_attention = on needs aotriton, and there is none pre-fetched "
            "(see the plan's aotriton note): unpack an aotriton release for this ROCm and "
            "set build.aotriton to its folder, or set features.flash_attention to auto or off"
        )
        raise ConfigError(msg)
    why = "no aotriton at hand: the build would download it mid-build (see the note: fetch it)"
    return replace(feature, on=False, why=why, env={})
