"""ROCm's Python packages of a kpack-split tree (TheRock since 2026): the names and the device
packages.

From a split tree ROCm publishes an arch-neutral ``rocm-sdk-libraries`` (import folder
``_rocm_sdk_libraries``: host libraries, arch-neutral data) and one ``rocm-sdk-device-<target>``
per GPU target, named by the bare processor (``gfx90a``: its ``xnack+``/``xnack-`` archives
together), that overlays the target's ``.kpack`` archives and kernel data into
``_rocm_sdk_libraries/`` (so a library's marker ``../.kpack/...`` resolves from
``_rocm_sdk_libraries/lib``) and requires ``rocm-sdk-libraries`` at its version. The ``rocm``
meta package offers the extras ``libraries``, ``device-<target>`` and ``device-all``; PyTorch's
ROCm wheels require ``rocm[libraries,device-all]==<version>``. A tree that is not split keeps
the per-family names (:mod:`.rocmwheels`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rocm_build.binary import kpack
from rocm_build.bundle.data import data_mode
from rocm_build.common import arch
from rocm_build.common.errors import RocmTreeError
from rocm_build.common.treepath import TreeGuard
from rocm_build.wheel import wheelmeta
from rocm_build.wheel.deflate import Deflate
from rocm_build.wheel.wheelfile import WheelWriter

META_DIST = "rocm"
LIBRARIES_DIST = "rocm-sdk-libraries"
LIBRARIES_FOLDER = "_rocm_sdk_libraries"
DEVICE_DIST = "rocm-sdk-device-{target}"
LIBRARIES_EXTRA = "libraries"
DEVICE_EXTRA = "device-{target}"
DEVICE_ALL = "device-all"

_PROCESSOR = re.compile(r"gfx[0-9a-z]+(-[0-9a-z]+)*")


def device_target(target: str) -> str:
    """The target a device package is named by: the target id's processor, lower case
    (``gfx90a:xnack-`` -> ``gfx90a``); a name that is no gfx processor is a bug of its caller."""
    name = arch.base_name(target).lower()
    if not _PROCESSOR.fullmatch(name):
        raise ValueError(f"{target!r} is no gfx target id")
    return name


def device_dist(target: str) -> str:
    """``rocm-sdk-device-<processor>``: the device package serving ``target``."""
    return DEVICE_DIST.format(target=device_target(target))


def device_extra(target: str) -> str:
    """The ``rocm`` meta package's extra that installs :func:`device_dist` of ``target``."""
    return DEVICE_EXTRA.format(target=device_target(target))


def thin_requirement(version: str, targets: Sequence[str] = ()) -> str:
    """What a thin wheel needing ROCm's libraries requires from a split tree's packages, as
    PyTorch's ROCm wheels do: ``rocm`` with ``libraries`` and the device extras of ``targets``
    (``device-all`` without), at ``version``; extras sorted, as ``packaging`` writes them."""
    devices = {device_extra(t) for t in targets} or {DEVICE_ALL}
    return f"{META_DIST}[{','.join(sorted({LIBRARIES_EXTRA, *devices}))}]=={version}"


def meta_requirements(core: str, version: str, targets: Iterable[str]) -> list[str]:
    """The ``rocm`` meta package's requirements for a split tree: ``core`` always,
    ``rocm-sdk-libraries`` for ``libraries``, each device package for its own extra and for
    ``device-all``."""
    named = sorted({device_target(t) for t in targets})
    return [
        f"{core}=={version}",
        f'{LIBRARIES_DIST}=={version}; extra == "{LIBRARIES_EXTRA}"',
        *(f'{device_dist(t)}=={version}; extra == "{device_extra(t)}"' for t in named),
        *(f'{device_dist(t)}=={version}; extra == "{DEVICE_ALL}"' for t in named),
    ]


def meta_extras(targets: Iterable[str]) -> list[str]:
    return [LIBRARIES_EXTRA, *sorted({device_extra(t) for t in targets}), DEVICE_ALL]


def archive_target(path: Path) -> str:
    """The target id of a tree archive ``<group>_<target id>.kpack`` (groups have ``_``, target
    ids none: ``rand_lib_gfx90a:xnack-.kpack`` -> ``gfx90a:xnack-``)."""
    stem = path.name.removesuffix(".kpack")
    group, _, target = stem.rpartition("_")
    if not group or not _PROCESSOR.fullmatch(arch.base_name(target).lower()):
        raise RocmTreeError(
            f"{path}: a kpack archive's name is <group>_<target>.kpack; rename or remove the file"
        )
    return target


