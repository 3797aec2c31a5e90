"""One wheel to bundle and everything it is bundled with (:class:`BundleJob`, made from the
stage's settings in one place: :meth:`.stage.BundlePlans.job`), and what a platform that
bundles it answers (:class:`Platform`; the registry is :mod:`.platforms`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rocm_build.bundle.device import NO_DEVICE, DeviceOptions
from rocm_build.bundle.model import BundleResult, ThinSource, TorchWheel
from rocm_build.config.loader import ProjectSpec
from rocm_build.progress import Progress

__all__ = ["BundleJob", "Platform"]


@dataclass(frozen=True)
class BundleJob:
    """One wheel to bundle and the settings it is bundled with."""

    wheel: Path
    rocm: Path
    output_dir: Path
    targets: tuple[str, ...]  # () = the targets of the wheel's own device code
    lib_dir: str  # where its libraries go ("": the platform's tool decides)
    dlopen_patterns: tuple[str, ...]
    data_trees: tuple[str, ...]
    level: int
    policy: str
    torch: TorchWheel | None  # the torch fat wheel it takes torch's libraries from
    allow_outside: tuple[Path, ...]
    system_libs: tuple[str, ...]
    rocm_libs: tuple[str, ...]
    thin: ThinSource | None
    #: a tree of another ROCm than the wheel's is allowed (relabelled); another ROCm's unused
    #: copies of added libraries are kept (see :mod:`.rocmlabel`)
    allow_rocm_mismatch: bool = False
    keep_other_rocm: bool = False
    device: DeviceOptions = NO_DEVICE
    env: Mapping[str, str] | None = None  # None: this process's
    no_wait: bool = False
    dry_run: bool = False


class Platform(Protocol):
    """What a bundle platform answers (one module each: :mod:`.linux`, :mod:`.windows`)."""

    #: its ``bundle.platform`` value, and its name for people ("Linux")
    name: str
    label: str
    #: it makes thin wheels (``--mode thin``); its fat wheels can be split (``--split-arch``)
    thin: bool
    split_arch: bool

    def owns(self, platform_tags: Sequence[str]) -> bool:
        """Whether a wheel with these platform tags (``manylinux_2_28_x86_64``) is its."""
        ...

    def lib_dir(self, wheel: Path, projects: Mapping[str, ProjectSpec], flag: str | None) -> str:
        """Where the wheel's libraries go ("": its tool decides); ``flag``: ``--lib-dir``."""
        ...

    def bundle(self, job: BundleJob, progress: Progress) -> BundleResult:
        """Bundle one wheel (``job.dry_run``: plan only, status "planned")."""
        ...

    def plan_lines(self, result: BundleResult) -> Iterator[str]:
        """A planned (dry-run) bundle, for people."""
        ...
