"""The bundle's data: what it grafts, edits and adds (:class:`Closure`), and what came of it."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from rocm_build.binary import elf
from rocm_build.bundle.device import DeviceFile
from rocm_build.bundle.kpacked import NO_KPACK, KpackPlan
from rocm_build.wheel import wheelmeta
from rocm_build.wheel.wheelfile import WheelReader

__all__ = [
    "BundleResult",
    "Closure",
    "DataFile",
    "Library",
    "PlanSummary",
    "RpathChange",
    "ThinSource",
    "TorchWheel",
]


@dataclass(frozen=True)
class Library:
    """A library grafted into the wheel."""

    name: str  # file name in the wheel: the name the loader looks up
    arcname: str
    source: str  # real file on the build machine
    origin: Literal["rocm", "system"]
    reason: Literal["needed", "dlopen"]
    needed_by: tuple[str, ...]
    info: elf.ElfInfo
    #: other names a library in the wheel passes to ``dlopen`` for this one (its unversioned
    #: symlink, say). A wheel cannot hold the symlink, and a copy would be a second instance when
    #: the library is loaded by its soname too, so each alias is a stub library that NEEDs it.
    aliases: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        """Its size in the tree (before any pruning; 0 when it is gone)."""
        return _file_size(self.source)


@dataclass(frozen=True)
class RpathChange:
    arcname: str
    old: tuple[str, ...]
    new: str
    #: written as DT_RUNPATH (thin wheels' entries into ROCm's package folders), not DT_RPATH
    runpath: bool = False


@dataclass(frozen=True)
class DataFile:
    source: str
    arcname: str
    size: int
    #: its mode in the wheel: 0o755 when the tree's file is executable (a helper program)
    mode: int = 0o644
    #: a program's new search path (``$ORIGIN``-relative, to the bundled libraries); None: data
    rpath: str | None = None


@dataclass(frozen=True)
class TorchWheel:
    """A torch fat wheel that another wheel (torchvision, torchaudio) takes libraries from."""

    path: str
    version: str
    lib_dir: str
    libs: Mapping[str, str]  # file name -> arcname

    @classmethod
    def read(cls, path: Path, lib_dir: str) -> TorchWheel:
        with WheelReader(path) as reader:
            prefix = lib_dir.rstrip("/") + "/"
            libs = {
                m.name[len(prefix) :]: m.name
                for m in reader.members
                if m.name.startswith(prefix) and "/" not in m.name[len(prefix) :]
                if ".so" in m.name or m.name.endswith(".dll")
            }
            version = wheelmeta.metadata_version(reader.metadata()) or reader.name.version
        return cls(str(path), version, lib_dir, libs)

    @classmethod
    def planned(cls, plan: Closure, members: Sequence[str], lib_dir: str) -> TorchWheel:
        """The torch fat wheel ``plan`` will write, from the torch wheel's ``members``: the
        libraries :meth:`read` will find in it once written."""
        written = {m for m in members if m not in plan.left_out and m not in plan.images_out}
        for lib in plan.libraries:
            written.add(lib.arcname)
            written.update(posixpath.join(plan.lib_dir, a) for a in lib.aliases)
        if plan.own_hip_alias:
            written.add(plan.own_hip_alias)
        prefix = lib_dir.rstrip("/") + "/"
        libs = {
            m[len(prefix) :]: m
            for m in sorted(written)
            if m.startswith(prefix) and "/" not in m[len(prefix) :]
            if ".so" in m or m.endswith(".dll")
        }
        return cls(plan.output, plan.version, lib_dir, libs)

    def moved(self, folder: Path) -> TorchWheel:
        """The same wheel written into ``folder``."""
        return replace(self, path=str(folder / Path(self.path).name))


@dataclass(frozen=True)
class Closure:
    input: str
    output: str
    distribution: str
    version: str
    lib_dir: str
    targets: tuple[str, ...]  # () = keep every target's data
    libraries: tuple[Library, ...]
    rpaths: tuple[RpathChange, ...]  # wheel members whose search path changes
    data: tuple[DataFile, ...]
    data_skipped: int  # data files left out: other gfx targets
    from_torch: tuple[tuple[str, str], ...]  # (library, arcname in the torch wheel)
    requires: tuple[str, ...]  # Requires-Dist to set
    system_libs: tuple[str, ...]  # NEEDED names the policy leaves to the system
    platform_tag: str
    provenance_arcname: str
    fingerprint: str
    #: data trees with gfx-named files but none for some requested targets: (tree, targets)
    data_missing: tuple[tuple[str, tuple[str, ...]], ...] = ()
    #: members not copied: another ROCm's copies of libraries the bundle adds, unused
    left_out: tuple[str, ...] = ()
    #: such copies kept (``bundle.keep_other_rocm``)
    other_rocm: tuple[str, ...] = ()
    #: the wheel's own HIP runtimes its files use in place of the tree's (outside lib_dir)
    own_hip: tuple[str, ...] = ()
    #: ``<lib_dir>/libamdhip64.so``, an alias stub of the wheel's own HIP runtime in use (the
    #: name Triton opens), when neither the wheel nor the bundle has one there; "" = none
    own_hip_alias: str = ""
    #: the targets of a fat wheel of the same name this bundle replaces, made for other GPUs
    replaces_targets: tuple[str, ...] | None = None
    #: targets the device code is pruned for and checked against (features kept); () = none
    device_targets: tuple[str, ...] = ()
    #: the written ELF files with device code
    device: tuple[DeviceFile, ...] = ()
    #: requested targets without code in a written library: one line each
    device_gaps: tuple[str, ...] = ()
    #: members left out: aotriton image folders for families that serve no requested target
    images_out: tuple[str, ...] = ()
    images_out_families: tuple[str, ...] = ()
    #: the kpack archives the kpack-split libraries need (stored in the wheel)
    kpack: KpackPlan = NO_KPACK
    #: thin: (library, folder of ROCm's packages that installs it), as the tree is packaged
    from_packages: tuple[tuple[str, str], ...] = ()
    #: the tree files the plan read (libraries, data files, kpack archives), as the plan saw
    #: them (``statefile.file_facts``): ``execute`` writes them only while they are so
    sources: tuple[tuple[Any, ...], ...] = ()
    #: the input wheel as the plan read it (``statefile.stat_facts`` of the open file)
    input_facts: tuple[int, ...] = ()
    #: ``--exclude``d NEEDED names, not bundled (found at run time), and who needs each
    excluded: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def changes_content(self) -> bool:
        pruned = any(d.pruned for d in self.device)
        return bool(
            self.libraries
            or self.rpaths
            or self.data
            or self.requires
            or self.left_out
            or self.images_out
            or self.kpack.archives
            or pruned
        )

    @property
    def from_system(self) -> tuple[Library, ...]:
        """The libraries taken from the build machine instead of the ROCm tree."""
        return tuple(lib for lib in self.libraries if lib.origin == "system")

    @property
    def data_bytes(self) -> int:
        return sum(d.size for d in self.data)

    def as_json(self) -> dict[str, Any]:
        """The closure for ``--json``, the dry run's lines' source and the provenance record."""
        return {
            "input": self.input,
            "output": self.output,
            "lib_dir": self.lib_dir,
            "targets": list(self.targets),
            "platform_tag": self.platform_tag,
            "libraries": [
                {
                    "name": lib.name,
                    "origin": lib.origin,
                    "reason": lib.reason,
                    "source": lib.source,
                    "needed_by": list(lib.needed_by),
                    "aliases": list(lib.aliases),
                    "size": lib.size,  # as in the tree (before any pruning)
                }
                for lib in self.libraries
            ],
            "from_system": [{"name": lib.name, "source": lib.source} for lib in self.from_system],
            "rpaths": [asdict(r) for r in self.rpaths],
            "data_files": len(self.data),
            "data_bytes": self.data_bytes,
            "data_skipped": self.data_skipped,
            "data_missing": {tree: list(missing) for tree, missing in self.data_missing},
            "from_torch": [name for name, _ in self.from_torch],
            "requires": list(self.requires),
            "system_libs": list(self.system_libs),
            "excluded": [{"name": n, "needed_by": list(w)} for n, w in self.excluded],
            "version": self.version,
            "left_out": list(self.left_out),
            "aotriton_images_dropped": list(self.images_out_families),
            "other_rocm": list(self.other_rocm),
            "own_hip": list(self.own_hip),
            "own_hip_alias": self.own_hip_alias,
            "replaces_targets": (
                None if self.replaces_targets is None else list(self.replaces_targets)
            ),
            "device_targets": list(self.device_targets),
            "device_code": {d.arcname: d.summary().as_json() for d in self.device},
            "device_gaps": list(self.device_gaps),
            "kpack": self.kpack.summary(),
        }


def _file_size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


# --- library lookup -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThinSource:
    """Where a thin wheel's ROCm libraries come from: ROCm's Python packages at ``version``."""

    version: str
    family: str
    folders: Mapping[str, tuple[str, str]]  # NEEDED name -> (distribution, site-packages folder)
    #: a kpack-split tree's packages: the requirement (``rocm[...]``) that installs ``meta_for``
    #: (the libraries package), its device packages and core; "" for per-family packages
    meta: str = ""
    meta_for: str = ""

    def requirements(self, dists: Iterable[str]) -> list[str]:
        """What the wheel requires to get the packages ``dists``: each at the version, or
        :attr:`meta` alone when it installs them all (as PyTorch's ROCm wheels require)."""
        wanted = sorted(set(dists))
        if self.meta and self.meta_for in wanted:
            return [self.meta]
        return [f"{d}=={self.version}" for d in wanted]


class PlanSummary(Protocol):
    """What a platform other than Linux decided for a wheel, for people and ``--json``
    (Windows: :class:`.windows.WindowsSummary`)."""

    def as_json(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class BundleResult:
    input: str
    output: str
    status: Literal["bundled", "up-to-date", "unchanged", "planned"]
    seconds: float
    #: what was (or would be) done: a Linux wheel's :class:`Closure`, another platform's summary
    plan: Closure | PlanSummary | None = None
    #: why the output needs ZIP64 (sizes or offsets past 4 GiB, over 65,535 members); () = not
    zip64: tuple[str, ...] = ()
    #: the platform that bundled it (``bundle.platform``): its lines put the result into words
    platform: str = "linux"

    @property
    def closure(self) -> Closure | None:
        """The Linux closure, if this result has one."""
        return self.plan if isinstance(self.plan, Closure) else None

    def as_json(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "status": self.status,
            "seconds": self.seconds,
            "plan": None if self.plan is None else self.plan.as_json(),
            "zip64": list(self.zip64),
        }
