"""Bundling a Windows wheel: delvewheel finds and places the imported DLLs; the ROCm DLLs loaded
with ``LoadLibrary``, their data trees and the provenance record are added as on Linux."""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import posixpath
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocm_build import __version__
from rocm_build.binary import pe
from rocm_build.bundle.data import select_data
from rocm_build.bundle.job import BundleJob, WheelTask
from rocm_build.bundle.linux import project_lib_dir
from rocm_build.bundle.model import BundleResult, DataFile
from rocm_build.bundle.provenance import fingerprint, header, read_provenance, up_to_date
from rocm_build.bundle.rocmlabel import built_with, checked_version
from rocm_build.common import locks, proc, statefile, tempfiles
from rocm_build.common.errors import BundleError, ConfigError, RocmTreeError
from rocm_build.common.progress import Progress
from rocm_build.common.treepath import TreeGuard
from rocm_build.config.loader import ProjectSpec
from rocm_build.config.schema import output_settings
from rocm_build.wheel import wheelmeta
from rocm_build.wheel.analyze import PROVENANCE, analyze
from rocm_build.wheel.deflate import Deflate
from rocm_build.wheel.wheelfile import WheelName, WheelReader, WheelWriter

__all__ = ["PLATFORM", "Windows", "WindowsSummary", "execute_windows", "plan_windows"]

log = logging.getLogger(__name__)


class Windows:
    """Windows wheels: delvewheel places the imported DLLs; ROCm's own are added as on Linux."""

    name = "windows"
    label = "Windows"
    thin = False
    split_arch = False

    def owns(self, platform_tags: Sequence[str]) -> bool:
        return any(t.startswith("win") for t in platform_tags)

    def lib_dir(self, wheel: Path, projects: Mapping[str, ProjectSpec], flag: str | None) -> str:
        return ""  # delvewheel decides

    def plan(self, job: BundleJob) -> WheelTask:
        return plan_windows(job)

    def execute(self, planned: WheelTask, progress: Progress) -> BundleResult:
        return execute_windows(planned)

    def plan_lines(self, result: BundleResult) -> Iterator[str]:
        plan = result.plan if isinstance(result.plan, WindowsSummary) else WindowsSummary()
        yield f"would bundle {Path(result.input).name} (Windows, delvewheel):"
        if plan.copy:
            yield "  bundled by rocm-build already: copied as it is"
            return
        yield f"  targets: {', '.join(plan.targets) or '(all)'}"
        yield f"  imported, from the tree: {', '.join(plan.from_tree) or 'none'}"
        elsewhere = ", ".join(plan.elsewhere) or "none"
        yield f"  imported, from Windows or the build machine's PATH: {elsewhere}"
        loaded = plan.loaded_by_rocm
        yield f"  loaded by ROCm with LoadLibrary, added by name: {', '.join(loaded) or 'none'}"
        yield f"  (delvewheel takes these and what they import from {', '.join(plan.search)})"


PLATFORM = Windows()


@dataclass(frozen=True)
class WindowsSummary:
    """What the plan of a Windows wheel says, for people and ``--json``: the wheel is copied
    as it is (``copy``), or what delvewheel is asked to add."""

    copy: bool = False
    targets: tuple[str, ...] = ()
    search: tuple[str, ...] = ()  # the tree's folders with DLLs
    from_tree: tuple[str, ...] = ()  # imported DLLs the tree has
    elsewhere: tuple[str, ...] = ()  # imported DLLs from Windows or the build machine's PATH
    loaded_by_rocm: tuple[str, ...] = ()  # DLLs ROCm opens with LoadLibrary, added by name

    def as_json(self) -> dict[str, Any]:
        if self.copy:
            return {"platform": "windows", "copy": True}
        return {
            "platform": "windows",
            "targets": list(self.targets),
            "search": list(self.search),
            "from_tree": list(self.from_tree),
            "elsewhere": list(self.elsewhere),
            "loaded_by_rocm": list(self.loaded_by_rocm),
        }


@dataclass(frozen=True)
class _Windows:
    """A Windows wheel, the tree's DLLs and what delvewheel is asked to add."""

    wheel: Path
    rocm: Path
    dirs: tuple[Path, ...]  # the tree's folders with DLLs
    members: tuple[str, ...]
    in_tree: Mapping[str, Path]  # lower-case DLL name -> file in the tree
    loaded: frozenset[str]  # DLLs ROCm opens with LoadLibrary, added by name
    include: tuple[str, ...]  # delvewheel's --include, if any
    targets: tuple[str, ...]
    imports: frozenset[str] = frozenset()  # lower-case names the wheel's DLLs and PYDs import


