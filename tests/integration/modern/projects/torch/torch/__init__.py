"""A torch-shaped fixture that imports like torch: loading it loads its HIP library (as torch
loads libtorch_hip), and it answers what the smoke suite asks of torch."""

import ctypes
import json
import types
from pathlib import Path

from . import version
from .version import __version__

_HERE = Path(__file__).resolve().parent
# RTLD_GLOBAL: torchvision's extension resolves this library's symbols, as with real torch.
_lib = ctypes.CDLL(str(_HERE / "lib" / "libtorch_fixture_hip.so"), mode=ctypes.RTLD_GLOBAL)
_targets = json.loads((_HERE / "_build_env.json").read_text()).get("PYTORCH_ROCM_ARCH", "")


def _hip_version() -> str:
    """The HIP runtime's version (major.minor.patch), from the runtime this process loaded."""
    value = ctypes.c_int(0)
    ctypes.CDLL(None).hipRuntimeGetVersion(ctypes.byref(value))
    v = value.value
    return f"{v // 10_000_000}.{v // 100_000 % 100}.{v % 100_000}"


version.hip = _hip_version()
version.cuda = None
_C = types.SimpleNamespace(_cuda_getArchFlags=lambda: " ".join(_targets.split(";")))
float32 = "float32"


class _Tensor(list):
    def tolist(self) -> list:
        return list(self)


def tensor(data, dtype=None):
    return _Tensor(data)


ops = types.SimpleNamespace(torchvision=types.SimpleNamespace())

from . import cuda  # noqa: E402

__all__ = ["__version__", "cuda", "ops", "tensor", "version"]
