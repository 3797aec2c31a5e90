"""bundle --split-arch on a tree whose runtime loads kpack (TheRock's, with ``librocm_kpack``):
the project's own libraries with device code (libtorch_hip) kpack-split as TheRock's wheel
splitter splits torch's, so that their code objects go to the device wheels too.

Each such member of the fat wheel is unpacked into the split's scratch folder and split there
(:mod:`rocm_build.binary.kpacksplit`, :mod:`rocm_build.binary.kpackwrite`): the host wheel gets
the host-only library, whose marker names ``<top package>/.kpack/<project>_@GFXARCH@.kpack``
relative to its own folder (``../.kpack/torch_@GFXARCH@.kpack`` from ``torch/lib/``) and whose
kernel name is its path in the wheel; the archives ``<top package>/.kpack/<project>_<target
id>.kpack`` (one per target id, every library of the package in it) go to the device wheels of
the targets they serve, stored. A member that cannot be split (not x86-64, a layout the split
does not take) keeps its device code in the host wheel, and the output says why.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rocm_build.binary import elf, kpack
from rocm_build.binary.kpackwrite import KpackWriter
from rocm_build.bundle.model import Closure
from rocm_build.common.errors import BundleError
from rocm_build.wheel.wheelfile import WheelReader

__all__ = [
    "NO_SPLIT",
    "OwnSplit",
    "OwnSummary",
    "device_code_lines",
    "own_device_code",
    "own_lines",
    "split_own",
    "splittable",
]


@dataclass(frozen=True)
class OwnSummary:
    """What happened to the project's own libraries' device code, as a split's result and its
    provenance keep it: whether the tree's runtime loads kpack, the libraries split, their
    archives, and per library kept whole, why."""

    loader: bool = False
    libraries: tuple[str, ...] = ()
    archives: tuple[str, ...] = ()
    kept: Mapping[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "loader": self.loader,
            "libraries": list(self.libraries),
            "archives": list(self.archives),
            "kept": dict(self.kept),
        }


@dataclass(frozen=True)
class OwnSplit:
    """The project's own libraries split in a scratch folder."""

    #: the tree's runtime loads kpack (else nothing was split)
    loader: bool = False
    #: member -> its host-only library (marker, no device code)
    hosts: Mapping[str, Path] = field(default_factory=dict)
    #: archive (its path in the wheels) -> its file
    archives: Mapping[str, Path] = field(default_factory=dict)
    #: member -> why it keeps its device code in the host wheel
    kept: Mapping[str, str] = field(default_factory=dict)

    def summary(self) -> OwnSummary:
        return OwnSummary(
            loader=self.loader,
            libraries=tuple(sorted(self.hosts)),
            archives=tuple(sorted(self.archives)),
            kept=dict(sorted(self.kept.items())),
        )


#: nothing split (the tree's runtime cannot load kpack)
NO_SPLIT = OwnSplit()


def splittable(arcname: str) -> str:
    """Why the member ``arcname`` cannot be split ("" when it can): its archives go to its top
    package's ``.kpack`` folder, so it must be inside a package that pip installs as it is."""
    top, _, rest = arcname.partition("/")
    if not rest:
        return "it is not inside a package folder (its archives would land in site-packages)"
    if top.endswith((".data", ".dist-info")):
        return f"it is installed elsewhere ({top}): its marker's relative path would not hold"
    return ""


def split_own(reader: WheelReader, members: Sequence[str], group: str, scratch: Path) -> OwnSplit:
    """Split ``members`` of ``reader`` (ELF files with offload bundles) in ``scratch``: each
    unpacked, split into its host library and the archives of its top package (``group``:
    the archives' group, the project's name), the unpacked copy removed."""
    hosts: dict[str, Path] = {}
    kept: dict[str, str] = {}
    archives: dict[str, Path] = {}
    by_top: dict[str, list[str]] = {}
    for name in members:
        why = splittable(name)
        if why:
            kept[name] = why
        else:
            by_top.setdefault(name.partition("/")[0], []).append(name)
    for top, names in sorted(by_top.items()):
        writer = KpackWriter(scratch / "kpack-out" / top)
        try:
            for name in names:
                _split_one(reader, name, writer, group, scratch / "kpack-in", (hosts, kept))
            written = writer.finish()
        except BaseException:
            writer.abort()
            raise
        archives.update({f"{top}/{kpack.KPACK_DIR}/{p.name}": p for p in written})
    return OwnSplit(True, hosts, archives, kept)


def _split_one(
    reader: WheelReader,
    name: str,
    writer: KpackWriter,
    group: str,
    unpacked: Path,
    into: tuple[dict[str, Path], dict[str, str]],
) -> None:
    hosts, kept = into
    top, _, rest = name.partition("/")
    src = reader.extract(name, unpacked)
    before = writer.written
    try:
        bundles = elf.offload_bundles(src)
        result = writer.add_library(
            src, rel_lib=posixpath.dirname(rest), group=group, source_prefix=top, bundles=bundles
        )
    except ValueError as err:  # elf.NotElfError and BundleFormatError too
        why = str(err).replace(str(src), name)
        if writer.written != before:  # its code objects are half in the archives
            raise BundleError(f"{name}: cannot kpack-split it: {why}") from err
        kept[name] = why
        return
    finally:
        src.unlink(missing_ok=True)
    hosts[name] = result.library


def own_device_code(wheel: Path, closure: Closure | None) -> tuple[str, ...]:
    """The members of a fat wheel with device code (its bundle's ``closure``) that are the
    project's own: members of the input ``wheel`` (the ROCm libraries the bundle added are
    not)."""
    with WheelReader(wheel) as reader:
        names = {m.name for m in reader.members}
    device = [d.arcname for d in closure.device] if closure else []
    return tuple(sorted(a for a in device if a in names))


def device_code_lines(
    devices: Sequence[str], kpacked: Sequence[str], own: OwnSummary | None
) -> Iterator[str]:
    """Where a split's device code went, for people: ``kpacked``, the ROCm libraries' kpack
    archives; ``own``, :meth:`OwnSplit.summary` (None: not told, an up-to-date split)."""
    own = own or OwnSummary()
    yield from own_lines(own)
    if kpacked:
        rest = (
            ""
            if own.loader
            else "; code inside the project's own libraries stays in the host wheel (the "
            "tree's runtime cannot load kpack, so rocm-build does not kpack-split them)"
        )
        yield (
            f"  the ROCm libraries' device code ({len(kpacked)} kpack archives) went to the "
            f"device wheels{rest}"
        )
    elif not own.libraries:
        # device code lives inside the host libraries: it cannot move to the device wheels
        yield (
            "  the host wheel's libraries keep the device code of every requested target "
            f"({', '.join(devices)}); for a smaller download, bundle one target (or "
            "family) with --arch instead"
        )


def own_lines(summary: OwnSummary) -> Iterator[str]:
    """What happened to the project's own libraries' device code, for people."""
    libraries, archives = summary.libraries, summary.archives
    if libraries:
        yield (
            f"  the project's own libraries' device code ({len(libraries)} libraries, "
            f"{len(archives)} kpack archives) went to the device wheels (kpack-split: the "
            "tree's runtime loads kpack)"
        )
    for name, why in summary.kept.items():
        yield f"  {name} keeps its device code in the host wheel: it cannot be kpack-split ({why})"
