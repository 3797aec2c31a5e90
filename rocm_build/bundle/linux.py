"""Bundling one Linux wheel: :func:`plan_wheel` reads the wheel where it is and the tree and
decides everything (or finds the output up to date), writing nothing; :func:`execute_wheel`
unpacks the members it edits and writes the wheel in one pass.

Size: one platform's whole bundle of one wheel (plan and execute), as each platform module has it.
"""

from __future__ import annotations

import logging
import os
import posixpath
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from rocm_build import __version__
from rocm_build.binary import kpack
from rocm_build.bundle import kpacked
from rocm_build.bundle.apply import apply_plan, find_linkers
from rocm_build.bundle.closure import ClosureInput, ClosureRules, resolve_closure
from rocm_build.bundle.data import aotriton_images_out, data_target_gaps, select_data
from rocm_build.bundle.device import (
    coverage_gaps,
    device_sources,
    gap_error,
    plan_device,
)
from rocm_build.bundle.job import BundleJob, WheelTask
from rocm_build.bundle.kpacked import NO_KPACK, KpackPlan, plan_kpack, wheel_kpack_members
from rocm_build.bundle.libraries import LibraryIndex, system_lib_dirs, tree_lib_dirs
from rocm_build.bundle.lines import linux_plan_lines
from rocm_build.bundle.model import BundleResult, Closure, DataFile
from rocm_build.bundle.policy import policy_whitelist
from rocm_build.bundle.provenance import (
    fingerprint,
    header,
    input_record,
    provenance_in,
    read_provenance,
    up_to_date,
)
from rocm_build.bundle.rocmlabel import (
    built_with,
    checked_version,
    other_rocm,
    own_hip,
    own_hip_alias,
)
from rocm_build.common import faults, locks, statefile, tempfiles
from rocm_build.common.errors import BundleError, RocmTreeError
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.common.treepath import TreeGuard, denied, reading
from rocm_build.config.loader import ProjectSpec
from rocm_build.config.schema import output_settings
from rocm_build.wheel import wheelfile, wheelmeta
from rocm_build.wheel.analyze import PROVENANCE, WheelAnalysis, analyze
from rocm_build.wheel.wheelfile import WheelName, WheelReader

__all__ = [
    "PLATFORM",
    "Linux",
    "check_tree",
    "execute_wheel",
    "plan_wheel",
    "project_lib_dir",
]

log = logging.getLogger(__name__)


class Linux:
    """Linux wheels: the ELF closure from the tree, ``$ORIGIN`` search paths, a manylinux tag."""

    name = "linux"
    label = "Linux"
    thin = True
    split_arch = True

    def owns(self, platform_tags: Sequence[str]) -> bool:
        return any(t.startswith(("linux", "manylinux", "musllinux")) for t in platform_tags)

    def lib_dir(self, wheel: Path, projects: Mapping[str, ProjectSpec], flag: str | None) -> str:
        with WheelReader(wheel) as reader:
            members = [m.name for m in reader.members]
        distribution = WheelName.parse(wheel.name).distribution
        return project_lib_dir(distribution, projects, members, flag)

    def plan(self, job: BundleJob) -> WheelTask:
        return plan_wheel(job)

    def execute(self, planned: WheelTask, progress: Progress) -> BundleResult:
        result = execute_wheel(planned, progress)
        faults.point("bundle.done")
        return result

    def plan_lines(self, result: BundleResult) -> Iterator[str]:
        return linux_plan_lines(result)


PLATFORM = Linux()


def _provenance_arcname(job: BundleJob) -> str:
    return f"{job.lib_dir.split('/', 1)[0]}/{PROVENANCE}"


def _fingerprint(job: BundleJob) -> str:
    """What the output depends on: a different value makes an existing output stale. The
    settings are those the schema marks ``output`` (:func:`.schema.output_settings`); the rest
    are this wheel's facts."""
    facts: dict[str, Any] = {
        "tool": __version__,
        # the input's bytes: the record's "input" (its sha256, see provenance.input_unchanged)
        "input": str(job.wheel),
        "rocm": str(job.rocm.resolve()),
        "targets": list(job.targets),
        "lib_dir": job.lib_dir,
        "deflater": job.deflate.implementation,
        "torch": statefile.file_facts(Path(job.torch.path)) if job.torch else None,
        "allow_outside": [str(a) for a in job.allow_outside],
        "device_targets": list(job.device_targets),
        "bundle": output_settings(job.settings),
    }
    if job.thin is not None:  # fat wheels keep the fingerprint they had
        facts = {**facts, "thin": [job.thin.family, job.thin.version]}
        if job.thin.meta:  # a kpack-split tree's requirement (per-family thin keeps its own)
            facts = {**facts, "thin_meta": job.thin.meta}
    return fingerprint(facts)


