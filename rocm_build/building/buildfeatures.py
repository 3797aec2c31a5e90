"""torch's ROCm build features (``[features]``), decided before anything is built.

Flash attention on ROCm is aotriton, switched by ``USE_FLASH_ATTENTION`` and
``USE_MEM_EFF_ATTENTION`` together. ``auto`` follows TheRock's rule: on when Triton is built in the
same run and a requested target has aotriton kernels (a name starting with one of
``FLASH_PREFIXES``); an explicit ``on`` without Triton, or with no such target, is an error.

GPU kernel asserts: torch's CMake keeps them off on ROCm unless ``ROCM_FORCE_ENABLE_GPU_ASSERTS`` is
set, a CMake variable its ``setup.py`` does not forward from the environment (only ``BUILD_*``,
``USE_*``, ``CMAKE_*`` and a fixed list). ``CMAKE_PROJECT_INCLUDE_BEFORE`` is forwarded, and names
the shipped ``gpu_asserts.cmake``, which sets it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from rocm_build.arch import FLASH_PREFIXES, flash_targets
from rocm_build.config.schema import FeatureSettings
from rocm_build.errors import ConfigError

__all__ = ["ATTENTION", "FLASH_PREFIXES", "GPU_ASSERTS_CMAKE", "flash_attention", "torch_env"]

#: The two switches of aotriton's attention kernels, always set together.
ATTENTION = ("USE_FLASH_ATTENTION", "USE_MEM_EFF_ATTENTION")
#: Sets ROCM_FORCE_ENABLE_GPU_ASSERTS before each project() of torch's CMake run.
GPU_ASSERTS_CMAKE = Path(__file__).resolve().with_name("gpu_asserts.cmake")
_INCLUDE = "CMAKE_PROJECT_INCLUDE_BEFORE"


def flash_attention(setting: str, *, triton: bool, targets: Sequence[str]) -> bool:
    """Whether torch is built with flash attention."""
    supported = flash_targets(targets)
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


def torch_env(
    features: FeatureSettings,
    *,
    triton: bool,
    targets: Sequence[str],
    given: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The variables torch's build gets for the features (``given``: its environment so far)."""
    flash = flash_attention(features.flash_attention, triton=triton, targets=targets)
    on = "1" if flash else "0"
    env = {
        "USE_FLASH_ATTENTION": on,
        "USE_MEM_EFF_ATTENTION": on,
        "USE_ROCM_CK_SDPA": "1" if features.ck_sdpa else "0",
        "USE_ROCM_CK_GEMM": "1" if features.ck_gemm else "0",
    }
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
