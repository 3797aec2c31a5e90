"""The compiler cache for device code compiled through hipcc.

torch 2.9-2.12 compile their ``.hip`` files through hipcc (FindHIP's custom commands), which runs
clang by absolute path: ``CMAKE_<LANG>_COMPILER_LAUNCHER`` never sees those compiles, and they
are the slow part (device code for every target). hipcc from ROCm 7.13 on reads
``HIP_CLANG_LAUNCHER`` (TheRock sets it); older hipccs do not (Debian's 5.2 ``hipcc.pl`` and the
7.0 ``hipcc`` binary name no such variable), but all read ``HIP_CLANG_PATH``, the folder they run
clang from. For those, the build's ``HIP_CLANG_PATH`` is a folder of rocm-build's own: a small
script per clang driver that runs the real one through the cache, links to every other tool,
and ``lib`` beside it (hipcc finds clang's headers at ``$HIP_CLANG_PATH/../lib/clang``).

``plan_launcher`` decides (pure: it reads the tree's hipcc, writes nothing); ``write`` makes the
folder, just before a build.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.building.compilercache import CompilerCache
from rocm_build.common import statefile
from rocm_build.rocm import dist

__all__ = ["HipLauncher", "hipcc_reads_launcher", "plan_launcher", "write"]

#: The variable hipcc (7.13 and newer) runs clang through: ``"$HIP_CLANG_LAUNCHER" clang ...``.
LAUNCHER_VAR = "HIP_CLANG_LAUNCHER"
#: The clang drivers hipcc runs (Debian's hipcc asks for ``clang++-15``/``clang-15``).
DRIVER = re.compile(r"^(?:amd)?clang(?:\+\+)?(?:-\d+)?$")
#: The hipcc programs to read: the script or binary, and the perl or binary it hands over to.
HIPCC_FILES = ("hipcc", "hipcc.pl", "hipcc.bin")
_READ_LIMIT = 64 << 20


def hipcc_reads_launcher(hipcc: Path) -> bool:
    """Whether the tree's hipcc (``bin/hipcc`` and what it hands over to) names
    ``HIP_CLANG_LAUNCHER`` anywhere: perl script or C++ binary, the variable's name is in it."""
    for name in HIPCC_FILES:
        path = hipcc.parent / name
        try:
            if not path.is_file() or path.stat().st_size > _READ_LIMIT:
                continue
            if LAUNCHER_VAR.encode() in path.read_bytes():
                return True
        except OSError:
            continue
    return False


@dataclass(frozen=True)
class HipLauncher:
    """How hipcc's clang runs through the compiler cache: ``route`` is ``HIP_CLANG_LAUNCHER``
    (the tree's hipcc reads it) or ``HIP_CLANG_PATH`` (a folder of wrappers, ``folder``)."""

    route: str
    program: Path
    clang_dir: Path
    folder: Path | None = None  # the wrappers' bin folder (HIP_CLANG_PATH route)

    @property
    def env(self) -> dict[str, str]:
        if self.folder is not None:
            return {"HIP_CLANG_PATH": str(self.folder)}
        return {}

    def as_json(self) -> dict[str, Any]:
        return {
            "route": self.route,
            "program": str(self.program),
            "folder": str(self.folder) if self.folder else None,
        }

    def describe(self) -> str:
        if self.folder is None:
            return f"hipcc's device compiles through {self.program} ({LAUNCHER_VAR})"
        return (
            f"hipcc's device compiles through {self.program} (HIP_CLANG_PATH={self.folder}: "
            f"this tree's hipcc does not read {LAUNCHER_VAR})"
        )


def plan_launcher(cache: CompilerCache, tree: dist.RocmTree, work_dir: Path) -> HipLauncher | None:
    """The route for hipcc's compiles, or None (no cache, no hipcc or no clang in the tree)."""
    if not cache.enabled or cache.program is None:
        return None
    if tree.hipcc is None or tree.clang_dir is None:
        return None
    if hipcc_reads_launcher(tree.hipcc):
        return HipLauncher(LAUNCHER_VAR, cache.program, tree.clang_dir)
    folder = work_dir / "hip-clang" / cache.kind / "bin"
    return HipLauncher("HIP_CLANG_PATH", cache.program, tree.clang_dir, folder)


def _script(program: Path, real: Path) -> bytes:
    text = f'#!/bin/sh\nexec {shlex.quote(str(program))} {shlex.quote(str(real))} "$@"\n'
    return text.encode("utf-8")


def write(launcher: HipLauncher) -> None:
    """Make the wrappers' folder anew (HIP_CLANG_PATH route; nothing for the other): made under
    a temporary name beside it and renamed into place, the old one (rocm-build's own, checked)
    removed first."""
    if launcher.folder is None:
        return
    top = launcher.folder.parent
    statefile.own_folder(top.parent, "compiler launcher folder")
    work = Path(tempfile.mkdtemp(prefix=".hip-clang-", dir=top.parent))
    try:
        bin_dir = work / "bin"
        bin_dir.mkdir()
        for entry in sorted(launcher.clang_dir.iterdir()):
            if DRIVER.match(entry.name):
                data = _script(launcher.program, entry)
                statefile.write_bytes(bin_dir / entry.name, data, "compiler wrapper", mode=0o755)
            else:
                os.symlink(entry, bin_dir / entry.name)
        os.symlink(launcher.clang_dir.parent / "lib", work / "lib")
        if statefile.check_folder(top, "compiler launcher folder") is not None:
            shutil.rmtree(top)
        work.rename(top)
    finally:
        shutil.rmtree(work, ignore_errors=True)
