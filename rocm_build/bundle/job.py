"""One wheel to bundle and everything it is bundled with (:class:`BundleJob`, made from the
stage's settings in one place: :meth:`.plan.Plan.job`), what a platform decides for it
(:class:`WheelTask`), and what a platform answers (:class:`Platform`; the registry is
:mod:`.platforms`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, Protocol

from rocm_build.bundle.model import BundleResult, Closure, PlanSummary, ThinSource, TorchWheel
from rocm_build.bundle.wheelhouse import Wheelhouse
from rocm_build.common.progress import Progress
from rocm_build.config.loader import BundleSettings, ProjectSpec
from rocm_build.wheel.deflate import Deflate

__all__ = ["BundleJob", "Platform", "WheelTask"]


@dataclass(frozen=True)
class BundleJob:
    """One wheel to bundle: the ``[bundle]`` settings as they are (``settings``), and beside
    them the facts of this wheel and run. What changes the output is the settings marked
    ``output`` (:func:`rocm_build.config.schema.output_settings`) and the facts the platform's
    fingerprint names."""

    settings: BundleSettings
    wheel: Path
    rocm: Path
    output_dir: Path
    targets: tuple[str, ...]  # () = the targets of the wheel's own device code
    lib_dir: str  # where its libraries go ("": the platform's tool decides)
    torch: TorchWheel | None  # the torch fat wheel it takes torch's libraries from
    #: ``settings.allow_outside``, each resolved against the working folder
    allow_outside: tuple[Path, ...]
    thin: ThinSource | None
    deflate: Deflate  # the deflater, its level and the deflate cache the writer uses
    #: the ``arch`` setting's targets with their features: the device code is cut for them
    #: (``settings.prune_device_code``); () = left alone
    device_targets: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None  # None: this process's
    no_wait: bool = False
    dry_run: bool = False
    #: ``torch`` is the fat wheel this run writes just before (its bytes are not known yet)
    torch_pending: bool = False
    #: no output counts as up to date (it is written into a scratch folder)
    fresh: bool = False
    #: set: ``output_dir`` is the wheelhouse's folder of the targets (:meth:`placed`), decided
    #: by the platform's plan when none were asked for; None: ``output_dir`` as it is (``-w``)
    wheelhouse: Wheelhouse | None = None

    def placed(self, targets: Sequence[str]) -> BundleJob:
        """The job with its output folder decided: the wheelhouse's folder of the targets asked
        for, with their features (``device_targets``), else of ``targets`` (the wheel's own when
        none were asked for); a thin wheel's: its family's."""
        if self.wheelhouse is None:
            return self
        family = self.thin.family if self.thin else None
        named = self.device_targets or targets
        return replace(self, output_dir=self.wheelhouse.folder(named, thin=family))

    @property
    def output_dirs(self) -> tuple[Path, ...]:
        """Where this job's output may be already: its folder; its targets not known yet (none
        asked for), every fat wheel folder of the wheelhouse."""
        if self.wheelhouse is None or self.targets or self.thin:
            return (self.output_dir,)
        return self.wheelhouse.fat_folders()


@dataclass(frozen=True)
class WheelTask:
    """What the bundle does with one wheel, decided before anything is written.

    ``action``: "up-to-date" (``output`` is already the bundle of these inputs and settings),
    "bundle" (write ``output``). ``fingerprint`` is what the output's provenance records; ""
    when it depends on a wheel this run writes first (torch's fat wheel, for torchvision):
    ``execute`` takes it then. ``closure`` (Linux) holds every library, search path, data file
    and cut of device code; ``extract`` names the members ``execute`` unpacks to edit. ``detail``
    is what another platform decided (Windows: what delvewheel is asked to add), ``summary``
    the plan for people and ``--json`` (Linux: the closure itself; Windows: its
    :class:`.windows.WindowsSummary`), flattened by its ``as_json`` only."""

    job: BundleJob  # its targets decided
    platform: str
    action: Literal["up-to-date", "bundle"]
    output: str
    fingerprint: str
    closure: Closure | None = None
    extract: tuple[str, ...] = ()
    #: the wheel's members, as the plan read them (what a torch fat wheel holds besides
    #: ``closure``'s libraries)
    members: tuple[str, ...] = ()
    detail: Any = None
    summary: Closure | PlanSummary | None = None

    def planned(self, seconds: float) -> BundleResult:
        """The plan as a result: what ``--dry-run`` reports."""
        if self.action == "up-to-date":
            return BundleResult(
                str(self.job.wheel), self.output, "up-to-date", seconds, platform=self.platform
            )
        return BundleResult(
            str(self.job.wheel),
            self.output,
            "planned",
            seconds,
            self.summary,
            platform=self.platform,
        )


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

    def plan(self, job: BundleJob) -> WheelTask:
        """What bundling the wheel does: reads the wheel and the tree, writes nothing, starts
        no process."""
        ...

    def execute(self, planned: WheelTask, progress: Progress) -> BundleResult:
        """Do what ``planned`` says (nothing when the output is up to date)."""
        ...

    def plan_lines(self, result: BundleResult) -> Iterator[str]:
        """A planned (dry-run) bundle, for people."""
        ...
