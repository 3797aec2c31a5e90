"""Finding libraries by the name the loader looks up: the ROCm tree's folders, then the build
machine's (``LD_LIBRARY_PATH``, ld.so.conf, the defaults)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from rocm_build.binary import elf
from rocm_build.common.treepath import TreeGuard, denied, reading

__all__ = ["Candidate", "LibraryIndex", "Resolver", "system_lib_dirs", "tree_lib_dirs"]

#: Library folders of a ROCm tree, searched in this order (TheRock dist layout, then /opt/rocm).
TREE_LIB_DIRS = (
    "lib",
    "lib/llvm/lib",
    "lib/rocm_sysdeps/lib",
    "lib/host-math/lib",
    "lib64",
    "llvm/lib",
)
MACHINE_ARCH = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_PPC64": "ppc64le"}


@dataclass(frozen=True)
class Candidate:
    """A library file found on the build machine."""

    path: Path  # as found (may be a symlink named like the soname)
    origin: Literal["rocm", "system"]
    info: elf.ElfInfo


def tree_lib_dirs(rocm: Path) -> list[Path]:
    return [rocm / d for d in TREE_LIB_DIRS if (rocm / d).is_dir()]


def system_lib_dirs(
    machine: str = "EM_X86_64",
    *,
    env: Mapping[str, str] | None = None,
    ld_so_conf: Path = Path("/etc/ld.so.conf"),
) -> list[Path]:
    """The build machine's library folders, as the dynamic loader would search them:
    ``LD_LIBRARY_PATH`` (of ``env``), then ``ld_so_conf`` and its includes, then the defaults."""
    dirs: list[Path] = [
        Path(p) for p in (env or {}).get("LD_LIBRARY_PATH", "").split(os.pathsep) if p
    ]

    def conf(path: Path, depth: int = 0) -> None:
        if depth > 5 or not path.is_file():
            return
        for raw in path.read_text(errors="replace").splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include"):
                pattern = line.split(None, 1)[1]
                base = Path(pattern) if pattern.startswith("/") else path.parent / pattern
                for inc in sorted(base.parent.glob(base.name)):
                    conf(inc, depth + 1)
            else:
                dirs.append(Path(line))

    conf(ld_so_conf)
    arch = MACHINE_ARCH.get(machine, "x86_64")
    multiarch = f"{arch}-linux-gnu"
    dirs += [
        Path(p) for p in (f"/lib/{multiarch}", f"/usr/lib/{multiarch}", "/lib64", "/usr/lib64")
    ]
    dirs += [Path("/lib"), Path("/usr/lib")]
    seen: set[Path] = set()
    out = []
    for d in dirs:
        if d not in seen and d.is_dir():
            seen.add(d)
            out.append(d)
    return out


class Resolver(Protocol):
    """What planning needs to find libraries (:class:`LibraryIndex` on a real machine)."""

    def find(self, name: str, like: elf.ElfInfo) -> Candidate | None: ...

    def in_tree(self, name: str) -> bool: ...

    def dangling(self, name: str) -> tuple[Path, str] | None: ...

    def dlopen_candidates(self, patterns: Sequence[str], like: elf.ElfInfo) -> list[Candidate]: ...

    def other_names(self, library: Path) -> tuple[str, ...]: ...

    def referenced(self, callers: Sequence[str], names: Iterable[str]) -> frozenset[str]: ...


@dataclass
class LibraryIndex:
    """Finds libraries by the name the loader looks up: ROCm tree folders, then system ones."""

    rocm_dirs: Sequence[Path]
    system_dirs: Sequence[Path]
    #: refuses tree files that resolve outside the tree (None: no check)
    guard: TreeGuard | None = None
    _cache: dict[Path, elf.ElfInfo | None] = field(default_factory=dict)

    def _info(self, path: Path) -> elf.ElfInfo | None:
        real = path.resolve()
        if real not in self._cache:
            try:
                self._cache[real] = elf.read_elf(real)
            except PermissionError as exc:
                raise denied(exc, f"a library for the bundle, as {path}") from None
            except (elf.NotElfError, OSError):
                self._cache[real] = None
        return self._cache[real]

    def _tree_file(self, path: Path) -> bool:
        """``path`` is a file; a tree file must not lead outside the tree."""
        with reading(f"a library folder, looking for {path.name}"):
            if not path.is_file():
                return False
        if self.guard is not None:
            self.guard.check(path)
        return True

    def find(self, name: str, like: elf.ElfInfo) -> Candidate | None:
        for origin, dirs in (("rocm", self.rocm_dirs), ("system", self.system_dirs)):
            for d in dirs:
                path = d / name
                if origin == "rocm" and not self._tree_file(path):
                    continue
                if origin == "system" and not path.is_file():
                    continue
                info = self._info(path)
                if info and info.machine == like.machine and info.elf_class == like.elf_class:
                    return Candidate(path, origin, info)  # type: ignore[arg-type]
        return None

    def in_tree(self, name: str) -> bool:
        return any((d / name).is_file() for d in self.rocm_dirs)

    def dangling(self, name: str) -> tuple[Path, str] | None:
        """The tree's link named ``name`` that leads nowhere, and its target, if there is one
        (so a "missing" library is reported as the broken link it is)."""
        for d in self.rocm_dirs:
            path = d / name
            if path.is_symlink() and not path.exists():
                return path, str(path.readlink())
        return None

    def dlopen_candidates(self, patterns: Sequence[str], like: elf.ElfInfo) -> list[Candidate]:
        """One candidate per real file matching ``patterns`` in the ROCm tree."""
        found: dict[Path, Candidate] = {}
        for d in self.rocm_dirs:
            with reading("a library folder of the ROCm tree"):
                listing = sorted(d.iterdir())
            for path in listing:
                if not any(fnmatch.fnmatch(path.name, p) for p in patterns):
                    continue
                if not self._tree_file(path):
                    continue
                real = path.resolve()
                if real in found:
                    continue
                info = self._info(path)
                if info and info.machine == like.machine and info.elf_class == like.elf_class:
                    found[real] = Candidate(path, "rocm", info)
        return list(found.values())

    def stems(self) -> frozenset[str]:
        """Library names of the tree without their version (``libhsa-runtime64``): a library
        of that name must come from the tree, whatever its version."""
        names: set[str] = set()
        for d in self.rocm_dirs:
            with reading("a library folder of the ROCm tree"):
                names |= {n.split(".so", 1)[0] for n in os.listdir(d) if ".so" in n}
        return frozenset(n for n in names if n.startswith("lib"))

    def other_names(self, library: Path) -> tuple[str, ...]:
        """Every name ``library``'s file has in its folder and the tree: symlinks, real name."""
        real = library.resolve()
        stem = real.name.split(".so", 1)[0]
        dirs = dict.fromkeys([*self.rocm_dirs, real.parent])
        names = {p.name for d in dirs for p in d.glob(f"{stem}.so*") if p.resolve() == real}
        return tuple(sorted(names))

    def referenced(self, callers: Sequence[str], names: Iterable[str]) -> frozenset[str]:
        """Which of ``names`` one of the ELF files ``callers`` holds as a string constant."""
        left, found = set(names), set[str]()
        for caller in callers:
            if not left:
                break
            hits = elf.strings_present(caller, left)
            found |= hits
            left -= hits
        return frozenset(found)