def plan_wheel(job: BundleJob) -> WheelTask:
    """What bundling ``job``'s wheel does, or that its output is up to date (see the package
    docstring). Reads the wheel where it is (nothing unpacked) and the tree; writes nothing.
    ``job.allow_outside``: folders outside the tree its symlinks may lead to.
    ``bundle.system_libs`` (patterns): libraries that may come from the build machine
    (``LD_LIBRARY_PATH`` of ``job.env``, ld.so.conf, the defaults) when the tree lacks them;
    ``bundle.rocm_libs``, the ``bundle.dlopen_libs`` and the tree's own libraries never may.
    ``job.device_targets``: see :func:`_device`. ``job.torch`` may be a torch fat wheel this
    run writes first (not there yet): the fingerprint is then left to ``execute``."""
    faults.point("bundle.start")
    job = replace(job, wheel=job.wheel.resolve())
    wheel = job.wheel
    with reading("the ROCm tree"):
        check_tree(job.rocm)
    fp = "" if job.torch_pending else _fingerprint(job)
    existing = next(
        (
            found
            for folder in (job.output_dirs if fp and not job.fresh else ())
            if (found := up_to_date(wheel, folder, _provenance_arcname(job), fp, content=True))
        ),
        None,
    )
    if existing:
        return WheelTask(job, PLATFORM.name, "up-to-date", str(existing), fp)
    with WheelReader(wheel) as reader:
        own_code = not job.targets or bool(job.device_targets)
        analysis = analyze(reader, device_code=own_code, fault="bundle.read")
        read = tuple(statefile.stat_facts(os.fstat(reader.fileno())))
    # default: the targets the wheel's own device code was built for (the job stays as asked:
    # its fingerprint is the output's)
    own = tuple(sorted(analysis.device_targets))
    job = job.placed(job.targets or own)  # the wheelhouse's folder of its targets
    resolved = job if job.targets else replace(job, targets=own)
    plan = _device(resolved, _plan(resolved, analysis, fp), analysis)
    plan = replace(
        plan,
        sources=_source_facts(plan),
        input_facts=read,
        replaces_targets=_replaced_targets(Path(plan.output), plan),
    )
    edited = {c.arcname for c in plan.rpaths} | {d.arcname for d in plan.device if d.pruned}
    extract = tuple(a for a in analysis.elves if a in edited)
    return WheelTask(
        job,
        PLATFORM.name,
        "bundle",
        plan.output,
        fp,
        plan,
        extract,
        members=analysis.members,
        summary=plan,
    )


def _replaced_targets(output: Path, plan: Closure) -> tuple[str, ...] | None:
    """The targets of the fat wheel already at ``output`` when they are not the ones this
    bundle is for (it would replace a wheel made for other GPUs); None otherwise."""
    if not output.is_file():
        return None
    statefile.check(output, "bundled wheel")
    old = read_provenance(output, plan.provenance_arcname) or {}
    targets, named = old.get("targets"), old.get("device_targets")
    if not isinstance(targets, list):
        return None
    # the targets with their features (gfx90a:xnack+ and gfx90a:xnack- keep other code), when
    # both bundles were asked for targets
    if (
        isinstance(named, list)
        and named
        and plan.device_targets
        and sorted(map(str, named)) != sorted(plan.device_targets)
    ):
        return tuple(sorted(map(str, named)))
    if sorted(map(str, targets)) == sorted(plan.targets):
        return None
    return tuple(sorted(map(str, targets)))


