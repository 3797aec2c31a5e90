"""The build's wheel check: a wheel's name, version and requirements, the HIP code objects it
carries against the requested targets (``check_wheel``), and its pin to a dependency's version
just built (``pin_requirement``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from rocm_build.common import arch
from rocm_build.common.errors import BuildFailed
from rocm_build.wheel import wheelmeta
from rocm_build.wheel.wheelfile import WheelReader, WheelWriter

__all__ = ["WheelFacts", "check_wheel", "pin_requirement", "wheel_metadata"]

log = logging.getLogger(__name__)

_HIP_RUNTIME = re.compile(r"^libamdhip64\.so(\.\d+)*$")


@dataclass(frozen=True)
class WheelFacts:
    name: str
    version: str
    requires: tuple[str, ...]
    targets: tuple[str, ...]  # gfx base names found in code objects, sorted


def wheel_metadata(wheel: Path) -> tuple[str, str, tuple[str, ...]]:
    """(name, version, Requires-Dist entries) of a wheel (opened by the checking reader)."""
    with WheelReader(wheel) as reader:
        meta = reader.metadata()
    return (
        wheelmeta.metadata_name(meta),
        wheelmeta.metadata_version(meta),
        wheelmeta.requirements(meta),
    )


def check_wheel(
    wheel: Path, targets: Sequence[str], project: str, *, device_code: bool = True
) -> WheelFacts:
    """Refuse a wheel that would not run on the requested GPUs: no HIP code objects or no HIP
    runtime dependency ("built without ROCm"), or code objects that miss a requested target or
    carry one that was not requested. A single library covering only some of the targets is
    reported (some sub-builds, such as aotriton, filter the list on purpose).

    A project not expected to carry device code (``device_code`` false: torchaudio's ROCm build
    is host code only) may have none; code objects it does carry are checked all the same."""
    from rocm_build.wheel.analyze import analyze_path

    name, version, requires = wheel_metadata(wheel)
    wanted = {arch.base_name(t) for t in targets}
    analysis = analyze_path(wheel)
    for member in analysis.unreadable:
        log.warning("%s: %s looks like ELF but cannot be read", project, member)
    runtime = [
        arc
        for arc, m in analysis.elves.items()
        if any(_HIP_RUNTIME.match(n) for n in m.info.needed)
    ]
    per_file = {arc: m.targets for arc, m in analysis.elves.items() if m.targets}
    found = set().union(*per_file.values()) if per_file else set()
    if not found and not device_code:
        log.info("%s: host code only, as expected (device_code = false)", project)
        return WheelFacts(name, version, requires, ())
    if not found or not runtime:
        why = "no HIP code objects" if not found else "no dependency on libamdhip64"
        msg = (
            f"{project} was built without ROCm: its wheel has {why}; check USE_ROCM and the "
            "build log for a CPU-only fallback"
        )
        raise BuildFailed(msg)
    missing = sorted(t for t in wanted if not arch.covered(t, found))
    if missing:
        msg = (
            f"{project}: the wheel's code objects are missing {', '.join(missing)} (they cover "
            f"{', '.join(sorted(found))}); a part of the build ignored PYTORCH_ROCM_ARCH: see "
            "the build log"
        )
        raise BuildFailed(msg)
    unexpected = sorted(k for k in found if not arch.keeps([k], wanted))
    if unexpected:
        where = sorted(f for f, t in per_file.items() if t - wanted)
        msg = (
            f"{project}: unexpected target {', '.join(unexpected)} in {', '.join(where)} "
            f"(requested {', '.join(sorted(wanted))})"
        )
        raise BuildFailed(msg)
    for member, have in sorted(per_file.items()):
        if have != wanted:
            log.warning(
                "%s: %s has code objects only for %s", project, member, ", ".join(sorted(have))
            )
    return WheelFacts(name, version, requires, tuple(sorted(found)))


def pin_requirement(wheel: Path, dep: str, version: str) -> str | None:
    """Make ``wheel`` require exactly ``dep==version``. Returns None when it already does,
    else what changed; raises when the wheel pins another version of ``dep``."""
    _, _, requires = wheel_metadata(wheel)
    key = canonicalize_name(dep)
    exact = Version(version)
    unconditional: list[str] = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) != key or req.marker is not None:
            continue
        if len(req.specifier) == 1 and str(req.specifier) == f"=={version}":
            return None
        if req.specifier and not req.specifier.contains(exact, prereleases=True):
            msg = (
                f"{wheel.name} requires {line} but was built against {dep} {version}; the "
                "build saw the wrong version of it"
            )
            raise BuildFailed(msg)
        unconditional.append(line)
    _rewrite_requires(wheel, f"{dep}=={version}")
    was = ", ".join(unconditional) or "nothing"
    return f"Requires-Dist {dep}=={version} (was {was})"


def _rewrite_requires(wheel: Path, requirement: str) -> None:
    """METADATA requires ``requirement`` instead of the unconditional ones on the same name;
    every other member is copied raw (checked against RECORD on the way) and RECORD is written
    anew; the result replaces ``wheel`` atomically."""
    with WheelReader(wheel) as reader:
        meta_name = f"{reader.dist_info}/METADATA"
        record_name = f"{reader.dist_info}/RECORD"
        meta = wheelmeta.add_requirement(reader.read_text(meta_name), requirement).encode()
        with WheelWriter(wheel, reader.dist_info) as writer:
            for m in reader.members:
                if m.is_dir or m.name == record_name:
                    continue
                if m.name == meta_name:
                    writer.add_bytes(meta_name, meta)
                else:
                    writer.copy_member(reader, m.name)
            writer.commit()
