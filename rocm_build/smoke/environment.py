"""The environment the smoke run gets: every ROCm, compiler and Python search location removed,
so a library that would load from a system ROCm or the build tree fails the run."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["SCRUBBED_VARIABLES", "scrub_environment"]

#: Variables that point a process at a ROCm install, a compiler, or other Python code. The smoke
#: run must find everything through the wheels' own search paths, so none of these survive.
SCRUBBED_VARIABLES = (
    "ROCM_PATH",
    "ROCM_HOME",
    "ROCM_ROOT",
    "ROCM_SOURCE_DIR",
    "HIP_PATH",
    "HIP_CLANG_PATH",
    "HIP_DEVICE_LIB_PATH",
    "HIP_PLATFORM",
    "HSA_PATH",
    "HIPCC_COMPILE_FLAGS_APPEND",
    "DEVICE_LIB_PATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "LIBRARY_PATH",
    "CPATH",
    "CMAKE_PREFIX_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "PYTORCH_ROCM_ARCH",
)


def scrub_environment(env: Mapping[str, str], forbidden: Sequence[Path]) -> dict[str, str]:
    """``env`` without ROCM/compiler/Python search variables, and PATH without ROCm folders."""
    out = {
        k: v
        for k, v in env.items()
        if k not in SCRUBBED_VARIABLES and not k.startswith("ROCM_BUILD_")
    }
    kept = []
    for entry in env.get("PATH", "").split(os.pathsep):
        if not entry:
            continue
        path = Path(entry)
        if "rocm" in entry.lower() or any(path.is_relative_to(bad) for bad in forbidden):
            continue
        kept.append(entry)
    out["PATH"] = os.pathsep.join(kept) or os.defpath
    out["PYTHONNOUSERSITE"] = "1"
    out["PYTHONDONTWRITEBYTECODE"] = "1"
    return out