def _fingerprint(job: BundleJob) -> str:
    """As on Linux: the settings the schema marks ``output``, and this wheel's facts."""
    return fingerprint(
        {
            "tool": __version__,
            "input": statefile.file_facts(job.wheel),
            "rocm": str(job.rocm.resolve()),
            "platform": "windows",
            "targets": list(job.targets),
            "deflater": job.deflate.implementation,
            "allow_outside": [str(a) for a in job.allow_outside],
            "bundle": output_settings(job.settings),
        }
    )


def plan_windows(job: BundleJob) -> WheelTask:
    """Windows wheels: delvewheel finds and places the imported DLLs, ROCm ones keeping their
    names (they are loaded by name and find their data by it); then, as on Linux, the DLLs ROCm
    loads with ``LoadLibrary`` (``.dll`` patterns of ``bundle.dlopen_libs``) and the data trees
    of the bundled DLLs (``lib/X`` is read from the tree's ``bin/X``, where Windows keeps it)
    go beside them, and the provenance file makes a re-run a no-op. The plan reads the wheel
    and the tree; what delvewheel adds is known when it has run (``execute``)."""
    job = replace(job, wheel=job.wheel.resolve())
    wheel, rocm, output_dir = job.wheel, job.rocm, job.output_dir
    if job.settings.exclude:
        raise ConfigError(
            f"{wheel.name}: --exclude (bundle.exclude) works on Linux wheels only so far; "
            "bundle this Windows wheel without it"
        )
    dirs = [rocm / d for d in ("bin", "lib") if (rocm / d).is_dir()]
    if not dirs:
        raise RocmTreeError(f"{rocm} has no bin/ or lib/ folder with DLLs; pass --rocm DIR")
    with WheelReader(wheel) as reader:
        members = [m.name for m in reader.members]
        top = project_lib_dir(reader.name.distribution, {}, members, None).split("/", 1)[0]
        _check_rocm(reader, wheel, rocm, job.settings.allow_rocm_mismatch)
    arcname = f"{top}/{PROVENANCE}"
    fp = _fingerprint(job)
    for folder in () if job.fresh else job.output_dirs:
        if existing := up_to_date(wheel, folder, arcname, fp):
            return WheelTask(job, PLATFORM.name, "up-to-date", str(existing), fp)
    if arcname in members:  # bundled by rocm-build already: copied as it is
        recorded = (read_provenance(wheel, arcname) or {}).get("targets")
        own = [str(t) for t in recorded] if isinstance(recorded, list) else []
        job = job.placed(job.targets or own)
        output_dir = job.output_dir
        summary = WindowsSummary(copy=True)
        return WheelTask(
            job, PLATFORM.name, "bundle", str(output_dir / wheel.name), fp, summary=summary
        )
    adding = _what_to_add(job, dirs, members)
    job = job.placed(adding.targets)  # the wheelhouse's folder of its targets
    summary = WindowsSummary(
        targets=adding.targets,
        search=tuple(str(d) for d in dirs),
        from_tree=tuple(
            sorted(adding.in_tree[n].name for n in adding.imports & set(adding.in_tree))
        ),
        elsewhere=tuple(sorted(n for n in adding.imports if n not in adding.in_tree)),
        loaded_by_rocm=tuple(sorted(adding.loaded)),
    )
    return WheelTask(job, PLATFORM.name, "bundle", "", fp, detail=adding, summary=summary)


