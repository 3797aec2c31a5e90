"""One pass over a wheel: what the build's wheel check, ``inspect`` and ``bundle`` need to know.

Member names were checked when the :class:`~.wheelfile.WheelReader` opened the wheel.
ELF members (and, when asked, Windows DLL/PYD members) are read where they are, through a
:class:`~.memberview.MemberView` (nothing is unpacked or written, so a plan may analyze): NEEDED,
RPATH/RUNPATH, machine and symbol versions (:class:`elf.ElfInfo`), and the device code in their
``.hip_fatbin`` (offload bundles: targets and bytes per target). Each member read is checked
against RECORD on the way.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocm_build.binary import elf, kpack, pe
from rocm_build.common import faults
from rocm_build.common.errors import BundleError
from rocm_build.wheel.memberview import MemberView
from rocm_build.wheel.wheelfile import WheelName, WheelReader

__all__ = [
    "CodeMember",
    "ElfMember",
    "PeMember",
    "WheelAnalysis",
    "analyze",
    "analyze_path",
    "may_be_elf",
]

#: Where the bundle records what it did, inside the wheel's top-level package.
PROVENANCE = ".rocm-build-bundle.json"

_NOT_ELF_SUFFIXES = (
    ".py", ".pyc", ".pyi", ".txt", ".md", ".json", ".h", ".hpp", ".cuh", ".cmake", ".pc",
    ".typed", ".cfg", ".toml", ".yaml", ".yml", ".html", ".csv", ".dat", ".co", ".hsaco",
    ".kdb", ".db", ".model", ".aks2", ".ids", ".pth", ".pt",
)  # fmt: skip


def may_be_elf(name: str) -> bool:
    """A member whose name does not rule out a host ELF file (no source, data or code object)."""
    base = posixpath.basename(name)
    return not name.endswith("/") and not base.endswith(_NOT_ELF_SUFFIXES)


@dataclass(frozen=True, kw_only=True)
class CodeMember:
    """A compiled file in the wheel and the device code it carries."""

    arcname: str
    #: offload bundles of its device code section (() without one or when not asked for)
    bundles: tuple[elf.OffloadBundle, ...] = ()

    @property
    def targets(self) -> frozenset[str]:
        """The gfx targets its device code covers (features stripped)."""
        return frozenset().union(*(b.targets for b in self.bundles))


@dataclass(frozen=True, kw_only=True)
class ElfMember(CodeMember):
    """A host ELF file in the wheel."""

    info: elf.ElfInfo
    #: its kpack marker (a kpack-split library: its device code in archives), else None
    kpack_ref: kpack.KpackRef | None = None
    #: its code objects (HIPK wrappers) when kpack-split
    kpack_objects: int = 0
    #: its mode as the wheel records it (0: none recorded)
    mode: int = 0


@dataclass(frozen=True, kw_only=True)
class PeMember(CodeMember):
    """A Windows DLL or PYD in the wheel."""

    machine: str
    imports: tuple[str, ...]


@dataclass(frozen=True)
class WheelAnalysis:
    """What one pass over a wheel found."""

    name: WheelName
    dist_info: str
    #: every member name, folders included, in archive order
    members: tuple[str, ...]
    #: uncompressed size of every file member
    sizes: Mapping[str, int]
    metadata: str
    #: host ELF files by member name, in archive order
    elves: Mapping[str, ElfMember]
    #: Windows DLLs and PYDs (only when asked for)
    pes: Mapping[str, PeMember]
    #: members that start like an ELF file but cannot be read as one
    unreadable: tuple[str, ...]
    #: the bundle provenance files (``<top>/.rocm-build-bundle.json``) that parse, by member
    provenance: Mapping[str, Mapping[str, Any]]
    #: kpack archives (``<...>/.kpack/*.kpack``) by member: their headers and tables of contents
    kpack_archives: Mapping[str, kpack.Archive] = field(default_factory=dict)

    @property
    def infos(self) -> dict[str, elf.ElfInfo]:
        return {arc: m.info for arc, m in self.elves.items()}

    @property
    def device_targets(self) -> frozenset[str]:
        """Every gfx target the wheel's device code (ELF and PE) covers."""
        return frozenset().union(*(m.targets for m in self.code_members))

    @property
    def code_members(self) -> list[CodeMember]:
        return [*self.elves.values(), *self.pes.values()]

    def bundle_record(self) -> Mapping[str, Any]:
        """The provenance a bundle left (the last one, as archive order has them); {} if none."""
        found = list(self.provenance.values())
        return found[-1] if found else {}


