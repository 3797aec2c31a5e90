"""The bundle stage's plan: ``plan(ctx, wheels, ...)`` decides everything, wheel by wheel (torch
first, so the others are planned against the torch fat wheel its plan will write), reading the
wheels and the tree and writing nothing: the :class:`Plan` (each wheel's :class:`.job.WheelTask`);
:mod:`.execute` does it."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from packaging.utils import canonicalize_name

from rocm_build.bundle import platforms, rocmwheels
from rocm_build.bundle.job import BundleJob, WheelTask
from rocm_build.bundle.model import ThinSource, TorchWheel
from rocm_build.bundle.wheelhouse import Wheelhouse
from rocm_build.common import tempfiles
from rocm_build.common.errors import ConfigError
from rocm_build.config.loader import BundleSettings, ProjectSpec
from rocm_build.run.context import RunContext
from rocm_build.wheel.deflate import DEFAULT_DEFLATE, Deflate
from rocm_build.wheel.wheelfile import WheelName

__all__ = ["Plan", "plan"]


@dataclass(frozen=True)
class Plan:
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
    tasks: tuple[WheelTask, ...] = ()
    #: seconds the plan took (reported with a dry run's results)
    seconds: float = 0.0
    #: how the writers deflate new members (a dry run writes none: no cache)
    deflate: Deflate = DEFAULT_DEFLATE
    #: set: each wheel goes to the wheelhouse's folder of its target set (``output_dir`` is
    #: that folder when the targets were asked for, else the wheelhouse); None: ``-w DIR``
    wheelhouse: Wheelhouse | None = None

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
            wheelhouse=self.wheelhouse,
        )

    def into(self, folder: Path) -> Plan:
        """The same plan with every wheel written into ``folder`` (``--split-arch``'s scratch
        folder) instead: made with ``fresh``, so no wheel was found up to date."""
        moved = []
        for task in self.tasks:
            job, closure = task.job, task.closure
            torch = job.torch.moved(folder) if job.torch and job.torch_pending else job.torch
            out = str(folder / Path(task.output).name) if task.output else ""
            new = replace(closure, output=out) if closure else None
            moved.append(
                replace(
                    task,
                    job=replace(job, output_dir=folder, torch=torch),
                    output=out,
                    closure=new,
                    summary=new if task.summary is closure else task.summary,
                )
            )
        return replace(self, output_dir=folder, tasks=tuple(moved), wheelhouse=None)

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
                {"wheel": str(task.job.wheel), "action": task.action, "output": task.output}
                for task in self.tasks
            ],
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
) -> Plan:
    """The stage's plan: the wheels in order, the torch fat wheel given with ``with_wheels``,
    the decided tree, the settings, for ``mode`` thin the ROCm packages of the tree's version
    (``target_family``) the wheels will depend on, and what happens to each wheel
    (:class:`WheelTask`: up to date, or every library, search path, data file and cut of device
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
    device_targets = ctx.targets.names
    s = cfg.bundle
    cache = "none" if dry_run else s.deflate_cache
    deflate = Deflate.of(s.deflater, s.compression_level, cache, s.deflate_cache_gb, cfg.env)
    thin = None
    if mode == "thin":  # a kpack-split tree's device packages: the requested targets'
        thin = rocmwheels.thin_source(ctx.tree.root, target_family, device_targets)
    house, output_dir = _folder(ctx, device_targets, thin, split=fresh)
    if not dry_run:
        tempfiles.refuse_file(output_dir)
    stage = Plan(
        wheels=tuple(sorted(wheels, key=lambda p: 0 if _is_torch(p) else 1)),
        rocm=ctx.tree.root,
        output_dir=output_dir,
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
        wheelhouse=None if fresh else house,
    )
    planned = tuple(_tasks(stage, fresh))
    done = replace(stage, tasks=planned, seconds=time.monotonic() - start)
    if fresh and house is not None and not targets:  # --split-arch: its wheels' own targets
        return done.into(_split_folder(house, planned))
    return done


def _folder(
    ctx: RunContext, targets: Sequence[str], thin: ThinSource | None, *, split: bool
) -> tuple[Wheelhouse | None, Path]:
    """The wheelhouse (None: ``-w DIR``, ``bundle.wheel_dir``) and the plan's output folder:
    -w's, the folder of the targets asked for (``--split-arch``: its own), else the wheelhouse
    (each wheel's folder is decided by its plan, from its own device code)."""
    cfg = ctx.settings
    if cfg.bundle.wheel_dir:
        return None, cfg.absolute(cfg.bundle.wheel_dir)
    house = Wheelhouse(ctx.wheelhouse, cfg.target_families)
    if split:
        return house, house.split_folder(targets) if targets else house.root
    if targets or thin:
        return house, house.folder(targets, thin=thin.family if thin else None)
    return house, house.root


def _split_folder(house: Wheelhouse, tasks: Sequence[WheelTask]) -> Path:
    """``--split-arch`` without ``--arch``: the folder of the one target set its wheels carry
    code for."""
    sets = {tuple(t.closure.targets) for t in tasks if t.closure is not None}
    if len(sets) > 1:
        names = " and ".join(sorted(";".join(s) or "none" for s in sets))
        msg = (
            f"--split-arch: the wheels carry device code for different targets ({names}), and "
            "their host and device wheels go to one folder: pass --arch, split them one run "
            "each, or name the folder with -w DIR"
        )
        raise ConfigError(msg)
    return house.split_folder(next(iter(sets), ()))


def _tasks(stage: Plan, fresh: bool) -> Iterator[WheelTask]:
    """Each wheel's task, torch first: the others take torch's libraries from the fat wheel it
    is (up to date) or will be (planned)."""
    s = stage.settings
    torch, pending = stage.torch, False
    for wheel in stage.wheels:
        platform = platforms.choose(wheel, s.platform, thin=stage.thin is not None)
        lib_dir = platform.lib_dir(wheel, stage.projects, stage.lib_dir)
        is_torch = _is_torch(wheel)
        job = stage.job(wheel, lib_dir, None if is_torch else torch, torch_pending=pending)
        task = platform.plan(replace(job, fresh=fresh))
        if is_torch and lib_dir:
            if task.action == "up-to-date":
                torch, pending = TorchWheel.read(Path(task.output), lib_dir), False
            elif task.closure is not None:
                torch, pending = TorchWheel.planned(task.closure, task.members, lib_dir), True
        yield task
