"""The bundle stage: ``plan(ctx, wheels, ...)`` decides the order and the settings once,
``execute(plan, progress)`` bundles each wheel (torch first, so the others can take its
libraries from the torch fat wheel just made)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from rocm_build import arch, deflatecache, faults, rawdeflate, tempfiles
from rocm_build.config import BundleSettings, ProjectSpec
from rocm_build.context import RunContext
from rocm_build.errors import BundleError, ConfigError
from rocm_build.progress import NO_PROGRESS, Progress
from rocm_build.wheelfile import WheelName, WheelReader

from .device import DeviceOptions
from .linux import bundle_wheel, project_lib_dir
from .model import BundleResult, ThinSource, TorchWheel
from .windows import bundle_windows, is_windows_wheel

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
    thin: ThinSource | None = None,
) -> BundlePlans:
    """The stage's plan: the wheels in order, the torch fat wheel given with ``with_wheels``,
    the tree and the settings. Unless ``dry_run``, the output folder must be one (it is made
    if missing), which is checked before the tree is looked for."""
    cfg = ctx.settings
    targets = tuple(ctx.arch_targets)
    torch_spec = cfg.projects.get("torch")
    torch_lib_dir = torch_spec.lib_dir if torch_spec and torch_spec.lib_dir else "torch/lib"
    torch: TorchWheel | None = None
    for extra in with_wheels:
        if _is_torch(extra):
            torch = TorchWheel.read(extra.resolve(), torch_lib_dir)
    if not dry_run:
        tempfiles.check_folder(ctx.output_dir)
    device_targets = arch.expand(
        arch.split_arch(cfg.general.arch or ""),
        known=cfg.known_targets,
        families=cfg.target_families,
    )
    return BundlePlans(
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
    )


def execute(plan_: BundlePlans, progress: Progress = NO_PROGRESS) -> BundleResults:
    """Bundle each wheel of the plan (``dry_run``: plan each and write nothing; a torchvision
    wheel given with an unbundled torch is then planned against that torch's libraries)."""
    with contextlib.ExitStack() as stack:
        if not plan_.dry_run:
            # Again at the end: a run killed just before this one may still be going away.
            stack.enter_context(tempfiles.swept(plan_.output_dir))
            faults.point("bundle.swept")
        return _execute(plan_, progress)


def _execute(plan_: BundlePlans, progress: Progress) -> BundleResults:
    s = plan_.settings
    deflatecache.configure(s.deflate_cache, s.deflate_cache_gb, plan_.env)
    rawdeflate.configure(s.deflater)
    torch = plan_.torch
    results: list[BundleResult] = []
    for wheel in plan_.wheels:
        if _windows(plan_, wheel):
            results.append(_bundle_windows(plan_, wheel))
            continue
        with WheelReader(wheel) as reader:
            members = [m.name for m in reader.members]
        distribution = WheelName.parse(wheel.name).distribution
        project_dir = project_lib_dir(distribution, plan_.projects, members, plan_.lib_dir)
        is_torch = _is_torch(wheel)
        result = _bundle_linux(plan_, wheel, project_dir, None if is_torch else torch, progress)
        faults.point("bundle.done")
        if is_torch and not plan_.dry_run:
            torch = TorchWheel.read(Path(result.output), project_dir)
        results.append(result)
    return BundleResults(tuple(results))


def _windows(plan_: BundlePlans, wheel: Path) -> bool:
    platform = plan_.settings.platform
    _check_platform(wheel, platform)
    windows = platform == "windows" or (platform == "auto" and is_windows_wheel(wheel))
    if windows and plan_.thin is not None:
        raise BundleError(
            f"{wheel.name}: --mode thin makes Linux wheels only so far: bundle this "
            "Windows wheel in fat mode"
        )
    return windows


def _check_platform(wheel: Path, platform: str) -> None:
    """A platform asked for that the wheel's tag contradicts is a mistake, not a no-op: a Linux
    wheel through delvewheel would come out unbundled."""
    tags = WheelName.parse(wheel.name).tags
    linux = any(t.split("-")[2].startswith(("linux", "manylinux", "musllinux")) for t in tags)
    windows = is_windows_wheel(wheel)
    if (platform == "windows" and linux) or (platform == "linux" and windows):
        other = "Linux" if linux else "Windows"
        raise ConfigError(
            f"{wheel.name} is a {other} wheel but --platform (bundle.platform) is {platform}: "
            "leave it at auto, which goes by the wheel's tag"
        )


def _bundle_windows(plan_: BundlePlans, wheel: Path) -> BundleResult:
    s = plan_.settings
    return bundle_windows(
        wheel, rocm=plan_.rocm, output_dir=plan_.output_dir, targets=plan_.targets,
        dlopen_patterns=list(s.dlopen_libs), data_trees=list(s.data_trees),
        level=s.compression_level, dry_run=plan_.dry_run,
        allow_outside=list(plan_.allow_outside), no_wait=plan_.no_wait,
        allow_rocm_mismatch=s.allow_rocm_mismatch,
    )  # fmt: skip


def _bundle_linux(
    plan_: BundlePlans,
    wheel: Path,
    lib_dir: str,
    torch: TorchWheel | None,
    progress: Progress,
) -> BundleResult:
    s = plan_.settings
    return bundle_wheel(
        wheel,
        rocm=plan_.rocm,
        output_dir=plan_.output_dir,
        targets=plan_.targets,
        lib_dir=lib_dir,
        dlopen_patterns=list(s.dlopen_libs),
        data_trees=list(s.data_trees),
        level=s.compression_level,
        policy=s.policy,
        torch=torch,
        progress=progress,
        dry_run=plan_.dry_run,
        allow_outside=list(plan_.allow_outside),
        system_libs=list(s.system_libs),
        rocm_libs=list(s.rocm_libs),
        env=plan_.env,
        no_wait=plan_.no_wait,
        thin=plan_.thin,
        allow_rocm_mismatch=s.allow_rocm_mismatch,
        keep_other_rocm=s.keep_other_rocm,
        device=DeviceOptions(plan_.device_targets, not s.prune_device_code, s.allow_missing_arch),
    )


def bundle_many(
    ctx: RunContext, wheels: Sequence[Path], *, progress: Progress = NO_PROGRESS, **options: Any
) -> list[BundleResult]:
    """:func:`plan` (with ``options``) and :func:`execute` in one call: each wheel's result."""
    return list(execute(plan(ctx, wheels, **options), progress).results)
