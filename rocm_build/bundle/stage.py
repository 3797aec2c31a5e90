"""The bundle stage: ``plan(ctx, wheels, ...)`` decides everything, wheel by wheel (torch
first, so the others are planned against the torch fat wheel its plan will write), reading the
wheels and the tree and writing nothing; ``execute(plan, progress)`` does it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from packaging.utils import canonicalize_name

from rocm_build.bundle import platforms, rocmwheels
from rocm_build.bundle.job import BundleJob, WheelPlan
from rocm_build.bundle.model import BundleResult, ThinSource, TorchWheel
from rocm_build.common import faults, tempfiles
from rocm_build.common.errors import BundleError, ConfigError
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.config.loader import BundleSettings, ProjectSpec
from rocm_build.run.context import RunContext
from rocm_build.wheel.deflate import DEFAULT_DEFLATE, Deflate
from rocm_build.wheel.wheelfile import WheelName

__all__ = ["BundlePlans", "BundleResults", "bundle_many", "execute", "plan"]


@dataclass(frozen=True)
class BundlePlans:
    """The wheels to bundle, in order, and everything they are bundled with."""

    wheels: tuple[Path, ...]  # torch first
    rocm: Path
    output_dir: Path
    targets: tuple[str, ...]  # () = each wheel's own device code's
    settings: BundleSettings
    projects: Mapping[str, ProjectSpec]
    allow_outside: tuple[Path, ...]
    env: Mapping[str, str]
    no_wait: bool
    dry_run: bool
    lib_dir: str | None = None  # --lib-dir: the same folder for every wheel
    torch: TorchWheel | None = None  # a torch fat wheel given with --with
    torch_lib_dir: str = "torch/lib"
    thin: ThinSource | None = None
    #: the ``arch`` setting's targets with their features: the device code is cut for them
    device_targets: tuple[str, ...] = ()
    #: what happens to each wheel, in order (see :func:`plan`)
    wheel_plans: tuple[WheelPlan, ...] = ()
    #: seconds the plan took (reported with a dry run's results)
    seconds: float = 0.0
    #: how the writers deflate new members (a dry run writes none: no cache)
    deflate: Deflate = DEFAULT_DEFLATE

    def job(
        self, wheel: Path, lib_dir: str, torch: TorchWheel | None, *, torch_pending: bool = False
    ) -> BundleJob:
        """One wheel's job: the settings whole, this wheel's facts beside them."""
        return BundleJob(
            settings=self.settings,
            wheel=wheel,
            rocm=self.rocm,
            output_dir=self.output_dir,
            targets=self.targets,
            lib_dir=lib_dir,
            torch=torch,
            allow_outside=self.allow_outside,
            thin=self.thin,
            deflate=self.deflate,
            device_targets=self.device_targets,
            env=self.env,
            no_wait=self.no_wait,
            dry_run=self.dry_run,
            torch_pending=torch_pending,
        )

    def into(self, folder: Path) -> BundlePlans:
        """The same plan with every wheel written into ``folder`` (``--split-arch``'s scratch
        folder) instead: made with ``fresh``, so no wheel was found up to date."""
        moved = []
        for wp in self.wheel_plans:
            job, plan = wp.job, wp.plan
            torch = job.torch.moved(folder) if job.torch and job.torch_pending else job.torch
            out = str(folder / Path(wp.output).name) if wp.output else ""
            moved.append(
                replace(
                    wp,
                    job=replace(job, output_dir=folder, torch=torch),
                    output=out,
                    plan=replace(plan, output=out) if plan else None,
                )
            )
        return replace(self, output_dir=folder, wheel_plans=tuple(moved))

    def as_json(self) -> dict[str, Any]:
        return {
            "wheels": [str(w) for w in self.wheels],
            "rocm": str(self.rocm),
            "output_dir": str(self.output_dir),
            "targets": list(self.targets),
            "dry_run": self.dry_run,
            "mode": "thin" if self.thin else "fat",
            "device_targets": list(self.device_targets),
            "prune_device_code": self.settings.prune_device_code,
            "plans": [
                {"wheel": str(wp.job.wheel), "action": wp.action, "output": wp.output}
                for wp in self.wheel_plans
            ],
        }


@dataclass(frozen=True)
class BundleResults:
    """Per wheel, what the bundle did."""

    results: tuple[BundleResult, ...] = field(default=())

    @property
    def outputs(self) -> list[Path]:
        return [Path(r.output) for r in self.results if r.output]

    @property
    def nothing_to_do(self) -> str:
        """ "" when a wheel was written; else why not."""
        statuses = {r.status for r in self.results}
        if not statuses:
            return "no wheels"
        if statuses == {"planned"}:
            return "dry run: nothing written"
        if statuses <= {"up-to-date", "unchanged"} and not any(
            r.status == "unchanged" and r.plan is not None for r in self.results
        ):
            return "up to date"
        return ""

    def as_json(self) -> dict[str, Any]:
        return {
            "wheels": [r.as_json() for r in self.results],
            "outputs": [str(p) for p in self.outputs],
            "nothing_to_do": self.nothing_to_do,
        }


def _is_torch(path: Path) -> bool:
    return canonicalize_name(WheelName.parse(path.name).distribution) == "torch"


def plan(
    ctx: RunContext,
    wheels: Sequence[Path],
    *,
    with_wheels: Sequence[Path] = (),
    lib_dir: str | None = None,
    dry_run: bool = False,
    mode: Literal["fat", "thin"] = "fat",
    target_family: str = rocmwheels.DEFAULT_FAMILY,
    fresh: bool = False,
) -> BundlePlans:
    """The stage's plan: the wheels in order, the torch fat wheel given with ``with_wheels``,
    the decided tree, the settings, for ``mode`` thin the ROCm packages of the tree's version
    (``target_family``) the wheels will depend on, and what happens to each wheel
    (:class:`WheelPlan`: up to date, or every library, search path, data file and cut of device
    code). A wheel after torch is planned against the torch fat wheel torch's plan will write.
    Reads the wheels and the tree; writes nothing, starts no process: unless ``dry_run``, an
    output folder that is a file is refused here, and ``execute`` makes a missing one.
    ``fresh``: no output counts as up to date (``--split-arch`` writes into a scratch folder)."""
    start = time.monotonic()
    cfg = ctx.settings
    targets = ctx.targets.bases
    torch_spec = cfg.projects.get("torch")
    torch_lib_dir = torch_spec.lib_dir if torch_spec and torch_spec.lib_dir else "torch/lib"
    torch: TorchWheel | None = None
    for extra in with_wheels:
        if not _is_torch(extra):
            msg = (
                f"--with {extra}: not a torch wheel; --with takes the torch fat wheel whose "
                "libraries a torchvision or torchaudio wheel uses (give other wheels as arguments)"
            )
            raise ConfigError(msg)
        if torch is not None:
            msg = f"--with {extra}: a second torch wheel ({torch.path} is the first); give one"
            raise ConfigError(msg)
        torch = TorchWheel.read(extra.resolve(), torch_lib_dir)
    if not dry_run:
        tempfiles.refuse_file(ctx.output_dir)
    device_targets = ctx.targets.names
    s = cfg.bundle
    cache = "none" if dry_run else s.deflate_cache
    deflate = Deflate.of(s.deflater, s.compression_level, cache, s.deflate_cache_gb, cfg.env)
    thin = None
    if mode == "thin":  # a kpack-split tree's device packages: the requested targets'
        thin = rocmwheels.thin_source(ctx.tree.root, target_family, device_targets)
    stage = BundlePlans(
        wheels=tuple(sorted(wheels, key=lambda p: 0 if _is_torch(p) else 1)),
        rocm=ctx.tree.root,
        output_dir=ctx.output_dir,
        targets=targets,
        settings=cfg.bundle,
        projects=cfg.projects,
        allow_outside=tuple(cfg.cwd / a for a in cfg.bundle.allow_outside),
        env=cfg.env,
        no_wait=cfg.general.no_wait,
        dry_run=dry_run,
        lib_dir=lib_dir,
        torch=torch,
        torch_lib_dir=torch_lib_dir,
        thin=thin,
        device_targets=device_targets,
        deflate=deflate,
    )
    planned = tuple(_wheel_plans(stage, fresh))
    return replace(stage, wheel_plans=planned, seconds=time.monotonic() - start)


def _wheel_plans(stage: BundlePlans, fresh: bool) -> Iterator[WheelPlan]:
    """Each wheel's plan, torch first: the others take torch's libraries from the fat wheel it
    is (up to date) or will be (planned)."""
    s = stage.settings
    torch, pending = stage.torch, False
    for wheel in stage.wheels:
        platform = platforms.choose(wheel, s.platform, thin=stage.thin is not None)
        lib_dir = platform.lib_dir(wheel, stage.projects, stage.lib_dir)
        is_torch = _is_torch(wheel)
        job = stage.job(wheel, lib_dir, None if is_torch else torch, torch_pending=pending)
        wp = platform.plan(replace(job, fresh=fresh))
        if is_torch and lib_dir:
            if wp.action == "up-to-date":
                torch, pending = TorchWheel.read(Path(wp.output), lib_dir), False
            elif wp.plan is not None:
                torch, pending = TorchWheel.planned(wp.plan, wp.members, lib_dir), True
        yield wp


def execute(plan_: BundlePlans, progress: Progress = NO_PROGRESS) -> BundleResults:
    """Do what each wheel's plan says (``dry_run``: report the plans, write nothing)."""
    if plan_.dry_run:
        each = plan_.seconds / max(len(plan_.wheel_plans), 1)
        return BundleResults(tuple(wp.planned(each) for wp in plan_.wheel_plans))
    with contextlib.ExitStack() as stack:
        tempfiles.check_folder(plan_.output_dir)  # made if missing
        # Again at the end: a run killed just before this one may still be going away.
        stack.enter_context(tempfiles.swept(plan_.output_dir))
        faults.point("bundle.swept")
        return _execute(plan_, progress)