@dataclass(frozen=True)
class DeviceWheel:
    """One ``rocm-sdk-device-<target>`` package as ``rocm wheels`` will write it."""

    target: str  # the processor it serves (``gfx90a``)
    dist: str
    version: str
    name: str  # the wheel's file name
    tags: tuple[str, ...]
    archives: tuple[tuple[Path, str], ...]  # (file, member name): stored
    data: tuple[tuple[Path, str], ...]  # (file, member name)
    requires: tuple[str, ...]

    @property
    def dist_info(self) -> str:
        return f"{self.dist.replace('-', '_')}-{self.version}.dist-info"


def split_data(
    data: Sequence[tuple[Path, str]],
) -> tuple[list[tuple[Path, str]], dict[str, list[tuple[Path, str]]]]:
    """The libraries package's data (tree-relative member names) split: a file whose path names
    the processor of one target only goes to that target's device package, the rest (no
    target, or several) stays arch-neutral."""
    neutral: list[tuple[Path, str]] = []
    by_target: dict[str, list[tuple[Path, str]]] = {}
    for path, rel in data:
        named = {arch.base_name(t) for t in arch.gfx_tokens(rel)}
        if len(named) == 1:
            by_target.setdefault(device_target(named.pop()), []).append((path, rel))
        else:
            neutral.append((path, rel))
    return neutral, by_target


def plan_devices(
    tree: Path,
    version: str,
    plat: str,
    data: dict[str, list[tuple[Path, str]]],
    targets: Sequence[str],
    guard: TreeGuard,
) -> tuple[DeviceWheel, ...]:
    """One device package per processor of the tree's archives (those serving ``targets``; all
    when empty) and of ``data`` (tree-relative member names), tagged ``plat``."""
    archives: dict[str, list[tuple[Path, str]]] = {}
    for path in kpack.tree_archives(tree):
        target = archive_target(path)
        if targets and not any(arch.serves_id(target, t) for t in targets):
            continue
        guard.check(path)
        member = f"{LIBRARIES_FOLDER}/{kpack.KPACK_DIR}/{path.name}"
        archives.setdefault(device_target(target), []).append((path, member))
    wheels = []
    for target in sorted({*archives, *data}):
        dist = device_dist(target)
        wheels.append(
            DeviceWheel(
                target=target,
                dist=dist,
                version=version,
                name=f"{dist.replace('-', '_')}-{version}-py3-none-{plat}.whl",
                tags=tuple(f"py3-none-{p}" for p in plat.split(".")),
                archives=tuple(archives.get(target, ())),
                data=tuple((p, f"{LIBRARIES_FOLDER}/{rel}") for p, rel in data.get(target, ())),
                requires=(f"{LIBRARIES_DIST}=={version}",),
            )
        )
    return tuple(wheels)


def write_device_wheel(output_dir: Path, wheel: DeviceWheel, level: int) -> Path:
    """Write ``wheel`` into ``output_dir``: no ``__init__.py`` (the libraries package owns its
    folder), archives stored (their frames are zstd already)."""
    out = output_dir / wheel.name
    with WheelWriter(out, wheel.dist_info, Deflate(level=level)) as writer:
        for path, arc in wheel.archives:
            writer.add_file(arc, path, 0o644, stored=True)
        for path, arc in wheel.data:
            writer.add_file(arc, path, data_mode(path))
        summary = f"ROCm device code for {wheel.target}"
        meta = wheelmeta.new_metadata(wheel.dist, wheel.version, summary, wheel.requires)
        writer.add_bytes(f"{wheel.dist_info}/METADATA", meta.encode())
        writer.add_bytes(
            f"{wheel.dist_info}/WHEEL", wheelmeta.new_wheel_info(list(wheel.tags)).encode()
        )
        writer.commit()
    return out


__all__ = [
    "DEVICE_ALL",
    "LIBRARIES_DIST",
    "LIBRARIES_FOLDER",
    "DeviceWheel",
    "archive_target",
    "device_dist",
    "device_extra",
    "device_target",
    "meta_extras",
    "meta_requirements",
    "plan_devices",
    "split_data",
    "thin_requirement",
    "write_device_wheel",
]
