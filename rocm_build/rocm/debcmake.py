"""Debian's CMake package files, made to work where a TheRock-shaped tree keeps them.

Debian installs a package's CMake files in ``usr/lib/<multiarch>/cmake/<package>/`` and its
libraries in ``usr/lib/<multiarch>/``; each file finds its prefix by climbing from its own folder
(``../../../..`` or four ``get_filename_component(... PATH)`` steps) and names its libraries under
``<prefix>/lib/<multiarch>/``. A tree keeps both one folder higher (``lib/cmake/<package>/``,
``lib/``), so as shipped every climb ends one folder above the tree and every library path is
missing: ``find_package(hip)`` and CMake's HIP language fail on a tree ``rocm debian`` made.

:func:`relocate` rewrites the three generated forms, nothing else: a climb of four or more
``..`` shortened by one, a run of four or more prefix steps on one variable shortened by one, and
``${VAR}/lib/<multiarch>`` made ``${VAR}/lib``; a rewritten file's first line says so
(:data:`MARK`), and a file carrying it is not rewritten again. Absolute ``/usr/...`` paths
stay: CMake's own "is this the original install folder" check compares against them, and no
tree is there.

Debian's hip-lang also asks for ``AMDDeviceLibs`` (``find_dependency``), which Debian does not
package; :func:`relocate` writes a config that finds the tree's device libraries (the bitcode
folder ``amdgcn/bitcode``), as a TheRock tree ships one.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["relocate"]

#: ``/..`` four times or more (a climb to the prefix or above it)
_CLIMB = re.compile(r"(?:/\.\.){4,}")
#: four or more prefix steps in a row on one variable, as CMake's install(EXPORT) writes them
#: (``_IMPORT_PREFIX``) and as hand-written configs do (comgr's ``AMD_COMGR_PREFIX``)
_FIRST = r'[ \t]*get_filename_component\((?P<var>\w+) "\$\{(?P=var)\}" PATH\)\n'
_STEP = r'[ \t]*get_filename_component\((?P=var) "\$\{(?P=var)\}" PATH\)\n'
_STEPS = re.compile(f"({_FIRST}(?:{_STEP}){{3,}})")
#: the first line of a file :func:`relocate` rewrote (it is not rewritten again)
MARK = "# rocm-build: relocated from usr/lib/<multiarch>/cmake to lib/cmake (see rocm debian)\n"
_DEVICE_LIBS = """\
# Written by rocm-build: Debian does not package this config; hip-lang asks for it.
get_filename_component(_rb_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
set(AMDDeviceLibs_DIR "${CMAKE_CURRENT_LIST_DIR}")
set(AMD_DEVICE_LIBS_PREFIX "${_rb_prefix}")
set(AMDDeviceLibs_BITCODE_DIR "${_rb_prefix}/amdgcn/bitcode")
set(AMDDeviceLibs_FOUND TRUE)
unset(_rb_prefix)
"""


def _one_step_less(match: re.Match[str]) -> str:
    return match.group(0)[len("/..") :]


def _one_line_less(match: re.Match[str]) -> str:
    lines = match.group(1).splitlines(keepends=True)
    return "".join(lines[1:])


def rewrite(text: str, multiarch: str) -> str:
    """``text`` of a Debian CMake file as it must read one folder higher in a tree."""
    text = _CLIMB.sub(_one_step_less, text)
    text = _STEPS.sub(_one_line_less, text)
    return re.sub(r"(\$\{[A-Za-z_][A-Za-z0-9_]*\})/lib/" + re.escape(multiarch), r"\1/lib", text)


def relocate(tree: Path, multiarch: str) -> list[Path]:
    """Rewrite the CMake files under ``tree/lib/cmake`` (see the module); returns those changed."""
    cmake = tree / "lib" / "cmake"
    changed = []
    for path in sorted(cmake.rglob("*.cmake")) if cmake.is_dir() else []:
        if path.is_symlink() or not path.is_file():
            continue
        text = path.read_text(errors="surrogateescape")
        new = rewrite(text, multiarch)
        if new != text and not text.startswith(MARK):
            path.write_text(MARK + new, errors="surrogateescape")
            changed.append(path)
    hip_lang = cmake / "hip-lang" / "hip-lang-config.cmake"
    device_libs = cmake / "AMDDeviceLibs" / "AMDDeviceLibsConfig.cmake"
    asks = hip_lang.is_file() and "AMDDeviceLibs" in hip_lang.read_text(errors="replace")
    # a link there (even a dangling one) is a package's: never written through
    if asks and not device_libs.exists() and not device_libs.is_symlink():
        device_libs.parent.mkdir(parents=True, exist_ok=True)
        device_libs.write_text(_DEVICE_LIBS)
        changed.append(device_libs)
    return changed
