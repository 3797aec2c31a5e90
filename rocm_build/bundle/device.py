"""Device code in the ELF files a bundle writes: what pruning keeps for the requested targets,
and the coverage gate (every requested target served by every written library that had device
code). See :mod:`rocm_build.bundle.prune` for the bundles themselves."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rocm_build.binary import elf
from rocm_build.bundle import prune
from rocm_build.common import arch
from rocm_build.common.errors import BundleError, RequirementNotMet

__all__ = [
    "DeviceFile",
    "DeviceSource",
    "DeviceSummary",
    "coverage_gaps",
    "gap_error",
    "plan_device",
]


@dataclass(frozen=True)
class DeviceSummary:
    """What the bundle did with one file's device code: the prune's numbers as written
    (``code``), whether it was pruned, and whether it was kept whole though entries could go."""

    code: prune.PruneSummary
    pruned: bool
    kept_whole: bool

    def as_json(self) -> dict[str, Any]:
        return {**self.code.as_json(), "pruned": self.pruned, "kept_whole": self.kept_whole}


@dataclass(frozen=True)
class DeviceFile:
    """One written ELF file with device code and what the bundle does with it."""

    arcname: str
    cut: prune.PrunePlan
    #: pruned as it is written (False: ``--keep-all-device-code``, or no entry to drop)
    pruned: bool

    @property
    def ids_written(self) -> tuple[str, ...]:
        return self.cut.ids_after if self.pruned else self.cut.ids_before

    def summary(self) -> DeviceSummary:
        s = self.cut.summary()
        if not self.pruned:
            s = replace(s, kept=self.cut.ids_before, dropped=(), pruned_bundles=0)
            s = replace(s, kept_bytes=s.kept_bytes + s.dropped_bytes, dropped_bytes=0)
        return DeviceSummary(s, self.pruned, not self.pruned and bool(self.cut.changed))


#: a written ELF file with device code: (arcname, its file or its name in the wheel, its
#: offload bundles when already read, else None: read from the file)
DeviceSource = tuple[str, str, tuple[elf.OffloadBundle, ...] | None]


def plan_device(
    files: Iterable[DeviceSource], targets: Sequence[str], *, prune_code: bool
) -> tuple[DeviceFile, ...]:
    """What happens to the device code of ``files`` (see :data:`DeviceSource`: those with a
    ``.hip_fatbin``). A damaged bundle stops the bundle (exit 10), naming the file."""
    out: list[DeviceFile] = []
    for arcname, path, bundles in files:
        try:
            cut = prune.plan_prune(path, targets, bundles)
        except elf.BundleFormatError as err:
            raise BundleError(
                f"{posixpath.basename(arcname)} ({path}): damaged offload bundle: {err}; "
                "replace the file (reinstall the package it came from) and bundle again"
            ) from err
        if cut.ids_before:
            out.append(DeviceFile(arcname, cut, prune_code and bool(cut.changed)))
    return tuple(out)


def coverage_gaps(files: Sequence[DeviceFile], targets: Sequence[str]) -> tuple[str, ...]:
    """One line per written library and requested target it has no code for."""
    lines = []
    for f in files:
        written = f.ids_written
        for t in targets:
            if not any(arch.serves_id(i, t) for i in written):
                had = ", ".join(f.cut.ids_before)
                lines.append(f"{posixpath.basename(f.arcname)} has no code for {t} (it has {had})")
    return tuple(lines)


def gap_error(gaps: Sequence[str]) -> RequirementNotMet:
    shown = "; ".join(gaps[:3]) + (f"; and {len(gaps) - 3} more" if len(gaps) > 3 else "")
    return RequirementNotMet(
        f"{len(gaps)} requested target(s) without device code in the wheel's libraries "
        f"({shown}): drop the target, use a tree built for it, or pass --allow-missing-arch to "
        "write the wheel anyway"
    )


def device_sources(elves: Mapping[str, Any], libraries: Iterable[Any]) -> list[DeviceSource]:
    """Every ELF the bundle writes that has a ``.hip_fatbin``: the wheel's own members (their
    offload bundles as the wheel's analysis read them) and the grafted libraries (read from
    their files)."""
    out: list[DeviceSource] = [
        (arc, arc, tuple(m.bundles)) for arc, m in elves.items() if m.info.has_fatbin
    ]
    out += [(lib.arcname, lib.source, None) for lib in libraries if lib.info.has_fatbin]
    return out