def analyze(
    reader: WheelReader,
    *,
    device_code: bool = True,
    pe_files: bool = False,
    elf_files: bool = True,
    fault: str = "",
) -> WheelAnalysis:
    """Read ``reader``'s wheel once (see the module docstring).

    ``device_code``: read the offload bundles of files with a ``.hip_fatbin`` section.
    ``pe_files``: also read Windows DLLs and PYDs (``elf_files=False``: only those). ``fault``:
    the fault point passed after each ELF file read.
    """
    files = [m for m in reader.members if not m.is_dir]
    elves, unreadable = _read_elves(reader, device_code, fault) if elf_files else ({}, [])
    pes = _read_pes(reader) if pe_files else {}
    return WheelAnalysis(
        name=reader.name,
        dist_info=reader.dist_info,
        members=tuple(m.name for m in reader.members),
        sizes={m.name: m.file_size for m in files},
        metadata=reader.metadata(),
        elves=elves,
        pes=pes,
        unreadable=tuple(unreadable),
        provenance=_provenance(reader, [m.name for m in files]),
        kpack_archives=_kpack_archives(reader, [m.name for m in files]) if elf_files else {},
    )


def analyze_path(path: Path, **options: Any) -> WheelAnalysis:
    """:func:`analyze` on the wheel at ``path`` (opened and closed here)."""
    with WheelReader(path) as reader:
        return analyze(reader, **options)


def _read_elves(
    reader: WheelReader, device_code: bool, fault: str
) -> tuple[dict[str, ElfMember], list[str]]:
    elves: dict[str, ElfMember] = {}
    unreadable: list[str] = []
    for m in reader.members:
        if not may_be_elf(m.name) or m.file_size < 64:
            continue
        if reader.head(m.name, 4) != elf.ELF_MAGIC:
            continue
        with MemberView(reader, m.name) as view:
            try:
                info = elf.read_elf(view)
            except elf.NotElfError:
                unreadable.append(m.name)
                continue
            if info.is_host:
                bundles = _bundles(reader, view) if device_code and info.has_fatbin else ()
                ref, objects = _kpack_ref(reader, view) if info.has_kpack_ref else (None, 0)
                elves[m.name] = ElfMember(
                    arcname=m.name,
                    bundles=bundles,
                    info=info,
                    kpack_ref=ref,
                    kpack_objects=objects,
                    mode=m.mode or 0,
                )
        if fault:
            faults.point(fault)
    return elves, unreadable


def _bundles(
    reader: WheelReader, view: MemberView, fatbin: tuple[int, int] | None = None
) -> tuple[elf.OffloadBundle, ...]:
    """The offload bundles of an ELF member (its ``.hip_fatbin``) or of a PE member's
    ``.hip_fat`` section (``fatbin``: its offset and size); a damaged one is exit 10."""
    try:
        return elf.offload_bundles_at(view, *fatbin) if fatbin else elf.offload_bundles(view)
    except elf.BundleFormatError as err:
        raise BundleError(
            f"{posixpath.basename(view.name)} (in {reader.path.name}): damaged offload bundle: "
            f"{err}; rebuild the wheel (or download it again) and bundle again"
        ) from err


def _kpack_ref(reader: WheelReader, view: MemberView) -> tuple[kpack.KpackRef | None, int]:
    """A member's kpack marker and the number of its code objects (HIPK wrappers)."""
    try:
        ref = kpack.read_ref(view)
        return ref, len([w for w in kpack.wrappers(view) if w.magic == "HIPK"]) if ref else 0
    except kpack.KpackFormatError as err:
        raise BundleError(
            f"{posixpath.basename(view.name)} (in {reader.path.name}): damaged kpack marker: "
            f"{err}; rebuild the wheel (or download it again)"
        ) from err


def _kpack_archives(reader: WheelReader, names: list[str]) -> dict[str, kpack.Archive]:
    """The kpack archives among ``names``, read in place (header and TOC only)."""
    found: dict[str, kpack.Archive] = {}
    for name in names:
        if not name.endswith(".kpack") or f"/{kpack.KPACK_DIR}/" not in f"/{name}":
            continue
        with MemberView(reader, name) as view:
            try:
                found[name] = kpack.read_archive_from(view, len(view), f"{name} (in wheel)")
            except kpack.KpackFormatError as err:
                raise BundleError(
                    f"{err} (in {reader.path.name}); rebuild the wheel (or download it again)"
                ) from err
    return found


def _read_pes(reader: WheelReader) -> dict[str, PeMember]:
    pes: dict[str, PeMember] = {}
    for m in reader.members:
        if not m.name.lower().endswith((".dll", ".pyd")) or reader.head(m.name, 2) != b"MZ":
            continue
        with MemberView(reader, m.name) as view:
            if found := pe.read_pe(view):
                machine, imports, fatbin = found
                bundles = _bundles(reader, view, fatbin) if fatbin else ()
                pes[m.name] = PeMember(
                    arcname=m.name, bundles=bundles, machine=machine, imports=tuple(imports)
                )
    return pes


def _provenance(reader: WheelReader, names: list[str]) -> dict[str, Mapping[str, Any]]:
    found: dict[str, Mapping[str, Any]] = {}
    for name in names:
        if name.endswith(PROVENANCE) and (data := reader.read_json_object(name)) is not None:
            found[name] = data
    return found
