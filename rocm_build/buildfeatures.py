"""torch's ROCm build features (``[features]``), decided before anything is built.

Flash attention on ROCm is aotriton, switched by ``USE_FLASH_ATTENTION`` and
``USE_MEM_EFF_ATTENTION`` together. ``auto`` follows TheRock's rule: on when Triton is built in the
same run and a requested target has aotriton kernels (a name starting with one of
``FLASH_PREFIXES``); an explicit ``on`` without Triton, or with no such target, is an error.
"""

from __future__ import annotations

from collections.abc import Sequence

from .configschema import FeatureSettings
from .errors import ConfigError

__all__ = ["ATTENTION", "FLASH_PREFIXES", "flash_attention", "torch_env"]

#: The two switches of aotriton's attention kernels, always set together.
ATTENTION = ("USE_FLASH_ATTENTION", "USE_MEM_EFF_ATTENTION")
FLASH_PREFIXES = ("gfx90a", "gfx942", "gfx950", "gfx11", "gfx12")


def flash_attention(setting: str, *, triton: bool, targets: Sequence[str]) -> bool:
    """Whether torch is built with flash attention."""
    supported = [t for t in targets if t.startswith(FLASH_PREFIXES)]
    if setting == "off":
        return False
    if setting == "on":
        if not triton:
            msg = (
                "features.flash_attention = on needs Triton built in the same run; add triton "
                "to the projects (rocm-build build triton torch) or set it to auto or off"
            )
            raise ConfigError(msg)
        if not supported:
            msg = (
                f"features.flash_attention = on, but no target has aotriton kernels "
                f"({', '.join(targets) or 'none'}; they start with {', '.join(FLASH_PREFIXES)}); "
                "set it to auto or off"
            )
            raise ConfigError(msg)
        return True
    return triton and bool(supported)


def torch_env(features: FeatureSettings, *, triton: bool, targets: Sequence[str]) -> dict[str, str]:
    """The variables torch's build gets for the features."""
    flash = flash_attention(features.flash_attention, triton=triton, targets=targets)
    on = "1" if flash else "0"
    return {
        "USE_FLASH_ATTENTION": on,
        "USE_MEM_EFF_ATTENTION": on,
        "USE_ROCM_CK_SDPA": "1" if features.ck_sdpa else "0",
        "USE_ROCM_CK_GEMM": "1" if features.ck_gemm else "0",
    }