def execute_windows(planned: WheelTask) -> BundleResult:
    """delvewheel's repair and what goes beside its DLLs, as ``planned`` says."""
    start = time.monotonic()
    job, wheel = planned.job, planned.job.wheel
    if planned.action == "up-to-date":
        return BundleResult(
            str(wheel), planned.output, "up-to-date", time.monotonic() - start, platform="windows"
        )
    if _fingerprint(job) != planned.fingerprint:
        raise BundleError(
            f"{wheel.name} or the tree changed after the bundle was planned; run it again"
        )
    with WheelReader(wheel) as reader:  # delvewheel rewrites RECORD: a corrupt input must not
        reader.verify_all()  # pass unnoticed
    if planned.detail is None:
        out = Path(planned.output)
        if out.resolve() != wheel:
            with locks.hold(out, f"the wheel {out}", no_wait=job.no_wait):
                tempfiles.atomic_copy(wheel, out)
        log.info("%s was bundled by rocm-build already: left as it is", wheel.name)
        return BundleResult(
            str(wheel), str(out), "unchanged", time.monotonic() - start, platform="windows"
        )
    members = planned.detail.members
    top = project_lib_dir(WheelName.parse(wheel.name).distribution, {}, members, None)
    arcname = f"{top.split('/', 1)[0]}/{PROVENANCE}"
    out, added, data, skipped = _repair(job, planned.detail, arcname, planned.fingerprint)
    log.info(
        "bundled %s: %d DLLs (%s), %d data files (%d left out for other targets)",
        wheel.name,
        len(added),
        ", ".join(sorted(added)),
        len(data),
        skipped,
    )
    return BundleResult(
        str(wheel), str(out), "bundled", time.monotonic() - start, platform="windows"
    )


def _repair(
    job: BundleJob, adding: _Windows, arcname: str, fp: str
) -> tuple[Path, dict[str, str], list[DataFile], int]:
    """delvewheel's repair, then the data files and the provenance written beside its DLLs:
    the output, the DLLs added, the data files and how many were left out for other targets."""
    wheel, dirs = job.wheel, adding.dirs
    with tempfiles.folder(job.output_dir, f"{wheel.name}.delvewheel") as tmp:
        _delvewheel("repair", wheel, dirs, sorted(adding.in_tree), *adding.include, "-w", tmp)
        produced = sorted(Path(tmp).glob("*.whl"))
        if not produced:
            raise BundleError(f"delvewheel wrote no wheel for {wheel.name}; run it with -v")
        out = job.output_dir / produced[0].name
        guard = TreeGuard.of(job.rocm, job.allow_outside)
        with WheelReader(produced[0]) as repaired:
            added, data, skipped, provenance = _additions(
                adding, repaired, job.settings.data_trees, guard, fp
            )
            with locks.hold(out, f"the wheel {out}", no_wait=job.no_wait):
                _write(repaired, produced[0], out, data, arcname, provenance, job.deflate)
    return out, added, data, skipped


def _check_rocm(reader: WheelReader, wheel: Path, rocm: Path, allow: bool) -> None:
    """A tree of another ROCm than the wheel's stops the bundle, as on Linux; delvewheel's
    output is not relabelled, so ``--allow-rocm-mismatch`` cannot help here."""
    version = wheelmeta.consistent_version(reader.name.version, reader.metadata())
    new = checked_version(version, built_with(version, {}), rocm, allow=allow, wheel=wheel.name)
    if new != version:
        raise RocmTreeError(
            f"{wheel.name}: --allow-rocm-mismatch relabels Linux wheels only; bundle this Windows "
            "wheel from a tree of the ROCm it was built with"
        )


def _what_to_add(job: BundleJob, dirs: Sequence[Path], members: Sequence[str]) -> _Windows:
    """The tree's DLLs, and those a wheel that uses ROCm gets besides what it imports: the DLLs
    ROCm loads with LoadLibrary and the tree DLLs those import (delvewheel takes in what
    --include names, but not what that imports)."""
    with WheelReader(job.wheel) as reader:
        analysis = analyze(reader, pe_files=True, elf_files=False)
    imports = {n.lower() for m in analysis.pes.values() for n in m.imports}
    targets = job.targets or tuple(sorted(analysis.device_targets))  # default: its own
    # ROCm DLLs keep their names; other DLLs get delvewheel's usual hashed names, so they cannot
    # clash with another wheel's copy
    in_tree = {p.name.lower(): p for d in reversed(dirs) for p in d.glob("*") if _is_dll(p)}
    have = {posixpath.basename(m).lower() for m in members}
    loaded = (
        {
            p.name
            for name, p in in_tree.items()
            if name not in have
            and any(fnmatch.fnmatch(name, pat.lower()) for pat in job.settings.dlopen_libs)
        }
        if imports & set(in_tree)
        else set()
    )
    wanted = {n.lower() for n in loaded}
    queue = sorted(wanted)
    while queue:
        info = pe.read_pe(in_tree[queue.pop()])
        for dep in (n.lower() for n in (info[1] if info else [])):
            if dep in in_tree and dep not in have and dep not in wanted:
                wanted.add(dep)
                queue.append(dep)
    names = sorted(in_tree[n].name for n in wanted)
    include = ("--include", os.pathsep.join(names)) if names else ()
    return _Windows(
        job.wheel,
        job.rocm,
        tuple(dirs),
        tuple(members),
        in_tree,
        frozenset(loaded),
        include,
        targets,
        frozenset(imports),
    )


