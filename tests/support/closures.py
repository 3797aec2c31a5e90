"""A bundle's library closure planned from ELF facts alone: ``lib`` makes the facts of one
library, ``TreeIndex`` a ROCm tree and a system described by them, ``ROCM`` a small tree (HIP, HSA,
numa, comgr) and ``plan`` the closure of a wheel with some ELF members (the unit tests of
``rocm_build.bundle.closure`` and of where a bundle's files come from)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from rocm_build.binary.elf import ElfInfo
from rocm_build.bundle.closure import ClosureInput, ClosureRules, resolve_closure
from rocm_build.bundle.libraries import Candidate
from rocm_build.bundle.model import Closure
from rocm_build.bundle.policy import policy_whitelist
from rocm_build.wheel.wheelfile import WheelName

GLIBC = (("libc.so.6", ("GLIBC_2.2.5", "GLIBC_2.14")),)


def lib(path: str, *needed: str, soname: str | None = None, rpath: tuple[str, ...] = (),
        runpath: tuple[str, ...] = (), versions: tuple = GLIBC) -> ElfInfo:  # fmt: skip
    return ElfInfo(
        path=path, machine="EM_X86_64", elf_class=64, elf_type="ET_DYN", soname=soname,
        needed=needed, rpath=rpath, runpath=runpath,
        version_needs=tuple(v for _, vs in versions for v in vs), has_fatbin=False,
        versions_by_library=versions,
    )  # fmt: skip


@dataclass
class TreeIndex:
    """A ROCm tree and a system, described by name -> ElfInfo (the plan only sees facts)."""

    rocm: dict[str, ElfInfo]
    system: dict[str, ElfInfo] = field(default_factory=dict)
    links: dict[str, tuple[str, ...]] = field(default_factory=dict)  # name -> all its names
    strings: dict[str, frozenset[str]] = field(default_factory=dict)  # ELF path -> constants

    def find(self, name: str, like: ElfInfo) -> Candidate | None:
        if name in self.rocm:
            return Candidate(Path("/rocm/lib") / name, "rocm", self.rocm[name])
        if name in self.system:
            return Candidate(Path("/usr/lib") / name, "system", self.system[name])
        return None

    def in_tree(self, name: str) -> bool:
        return name in self.rocm

    def dangling(self, name: str) -> tuple[Path, str] | None:
        return None  # the fake tree has no links

    def dlopen_candidates(self, patterns: Sequence[str], like: ElfInfo) -> list[Candidate]:
        import fnmatch

        return [
            Candidate(Path("/rocm/lib") / n, "rocm", info)
            for n, info in sorted(self.rocm.items())
            if any(fnmatch.fnmatch(n, p) for p in patterns)
        ]

    def other_names(self, library: Path) -> tuple[str, ...]:
        return self.links.get(library.name, (library.name,))

    def referenced(self, callers: Sequence[str], names: Iterable[str]) -> frozenset[str]:
        held = frozenset().union(*(self.strings.get(c, frozenset()) for c in callers))
        return held & frozenset(names)


ROCM = TreeIndex(
    rocm={
        "libamdhip64.so.5": lib(
            "hip",
            "libhsa-runtime64.so.1",
            "libstdc++.so.6",
            soname="libamdhip64.so.5",
            runpath=("$ORIGIN",),
        ),
        "libhsa-runtime64.so.1": lib("hsa", "libnuma.so.1", soname="libhsa-runtime64.so.1"),
        "libnuma.so.1": lib("numa", "libc.so.6", soname="libnuma.so.1"),
        "libamd_comgr.so.2": lib("comgr", "libc.so.6", soname="libamd_comgr.so.2"),
    },
    system={"libtinfo.so.6": lib("tinfo", "libc.so.6", soname="libtinfo.so.6")},
)


def plan(elves: dict[str, ElfInfo], *, index: TreeIndex = ROCM, **kw: object) -> Closure:
    """A plan for a wheel with these ELF members; ``kw`` sets fields of the wheel
    (:class:`ClosureInput`) or of the rules (:class:`ClosureRules`)."""
    wheel: dict[str, object] = {
        "input_path": Path("in.whl"),
        "output_path": Path("out.whl"),
        "wheel_name": WheelName.parse("ext-1.0-cp311-cp311-linux_x86_64.whl"),
        "metadata": "Metadata-Version: 2.1\nName: ext\nVersion: 1.0\n",
        "members": list(elves),
        "elves": elves,
    }
    rules: dict[str, object] = {
        "lib_dir": "ext/lib",
        "targets": ("gfx90a",),
        "dlopen_patterns": ("libamd_comgr.so*",),
        "whitelist": policy_whitelist(),
    }
    for key, value in kw.items():
        (wheel if key in wheel else rules)[key] = value
    inputs = ClosureInput(**wheel)  # type: ignore[arg-type]
    return resolve_closure(inputs, index, ClosureRules(**rules))  # type: ignore[arg-type]
