"""Bundling one Linux wheel: analyze it, plan, apply the plan (or find the output up to date)."""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from rocm_build import __version__, faults, locks, rawdeflate, tempfiles, wheelfile
from rocm_build.config import ProjectSpec
from rocm_build.errors import BundleError, RocmTreeError
from rocm_build.progress import NO_PROGRESS, Progress
from rocm_build.treepath import TreeGuard, denied, reading
from rocm_build.wheelfile import WheelReader

from .analyze import PROVENANCE, WheelAnalysis, analyze
from .apply import (
    apply_plan,
    find_linkers,
    fingerprint,
    provenance_in,
    rocm_version,
    stat_entry,
    up_to_date,
)
from .data import aotriton_images_out, data_target_gaps, select_data
from .device import NO_DEVICE, DeviceOptions, coverage_gaps, device_sources, gap_error, plan_device
from .libraries import LibraryIndex, system_lib_dirs, tree_lib_dirs
from .model import BundlePlan, BundleResult, DataFile, ThinSource, TorchWheel
from .plan import make_plan
from .policy import policy_whitelist
from .rocmlabel import built_with, checked_version, other_rocm

__all__ = ["bundle_wheel", "check_tree", "project_lib_dir"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Job:
    """One wheel to bundle and the settings it is bundled with."""

    wheel: Path
    rocm: Path
    output_dir: Path
    targets: tuple[str, ...]
    lib_dir: str
    dlopen_patterns: tuple[str, ...]
    data_trees: tuple[str, ...]
    level: int
    policy: str
    torch: TorchWheel | None
    allow_outside: tuple[Path, ...]
    system_libs: tuple[str, ...]
    rocm_libs: tuple[str, ...]
    thin: ThinSource | None
    #: a tree of another ROCm than the wheel's is allowed (relabelled); another ROCm's unused
    #: copies of added libraries are kept (see :mod:`.rocmlabel`)
    allow_rocm_mismatch: bool = False
    keep_other_rocm: bool = False
    device: DeviceOptions = NO_DEVICE

    @property
    def provenance_arcname(self) -> str:
        return f"{self.lib_dir.split('/', 1)[0]}/{PROVENANCE}"

    def fingerprint(self) -> str:
        """What the output depends on: a different value makes an existing output stale."""
        settings: dict[str, Any] = {
            "tool": __version__,
            "input": stat_entry(self.wheel),
            "rocm": str(self.rocm.resolve()),
            "targets": list(self.targets),
            "lib_dir": self.lib_dir,
            "dlopen": list(self.dlopen_patterns),
            "data_trees": list(self.data_trees),
            "level": self.level,
            "deflater": rawdeflate.implementation(),
            "policy": self.policy,
            "torch": stat_entry(Path(self.torch.path)) if self.torch else None,
            "allow_outside": [str(a) for a in self.allow_outside],
            "system_libs": list(self.system_libs),
            "rocm_libs": list(self.rocm_libs),
        }
        if self.thin is not None:  # fat wheels keep the fingerprint they had
            settings = {**settings, "thin": [self.thin.family, self.thin.version]}
        if self.allow_rocm_mismatch or self.keep_other_rocm:  # the same: only when set
            settings = {**settings, "mismatch": [self.allow_rocm_mismatch, self.keep_other_rocm]}
        d = self.device
        if d.targets:  # so do bundles without --arch
            settings = {**settings, "device_code": [list(d.targets), d.keep_all, d.allow_missing]}
        return fingerprint(settings)


def bundle_wheel(
    wheel: Path,
    *,
    rocm: Path,
    output_dir: Path,
    targets: Sequence[str],
    lib_dir: str,
    dlopen_patterns: Sequence[str],
    data_trees: Sequence[str],
    level: int = 6,
    policy: str = "auto",
    torch: TorchWheel | None = None,
    system_dirs: Sequence[Path] | None = None,
    progress: Progress = NO_PROGRESS,
    dry_run: bool = False,
    allow_outside: Sequence[Path] = (),
    system_libs: Sequence[str] = ("*",),
    rocm_libs: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    no_wait: bool = False,
    thin: ThinSource | None = None,
    allow_rocm_mismatch: bool = False,
    keep_other_rocm: bool = False,
    device: DeviceOptions = NO_DEVICE,
) -> BundleResult:
    """Bundle one wheel (see the package docstring); a no-op when its output is up to date.
    ``dry_run``: plan only (status "planned"). ``allow_outside``: folders outside the tree its
    symlinks may lead to. ``system_libs`` (patterns): libraries that may come from the build
    machine (``LD_LIBRARY_PATH`` of ``env``, ld.so.conf, the defaults) when the tree lacks them;
    ``rocm_libs``, the ``dlopen_patterns`` and the tree's own libraries never may. Written under
    the output's lock (``no_wait``). ``device``: see :func:`_device`."""
    start = time.monotonic()
    faults.point("bundle.start")
    wheel = wheel.resolve()
    with reading("the ROCm tree"):
        check_tree(rocm)
    job = _Job(
        wheel, rocm, output_dir, tuple(targets), lib_dir, tuple(dlopen_patterns),
        tuple(data_trees), level, policy, torch, tuple(allow_outside), tuple(system_libs),
        tuple(rocm_libs), thin, allow_rocm_mismatch, keep_other_rocm, device,
    )  # fmt: skip
    fp = job.fingerprint()
    if existing := up_to_date(wheel, output_dir, job.provenance_arcname, fp):
        return BundleResult(str(wheel), str(existing), "up-to-date", time.monotonic() - start)
    scratch_parent = output_dir if output_dir.is_dir() else Path(tempfile.gettempdir())
    with (
        tempfiles.writing(output_dir / wheel.name, doing="extracting the libraries of"),
        WheelReader(wheel) as reader,
        tempfiles.folder(scratch_parent, f"{wheel.name}.extract") as tmp,
        contextlib.ExitStack() as held,
    ):
        analysis = analyze(
            reader, keep_in=Path(tmp), device_code=not job.targets, fault="bundle.extracted"
        )
        if not job.targets:  # default: the targets the wheel's own device code was built for
            job = replace(job, targets=tuple(sorted(analysis.device_targets)))
        plan = _plan(job, analysis, fp, system_dirs, os.environ if env is None else env)
        plan = _device(job, plan, analysis, dry_run)
        if dry_run:
            return BundleResult(
                str(wheel), plan.output, "planned", time.monotonic() - start, plan.summary()
            )
        faults.point("bundle.planned")
        held.enter_context(locks.hold(Path(plan.output), f"the wheel {plan.output}",
                                      no_wait=no_wait))  # fmt: skip
        faults.point("bundle.locked")
        if done := _already_done(job, plan, reader, fp, start):
            return done
        provenance = _provenance(job, plan, reader, fp)
        _log_plan(plan, time.monotonic() - start)
        output_dir.mkdir(parents=True, exist_ok=True)
        extracted = {arc: m.path for arc, m in analysis.elves.items() if m.path is not None}
        apply_plan(
            plan, reader, extracted, level=level, provenance=provenance,
            linkers=find_linkers(rocm), progress=progress,
        )  # fmt: skip
        zip64 = tuple(wheelfile.zip64_reasons(Path(plan.output)))
    seconds = time.monotonic() - start
    return BundleResult(str(wheel), plan.output, "bundled", seconds, plan.summary(), zip64)


def _plan(
    job: _Job,
    analysis: WheelAnalysis,
    fp: str,
    system_dirs: Sequence[Path] | None,
    env: Mapping[str, str],
) -> BundlePlan:
    """The plan for ``job``: libraries from the tree (then the build machine), data for the
    targets, the output named by the version and the platform tag it satisfies."""
    current = wheelfile.consistent_version(analysis.name.version, analysis.metadata)
    version = checked_version(
        current,
        built_with(current, analysis.bundle_record()),
        job.rocm,
        allow=job.allow_rocm_mismatch,
        wheel=job.wheel.name,
    )
    guard = TreeGuard.of(job.rocm, job.allow_outside)
    with reading("the ROCm tree's library folders"):
        lib_dirs = tree_lib_dirs(job.rocm)
    if system_dirs is None:
        like = next(iter(analysis.elves.values()), None)
        system_dirs = system_lib_dirs(like.info.machine if like else "EM_X86_64", env=env)
    index = LibraryIndex(lib_dirs, system_dirs, guard)

    def selector(names: Sequence[str]) -> tuple[list[DataFile], int]:
        return select_data(job.rocm, job.data_trees, job.lib_dir, names, job.targets, guard=guard)

    so_patterns = [p for p in job.dlopen_patterns if ".so" in p]
    stems = [f"{stem}.so*" for stem in sorted(index.stems())]

    def planned(left_out: Sequence[str]) -> BundlePlan:
        return make_plan(
            input_path=job.wheel,
            output_path=job.output_dir / job.wheel.name,
            wheel_name=analysis.name,
            metadata=analysis.metadata,
            members=[m for m in analysis.members if m not in left_out],
            elves={a: i for a, i in analysis.infos.items() if a not in left_out},
            index=index,
            lib_dir=job.lib_dir,
            targets=job.targets,
            dlopen_patterns=job.dlopen_patterns,
            data_selector=selector,
            whitelist=policy_whitelist(job.policy),
            torch=job.torch,
            fingerprint=fp,
            policy=job.policy,
            rocm_only=[*job.rocm_libs, *so_patterns, *stems],
            system_allowed=job.system_libs,
            tree=str(job.rocm),
            thin=job.thin,
        )

    provisional = planned(())
    others = tuple(other_rocm(analysis.infos, provisional.libraries, provisional.lib_dir))
    if others and not job.keep_other_rocm:
        # planned again without them: what only they needed is not added either
        provisional = replace(planned(others), left_out=others)
    elif others:
        provisional = replace(provisional, other_rocm=others)
    out_name = analysis.name.with_version(version).with_platform(provisional.platform_tag)
    names = [lib.name for lib in provisional.libraries]
    gaps = data_target_gaps(job.rocm, job.data_trees, names, job.targets)
    images, families = aotriton_images_out(analysis.members, job.targets)
    return replace(
        provisional,
        images_out=images,
        images_out_families=families,
        version=version,
        output=str(job.output_dir / str(out_name)),
        data_missing=gaps,
    )


def _device(job: _Job, plan: BundlePlan, analysis: WheelAnalysis, dry_run: bool) -> BundlePlan:
    """The plan with what happens to the device code of the files it writes: the offload
    bundles of every ELF file keep only the entries that serve the targets (``keep_all``: all),
    and each file with device code must still serve every target: else ``RequirementNotMet``
    (exit 11) before anything is written, unless ``allow_missing`` or ``dry_run`` (the plan's
    ``device_gaps`` say so)."""
    d = job.device
    if not d.targets:
        return plan
    own = {arc: m for arc, m in analysis.elves.items() if m.info.is_host}
    with reading("the device code of the libraries"):
        files = plan_device(
            device_sources(own, plan.libraries), d.targets, prune_code=not d.keep_all
        )
    gaps = coverage_gaps(files, d.targets)
    if gaps and not d.allow_missing and not dry_run:
        raise gap_error(gaps)
    return replace(plan, device_targets=d.targets, device=files, device_gaps=gaps)


def _already_done(
    job: _Job, plan: BundlePlan, reader: WheelReader, fp: str, start: float
) -> BundleResult | None:
    """Under the output's lock: the output is up to date (another run may have written it
    while this one waited), or the wheel needs nothing and is handed on as it is."""
    wheel, out = job.wheel, Path(plan.output)
    if out.exists() and (existing := up_to_date(wheel, job.output_dir, job.provenance_arcname, fp)):
        return BundleResult(str(wheel), str(existing), "up-to-date", time.monotonic() - start)
    if plan.changes_content or out.name != wheel.name:
        return None
    reader.verify_all()  # handed on as it is: its RECORD must be right
    if out.resolve() == wheel:
        log.info("%s is already self-contained: nothing to do", wheel.name)
        return BundleResult(str(wheel), str(out), "unchanged", time.monotonic() - start)
    job.output_dir.mkdir(parents=True, exist_ok=True)
    tempfiles.atomic_copy(wheel, out)
    log.info("%s is already self-contained: copied unchanged", wheel.name)
    return BundleResult(str(wheel), str(out), "unchanged", time.monotonic() - start, plan.summary())


def _provenance(job: _Job, plan: BundlePlan, reader: WheelReader, fp: str) -> dict[str, Any]:
    """What the output records about its making: settings, libraries (with those an earlier
    bundle of the input added), and the source files whose change makes it stale."""
    sources = [stat_entry(Path(lib.source)) for lib in plan.libraries]
    sources += [stat_entry(Path(d.source)) for d in plan.data]
    old = provenance_in(reader, plan.provenance_arcname) or {}
    summary = plan.summary()
    names = {lib.name for lib in plan.libraries}
    earlier = [x for x in old.get("libraries", []) if x["name"] not in names]
    return {
        "tool": f"rocm-build {__version__}",
        "fingerprint": fp,
        "rocm": str(job.rocm.resolve()),
        "rocm_version": rocm_version(job.rocm),
        "targets": list(job.targets),
        "lib_dir": plan.lib_dir,
        "libraries": sorted(summary["libraries"] + earlier, key=lambda x: str(x["name"])),
        "from_system": summary["from_system"],
        "allowed_outside": [str(a) for a in job.allow_outside],
        "data_files": len(plan.data) + int(old.get("data_files", 0)),
        "data_skipped": plan.data_skipped,
        "from_torch": [n for n, _ in plan.from_torch],
        "device_targets": list(plan.device_targets),
        "device_code": {d.arcname: d.summary() for d in plan.device},
        **({"device_gaps": list(plan.device_gaps)} if plan.device_gaps else {}),
        "sources": sources,
        **({"mode": "thin"} if job.thin is not None else {}),
    }


def _log_plan(plan: BundlePlan, seconds: float) -> None:
    log.info(
        "bundling %s (planned in %.1f s): %d libraries, %d data files (%d left out for "
        "other targets), %d search paths",
        Path(plan.input).name,
        seconds,
        len(plan.libraries),
        len(plan.data),
        plan.data_skipped,
        len(plan.rpaths),
    )


def check_tree(rocm: Path) -> None:
    if not rocm.exists():
        msg = f"ROCm tree {rocm} does not exist; pass --rocm DIR (the tree it was built with)"
        raise RocmTreeError(msg)
    if not rocm.is_dir() or not (rocm / "lib").is_dir():
        raise RocmTreeError(f"{rocm} is not a ROCm tree (no lib/ folder); pass --rocm DIR")
    for folder in (rocm, rocm / "lib"):
        if not os.access(folder, os.R_OK | os.X_OK):
            raise denied(PermissionError(13, "Permission denied", str(folder)), "the ROCm tree")


def project_lib_dir(
    distribution: str, projects: Mapping[str, ProjectSpec], members: Sequence[str], flag: str | None
) -> str:
    """The wheel's library folder: --lib-dir, the known project's, else ``<top package>/lib``."""
    if flag:
        return flag.strip("/")
    canon = canonicalize_name(distribution)
    for name, spec in projects.items():
        if canonicalize_name(name) == canon and spec.lib_dir:
            return str(spec.lib_dir).strip("/")
    tops = sorted(
        {
            m.split("/", 1)[0]
            for m in members
            if "/" in m and not m.split("/", 1)[0].endswith((".dist-info", ".data"))
        }
    )
    if not tops:
        raise BundleError(
            f"{distribution}: no top-level package to put libraries in; use --lib-dir"
        )
    want = distribution.replace("-", "_").lower()
    top = next((t for t in tops if t.lower() == want), tops[0])
    return f"{top}/lib"