def _additions(
    job: _Windows, repaired: WheelReader, data_trees: Sequence[str], guard: TreeGuard, fp: str
) -> tuple[dict[str, str], list[DataFile], int, dict[str, Any]]:
    """The DLLs delvewheel added (name -> member), the data files for the ROCm ones, how many
    were left out for other targets, and the provenance record."""
    added = {
        posixpath.basename(m.name): m.name
        for m in repaired.members
        if m.name not in job.members and m.name.lower().endswith(".dll")
    }
    from_tree = [n for n in added if n.lower() in job.in_tree]
    data: list[DataFile] = []
    skipped = 0
    libs_dir = posixpath.dirname(next(iter(added.values()), ""))
    if from_tree:  # the data trees of the ROCm DLLs go beside them
        libs_dir = posixpath.dirname(added[from_tree[0]])
        read_from = _windows_data_dirs(job.rocm, data_trees)
        data, skipped = select_data(
            job.rocm, data_trees, libs_dir, list(added), job.targets, read_from, guard
        )
    in_tree = job.in_tree
    libraries: list[dict[str, Any]] = [
        {
            "name": name,
            "origin": "rocm" if name.lower() in in_tree else "system",
            "reason": "dlopen" if name in job.loaded else "needed",
            "source": str(in_tree[name.lower()]) if name.lower() in in_tree else "",
            "needed_by": [],
            "aliases": [],
        }
        for name in sorted(added)
    ]
    provenance = {
        **header(fp, job.rocm),
        "platform": "windows",
        "targets": list(job.targets),
        "lib_dir": libs_dir,
        "libraries": libraries,
        "data_files": len(data),
        "data_skipped": skipped,
        "sources": [statefile.file_facts(in_tree[n.lower()]) for n in added if n.lower() in in_tree]
        + [statefile.file_facts(Path(d.source)) for d in data],
    }
    return added, data, skipped, provenance


def _write(
    repaired: WheelReader,
    produced: Path,
    out: Path,
    data: Sequence[DataFile],
    arcname: str,
    provenance: Mapping[str, Any],
    deflate: Deflate,
) -> None:
    """delvewheel's wheel, its members copied raw, plus the data files and the provenance."""
    record = f"{repaired.dist_info}/RECORD"
    with (
        tempfiles.writing(out, needed=produced.stat().st_size),
        WheelWriter(out, repaired.dist_info, deflate) as writer,
    ):
        for m in repaired.members:
            if m.name != record and not m.is_dir:
                writer.copy_member(repaired, m.name)
        for d in data:
            writer.add_file(d.arcname, Path(d.source), 0o644)
        writer.add_bytes(arcname, (json.dumps(provenance, indent=1) + "\n").encode())
        writer.commit()


def _delvewheel(
    command: str, wheel: Path, dirs: Sequence[Path], keep: Sequence[str], *extra: str | Path
) -> proc.Result:
    """``delvewheel show|repair``; the DLL names in ``keep`` are not mangled.

    ``--analyze-existing``: torch's ROCm imports come from DLLs the wheel already carries
    (``torch/lib/torch_hip.dll``), which delvewheel otherwise does not look into.
    """
    no_mangle = ["--no-mangle", os.pathsep.join(keep)] if keep and command == "repair" else []
    options = ["--analyze-existing", *no_mangle, "--add-path", os.pathsep.join(map(str, dirs))]
    return proc.run(
        [sys.executable, "-m", "delvewheel", command, *options, *extra, wheel],
        capture=True,
        what=f"delvewheel {command}",
    )


def _windows_data_dirs(rocm: Path, trees: Sequence[str]) -> dict[str, str]:
    """Where a Windows tree keeps each ``lib/X`` data tree: beside the DLLs, in ``bin/X``."""
    found = {}
    for tree in trees:
        rest = tree.strip("/").removeprefix("lib/")
        if rest != tree.strip("/") and (rocm / "bin" / rest).exists():
            found[tree] = f"bin/{rest}"
    return found


def _is_dll(path: Path) -> bool:
    return path.suffix.lower() == ".dll" and path.is_file()