def execute_wheel(planned: WheelTask, progress: Progress = NO_PROGRESS) -> BundleResult:
    """Write what ``planned`` says, under the output's lock (``job.no_wait``): the members it
    edits unpacked to a scratch folder beside the output, then the wheel in one pass."""
    start = time.monotonic()
    job, plan = planned.job, planned.closure
    wheel, output_dir = job.wheel, job.output_dir
    if planned.action == "up-to-date" or plan is None:
        return BundleResult(str(wheel), planned.output, "up-to-date", time.monotonic() - start)
    fp = _fingerprint(job)
    if planned.fingerprint and fp != planned.fingerprint:
        raise BundleError(
            f"{wheel.name}, the tree or a torch wheel it takes libraries from changed after "
            "the bundle was planned; run the bundle again"
        )
    plan = replace(plan, fingerprint=fp)
    faults.point("bundle.planned")
    out = Path(plan.output)  # its folder: made and checked by the stage's execute
    with (
        WheelReader(wheel) as reader,
        locks.hold(out, f"the wheel {out}", no_wait=job.no_wait),
    ):
        faults.point("bundle.locked")
        _check_unchanged(job, plan, reader)
        if done := _already_done(job, plan, reader, fp, start):
            return done
        provenance = _provenance(job, plan, reader, fp)
        _log_plan(plan, time.monotonic() - start)
        with (
            tempfiles.writing(output_dir / wheel.name, doing="extracting the libraries of"),
            tempfiles.folder(output_dir, f"{wheel.name}.extract") as tmp,
        ):
            extracted = {}
            for arc in planned.extract:
                extracted[arc] = reader.extract(arc, Path(tmp))
                faults.point("bundle.extracted")
            apply_plan(
                _bound(plan, extracted),
                reader,
                extracted,
                deflate=job.deflate,
                provenance=provenance,
                linkers=find_linkers(job.rocm),
                progress=progress,
                before_commit=lambda: _check_unchanged(job, plan, reader),
            )
        zip64 = tuple(wheelfile.zip64_reasons(out))
    seconds = time.monotonic() - start
    return BundleResult(str(wheel), plan.output, "bundled", seconds, plan, zip64)


def _bound(plan: Closure, extracted: Mapping[str, Path]) -> Closure:
    """The plan with the cuts of the wheel's own device code read from their unpacked copies
    (the plan read the same bytes in the wheel)."""
    device = tuple(
        replace(d, cut=replace(d.cut, path=str(extracted[d.arcname])))
        if d.arcname in extracted
        else d
        for d in plan.device
    )
    return replace(plan, device=device)


def _plan(job: BundleJob, analysis: WheelAnalysis, fp: str) -> Closure:
    """The plan for ``job``: libraries from the tree (then the build machine), data for the
    targets, the output named by the version and the platform tag it satisfies."""
    current = wheelmeta.consistent_version(analysis.name.version, analysis.metadata)
    version = checked_version(
        current,
        built_with(current, analysis.bundle_record()),
        job.rocm,
        allow=job.settings.allow_rocm_mismatch,
        wheel=job.wheel.name,
    )
    guard = TreeGuard.of(job.rocm, job.allow_outside)
    with reading("the ROCm tree's library folders"):
        lib_dirs = tree_lib_dirs(job.rocm)
    like = next(iter(analysis.elves.values()), None)
    env = os.environ if job.env is None else job.env
    system_dirs = system_lib_dirs(like.info.machine if like else "EM_X86_64", env=env)
    index = LibraryIndex(lib_dirs, system_dirs, guard)

    def selector(names: Sequence[str]) -> tuple[list[DataFile], int]:
        return select_data(
            job.rocm, job.settings.data_trees, job.lib_dir, names, job.targets, guard=guard
        )

    so_patterns = [p for p in job.settings.dlopen_libs if ".so" in p]
    stems = [f"{stem}.so*" for stem in sorted(index.stems())]
    rules = ClosureRules(
        lib_dir=job.lib_dir,
        targets=job.targets,
        dlopen_patterns=job.settings.dlopen_libs,
        whitelist=policy_whitelist(job.settings.policy),
        torch=job.torch,
        fingerprint=fp,
        policy=job.settings.policy,
        rocm_only=[*job.settings.rocm_libs, *so_patterns, *stems],
        system_allowed=job.settings.system_libs,
        tree=str(job.rocm),
        thin=job.thin,
        exclude=job.settings.exclude,
    )

    def planned(left_out: Sequence[str], unedited: Sequence[str] = ()) -> Closure:
        wheel = ClosureInput(
            input_path=job.wheel,
            output_path=job.output_dir / job.wheel.name,
            wheel_name=analysis.name,
            metadata=analysis.metadata,
            members=[m for m in analysis.members if m not in left_out],
            elves={a: i for a, i in analysis.infos.items() if a not in [*left_out, *unedited]},
        )
        return resolve_closure(wheel, index, rules, selector)

    provisional = planned(())
    others = tuple(other_rocm(analysis.infos, provisional.libraries, provisional.lib_dir))
    if others and not job.settings.keep_other_rocm:
        # planned again without them: what only they needed is not added either
        provisional = replace(planned(others), left_out=others)
    elif others:
        # kept as they are: never linked against the tree's libraries (its HSA, say)
        provisional = replace(planned((), others), other_rocm=others)
    kept = {a: i for a, i in analysis.infos.items() if a not in provisional.left_out}
    used = tuple(own_hip(kept, provisional.lib_dir))
    alias = own_hip_alias(analysis.members, provisional.libraries, provisional.lib_dir, used)
    provisional = replace(provisional, own_hip=used, own_hip_alias=alias)
    out_name = analysis.name.with_version(version).with_platform(provisional.platform_tag)
    names = [lib.name for lib in provisional.libraries]
    gaps = data_target_gaps(job.rocm, job.settings.data_trees, names, job.targets)
    images, families = aotriton_images_out(analysis.members, job.targets)
    return replace(
        provisional,
        images_out=images,
        images_out_families=families,
        version=version,
        output=str(job.output_dir / str(out_name)),
        data_missing=gaps,
    )


