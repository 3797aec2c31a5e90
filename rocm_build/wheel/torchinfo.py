"""What a torch wheel says it was built with, read from its files, never by importing it.

torch records its build in files it installs: ``torch/include/caffe2/core/macros.h`` (from CMake:
``CAFFE2_BUILD_STRINGS``, the table ``torch.__config__.show()`` prints, with ``USE_ROCM``,
``ROCM_VERSION`` and ``USE_ROCM_KERNEL_ASSERT``; and ``TORCH_DISABLE_GPU_ASSERTS`` defined or not)
and ``torch/version.py`` (``hip``). Flash attention is in no such table: a ROCm torch built with it
ships the aotriton runtime in ``torch/lib`` (``libaotriton_v2.so*``) and its kernel images in
``torch/lib/aotriton.images/amd-<family>/``, which is what is read.
"""

from __future__ import annotations

import ast
import fnmatch
import posixpath
import re
from typing import Any, Protocol

__all__ = ["MACROS", "VERSION_FILE", "build_features", "build_strings", "version_values"]

MACROS = "torch/include/caffe2/core/macros.h"
VERSION_FILE = "torch/version.py"
AOTRITON_LIB = "torch/lib/libaotriton*.so*"
AOTRITON_IMAGES = "torch/lib/aotriton.images/"
_PAIR = re.compile(r'\{\s*"(\w+)"\s*,\s*"((?:[^"\\]|\\.)*)"\s*\}')
_ON = ("ON", "1", "TRUE", "YES", "Y")


class _Members(Protocol):
    def has(self, name: str) -> bool: ...

    def read_text(self, name: str) -> str: ...


def build_strings(text: str) -> dict[str, str]:
    """``CAFFE2_BUILD_STRINGS`` of a macros.h, as a mapping (empty when it has none)."""
    start = text.find("#define CAFFE2_BUILD_STRINGS")
    if start < 0:
        return {}
    return {m.group(1): m.group(2) for m in _PAIR.finditer(text, start)}


def version_values(text: str) -> dict[str, str | None]:
    """The constant string assignments of a version.py (parsed, never run)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return {}
    out: dict[str, str | None] = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            constant = value.value
            if constant is None or isinstance(constant, str):
                out[target.id] = constant
    return out


def _gpu_asserts(strings: dict[str, str], macros: str) -> bool | None:
    if "USE_ROCM_KERNEL_ASSERT" in strings:
        return strings["USE_ROCM_KERNEL_ASSERT"].upper() in _ON
    if re.search(r"^#define TORCH_DISABLE_GPU_ASSERTS\b", macros, re.M):
        return False
    if "#undef TORCH_DISABLE_GPU_ASSERTS" in macros:
        return True
    return None


def build_features(reader: _Members, names: list[str]) -> dict[str, Any] | None:
    """The build features a torch wheel records, or None when it is not a torch wheel."""
    has_macros, has_version = reader.has(MACROS), reader.has(VERSION_FILE)
    if not (has_macros or has_version):
        return None
    macros = reader.read_text(MACROS) if has_macros else ""
    strings = build_strings(macros)
    version = version_values(reader.read_text(VERSION_FILE)) if has_version else {}
    families = sorted(
        {
            n[len(AOTRITON_IMAGES) :].split("/", 1)[0]
            for n in names
            if n.startswith(AOTRITON_IMAGES) and "/" in n[len(AOTRITON_IMAGES) :]
        }
    )
    aotriton = sorted(posixpath.basename(n) for n in names if fnmatch.fnmatch(n, AOTRITON_LIB))
    rocm = strings.get("USE_ROCM")
    return {
        "read_from": [
            f for f, there in ((MACROS, has_macros), (VERSION_FILE, has_version)) if there
        ],
        "hip": version.get("hip"),
        "rocm": None if rocm is None else rocm.upper() in _ON,
        "rocm_version": strings.get("ROCM_VERSION") or None,
        "gpu_asserts": _gpu_asserts(strings, macros) if has_macros else None,
        "flash_attention": bool(aotriton),
        "aotriton": aotriton,
        "aotriton_images": families,
    }