def _execute(plan_: BundlePlans, progress: Progress) -> BundleResults:
    plan_.deflate.check()
    results: list[BundleResult] = []
    for wp in plan_.wheel_plans:
        if wp.job.torch_pending and wp.job.torch is not None:
            wp = replace(wp, job=replace(wp.job, torch=_written(wp.job.torch)))
        results.append(platforms.PLATFORMS[wp.platform].execute(wp, progress))
    return BundleResults(tuple(results))


def _written(planned: TorchWheel) -> TorchWheel:
    """The torch fat wheel just written, read: it must hold what its plan said."""
    found = TorchWheel.read(Path(planned.path), planned.lib_dir)
    if dict(found.libs) != dict(planned.libs):
        extra = sorted(set(found.libs) ^ set(planned.libs))
        raise BundleError(
            f"{Path(planned.path).name} does not hold the libraries its plan named "
            f"({', '.join(extra)}); report this, with the command, as a rocm-build bug"
        )
    return found


def bundle_many(
    ctx: RunContext, wheels: Sequence[Path], *, progress: Progress = NO_PROGRESS, **options: Any
) -> list[BundleResult]:
    """:func:`plan` (with ``options``) and :func:`execute` in one call: each wheel's result."""
    return list(execute(plan(ctx, wheels, **options), progress).results)