def _device(job: BundleJob, plan: Closure, analysis: WheelAnalysis) -> Closure:
    """The plan with what happens to the device code of the files it writes: the offload
    bundles of every ELF file keep only the entries that serve ``job.device_targets`` (all
    unless ``bundle.prune_device_code``), and each file with device code must still serve every
    target: else ``RequirementNotMet`` (exit 11) before anything is written, unless
    ``bundle.allow_missing_arch`` or a dry run (the plan's ``device_gaps`` say so)."""
    targets, s = job.device_targets, job.settings
    kp = _kpack(job, plan, analysis)
    if not targets:
        return replace(plan, kpack=kp)
    with reading("the device code of the libraries"):
        files = plan_device(
            device_sources(analysis.elves, plan.libraries), targets, prune_code=s.prune_device_code
        )
    gaps = (*coverage_gaps(files, targets), *kp.gaps)
    if gaps and not s.allow_missing_arch and not job.dry_run:
        raise gap_error(gaps)
    return replace(plan, device_targets=targets, device=files, device_gaps=gaps, kpack=kp)


def _kpack(job: BundleJob, plan: Closure, analysis: WheelAnalysis) -> KpackPlan:
    """The kpack archives the written kpack-split libraries need (:mod:`.kpacked`): those of
    the tree's libraries the bundle adds, for the requested targets (every archive without
    ``--arch``). The wheel's own kpack-split libraries must find theirs in the wheel."""
    own = {a: m.kpack_ref for a, m in analysis.elves.items() if m.kpack_ref is not None}
    found = wheel_kpack_members(own, analysis.members)
    for arcname, hits in found.items():
        if not hits:
            raise BundleError(
                f"{arcname} in {job.wheel.name} is kpack-split and the wheel carries none of "
                "its kpack archives; bundle the fat wheel its build made, or install the host "
                "wheel with its device wheels"
            )
    own_gaps = tuple(
        f"{posixpath.basename(arc)} has no kpack archive in the wheel serving {t}"
        for arc, hits in found.items()
        for t in job.device_targets
        if not kpacked.wheel_serves(analysis, arc, hits, t)
    )
    libs = [(lib.arcname, Path(lib.source)) for lib in plan.libraries if lib.info.has_kpack_ref]
    if not libs:
        return replace(NO_KPACK, gaps=own_gaps)
    guard = TreeGuard.of(job.rocm, job.allow_outside)
    with reading("the kpack archives of the tree"):
        kp = plan_kpack(libs, job.device_targets, guard)
    if kp.libraries and kpack.tree_loader(job.rocm) is None:
        log.warning(
            "%s: the tree's HIP runtime cannot load kpack archives (no lib/librocm_kpack.so): "
            "the kpack-split libraries' kernels would not be found on a GPU; bundle from "
            "TheRock's tree",
            job.wheel.name,
        )
    return replace(kp, gaps=(*own_gaps, *kp.gaps))


def _already_done(
    job: BundleJob, plan: Closure, reader: WheelReader, fp: str, start: float
) -> BundleResult | None:
    """Under the output's lock: the output is up to date (another run may have written it
    while this one waited), or the wheel needs nothing and is handed on as it is."""
    wheel, out = job.wheel, Path(plan.output)
    if out.exists() and (
        existing := up_to_date(wheel, job.output_dir, _provenance_arcname(job), fp, content=True)
    ):
        return BundleResult(str(wheel), str(existing), "up-to-date", time.monotonic() - start)
    if plan.changes_content or out.name != wheel.name:
        return None
    reader.verify_all()  # handed on as it is: its RECORD must be right
    if out.resolve() == wheel:
        log.info("%s is already self-contained: nothing to do", wheel.name)
        return BundleResult(str(wheel), str(out), "unchanged", time.monotonic() - start)
    tempfiles.atomic_copy(wheel, out)
    log.info("%s is already self-contained: copied unchanged", wheel.name)
    return BundleResult(str(wheel), str(out), "unchanged", time.monotonic() - start, plan)


def _provenance(job: BundleJob, plan: Closure, reader: WheelReader, fp: str) -> dict[str, Any]:
    """What the output records about its making: settings, libraries (with those an earlier
    bundle of the input added), and the source files whose change makes it stale."""
    old = provenance_in(reader, plan.provenance_arcname) or {}
    summary = plan.as_json()
    names = {lib.name for lib in plan.libraries}
    earlier = [x for x in old.get("libraries", []) if x["name"] not in names]
    return {
        **header(fp, job.rocm),
        "targets": list(plan.targets),
        "lib_dir": plan.lib_dir,
        "libraries": sorted(summary["libraries"] + earlier, key=lambda x: str(x["name"])),
        "from_system": summary["from_system"],
        **({"excluded": summary["excluded"]} if plan.excluded else {}),
        "allowed_outside": [str(a) for a in job.allow_outside],
        "data_files": len(plan.data) + int(old.get("data_files", 0)),
        "data_skipped": plan.data_skipped,
        "from_torch": [n for n, _ in plan.from_torch],
        "device_targets": list(plan.device_targets),
        "device_code": {d.arcname: d.summary().as_json() for d in plan.device},
        **({"device_gaps": list(plan.device_gaps)} if plan.device_gaps else {}),
        **({"kpack": summary["kpack"]} if plan.kpack.libraries else {}),
        "sources": [list(f) for f in plan.sources],
        "input": input_record(job.wheel, reader.fileno(), plan.input_facts),
        **({"mode": "thin"} if job.thin is not None else {}),
        **({"from_packages": dict(plan.from_packages)} if plan.from_packages else {}),
    }


def _source_facts(plan: Closure) -> tuple[tuple[Any, ...], ...]:
    """The tree files ``plan`` writes into the wheel, as they are now (after the plan read
    them): the output is made from these very files or not at all, and is stale once one
    changes."""
    paths = [lib.source for lib in plan.libraries]
    paths += [d.source for d in plan.data]
    paths += [a.source for a in plan.kpack.archives]
    with reading("the ROCm tree's files"):
        return tuple(tuple(statefile.file_facts(Path(p))) for p in paths)


def _check_unchanged(job: BundleJob, plan: Closure, reader: WheelReader) -> None:
    """The input wheel (the file ``reader`` holds open) and the tree files are as the plan
    read them: a change between the plan and the written wheel would give a wheel made from
    another tree or input than the plan and the record say."""
    now = tuple(statefile.stat_facts(os.fstat(reader.fileno())))
    if (plan.input_facts and now != plan.input_facts) or not statefile.facts_unchanged(
        [list(f) for f in plan.sources]
    ):
        raise BundleError(
            f"{job.wheel.name} or a file of the tree it takes changed after the bundle was "
            "planned; run the bundle again"
        )


def _log_plan(plan: Closure, seconds: float) -> None:
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
