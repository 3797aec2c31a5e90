"""inspect: what a wheel carries, as data (for --json) and as text lines (for people).

Reads the wheel as a stream: ELF members are extracted one at a time to a scratch folder,
read (headers and ``.hip_fatbin`` through mmap) and deleted again.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import bundle, elf, pe
from .context import RunContext
from .errors import RequirementNotMet
from .sizes import human_size
from .wheelfile import WheelReader

__all__ = ["PYPI_LIMIT", "InspectResult", "human_size", "inspect_wheel", "render"]

PYPI_LIMIT = 100 * 1000 * 1000  # PyPI's default per-file upload limit; raised on request


@dataclass(frozen=True)
class InspectResult:
    data: dict[str, Any]
    missing: tuple[str, ...]

    def check(self) -> None:
        if self.missing:
            raise RequirementNotMet(
                f"device code for {', '.join(self.missing)} is missing from libraries in "
                f"{self.data['wheel']} (see the coverage table); rebuild with those targets in "
                "--arch (PYTORCH_ROCM_ARCH) or bundle a ROCm tree built for them"
            )


def _component(name: str, lib_dir: str, libs: set[str]) -> str:
    if name in libs:
        return "library: " + posixpath.basename(name)
    parts = name.split("/")
    if ".dist-info" in parts[0]:
        return "metadata"
    if lib_dir and name.startswith(lib_dir + "/"):
        rest = name[len(lib_dir) + 1 :].split("/")
        if len(rest) > 1:
            return "data: " + "/".join(rest[:2])
    top = posixpath.dirname(lib_dir) if lib_dir else parts[0]
    if top and name.startswith(top + "/share/"):
        return "data: " + "/".join(name[len(top) + 1 :].split("/")[:3])
    if name.endswith((".py", ".pyi", ".pyc")):
        return "python"
    return "other"


def inspect_wheel(path: Path, ctx: RunContext, *, require_arch: str | None = None) -> InspectResult:
    requested = ctx.parse_targets(require_arch or "")
    elves: dict[str, elf.ElfInfo] = {}
    bundles: dict[str, tuple[elf.OffloadBundle, ...]] = {}
    with (
        WheelReader(path) as reader,
        tempfile.TemporaryDirectory(prefix="rocm-build-inspect-") as t,
    ):
        members = [m for m in reader.members if not m.is_dir]
        prov: dict[str, Any] = {}
        for m in members:
            if m.name.endswith(bundle.PROVENANCE):
                prov = json.loads(reader.read_bytes(m.name))
        for m in members:
            if m.file_size < 64 or not bundle._may_be_elf(m.name):
                continue
            if reader.head(m.name, 4) != elf.ELF_MAGIC:
                continue
            dest = reader.extract(m.name, Path(t), "x")
            try:
                info = elf.read_elf(dest)
                if info.is_host:
                    elves[m.name] = info
                    if info.has_fatbin:
                        bundles[m.name] = elf.offload_bundles(dest)
            except elf.NotElfError:
                pass
            finally:
                dest.unlink()
        pes: dict[str, tuple[str, list[str]]] = {}  # Windows DLL/PYD -> (machine, imports)
        for m in members:
            if not m.name.lower().endswith((".dll", ".pyd")) or reader.head(m.name, 2) != b"MZ":
                continue
            dest = reader.extract(m.name, Path(t), "x")
            try:
                if pe_info := pe.read_pe(dest):
                    machine_type, imports, fatbin = pe_info
                    pes[m.name] = (machine_type, imports)
                    if fatbin:
                        bundles[m.name] = elf.offload_bundles_at(dest, *fatbin)
            finally:
                dest.unlink()
        name = reader.name
        requires = _requires_dist(reader.metadata())
    # by file name, as the loader looks NEEDED names up (a SONAME alone provides nothing)
    provided = {posixpath.basename(a) for a in elves}
    whitelist = bundle.policy_whitelist("auto")
    lib_dir = str(prov.get("lib_dir", ""))
    from_torch = set(prov.get("from_torch", []))
    rows: list[dict[str, Any]] = []
    external: set[str] = set()
    folders = _search_folders(elves)
    where: dict[str, set[str]] = defaultdict(set)  # file name -> folders holding it
    for arc in elves:
        where[posixpath.basename(arc)].add(posixpath.dirname(arc))
    for arc, info in sorted(elves.items()):
        here = posixpath.dirname(arc)
        escaping = [e for e in info.rpath + info.runpath if not bundle._inside(here, e)]
        # in the wheel, but in no folder the loader searches for this file
        off_path = [n for n in info.needed if n in where and not where[n] & folders[arc]]
        unresolved = [
            n
            for n in info.needed
            if n not in provided
            and n not in whitelist
            and not bundle._is_loader(n)
            and n not in from_torch
        ]
        expected = _from_packages(arc, info, unresolved, requires)
        unresolved = [n for n in unresolved if n not in expected]
        external |= {
            n for n in info.needed if n not in provided and n not in from_torch | set(expected)
        }
        rows.append(
            {
                "path": arc,
                "needed": list(info.needed),
                "rpath": list(info.rpath),
                "runpath": list(info.runpath),
                "escaping": escaping,
                "unresolved": unresolved,
                "off_search_path": off_path,
                "from_packages": expected,
                **_device_code(bundles.get(arc, ())),
            }
        )
    in_wheel = {posixpath.basename(a).lower() for a in pes}
    pe_rows = [
        {
            "path": arc,
            "imports": imports,
            "unresolved": [
                n
                for n in imports
                if n.lower() not in in_wheel and not pe.windows_provides(n, machine_type)
            ],
            **_device_code(bundles.get(arc, ())),
        }
        for arc, (machine_type, imports) in sorted(pes.items())
    ]
    code_targets = sorted({t for r in [*rows, *pe_rows] for t in r["targets"]})
    code_bytes: dict[str, int] = defaultdict(int)  # code objects per target, uncompressed
    for found in bundles.values():
        for b in found:
            for entry in b.entries:
                if entry.target:
                    code_bytes[entry.target] += entry.size
    data_targets: dict[str, set[str]] = defaultdict(set)
    data_bytes: dict[str, int] = defaultdict(int)
    sizes: dict[str, int] = defaultdict(int)
    for m in members:
        comp = _component(m.name, lib_dir, set(elves) | set(pes))
        sizes[comp] += m.file_size
        if comp.startswith("data: "):
            for tok in bundle.gfx_tokens(m.name):
                data_targets[tok].add(comp[len("data: ") :])
                data_bytes[tok] += m.file_size
    wanted = list(requested) or list(prov.get("targets", []))
    with_code = [r for r in [*rows, *pe_rows] if r["targets"]]
    coverage = [
        {
            "target": t,
            "code": [r["path"] for r in with_code if t in r["targets"]],
            # a library with device code but none for t fails on t at run time
            "missing_in": [r["path"] for r in with_code if t not in r["targets"]],
            "data": sorted(data_targets.get(t, ())),
            "code_bytes": code_bytes.get(t, 0),
            "data_bytes": data_bytes.get(t, 0),
        }
        for t in sorted(set(wanted) | set(code_targets))
    ]
    machine = next(iter(elves.values())).machine if elves else "EM_X86_64"
    tag = bundle.platform_tag(elves.values(), external, machine) if elves else name.platform_tag
    size = path.stat().st_size
    data = {
        "wheel": path.name,
        "size": size,
        "over_pypi_limit": size > PYPI_LIMIT,
        "file_platform_tag": name.platform_tag,
        "platform_tag": tag,
        "elf_files": rows,
        "pe_files": pe_rows,
        "bundled": prov.get("libraries", []),
        "bundle": {k: v for k, v in prov.items() if k not in ("libraries", "sources")},
        "code_targets": code_targets,
        "requested_targets": wanted,
        "coverage": coverage,
        "sizes": dict(sorted(sizes.items(), key=lambda kv: -kv[1])),
    }
    gaps = {row["target"] for row in coverage if row["missing_in"] or not row["code"]}
    missing = tuple(t for t in requested if t in gaps)
    return InspectResult(data, missing)


def _requires_dist(metadata: str) -> dict[str, str]:
    """The wheel's requirements by the site-packages folder their distribution installs (ROCm's
    platform packages: ``rocm-sdk-core`` installs ``_rocm_sdk_core``)."""
    from packaging.requirements import InvalidRequirement, Requirement

    out: dict[str, str] = {}
    for line in metadata.splitlines():
        if line.startswith("Requires-Dist:"):
            try:
                req = Requirement(line.partition(":")[2].strip())
            except InvalidRequirement:
                continue
            folder = "_" + re.sub(r"[-_.]+", "_", req.name).lower()
            out[folder] = f"{req.name}{req.specifier}"
    return out


def _from_packages(
    arc: str, info: elf.ElfInfo, names: list[str], requires: dict[str, str]
) -> dict[str, list[dict[str, str]]]:
    """Per NEEDED name the wheel lacks, the ROCm Python package folders (``_rocm_sdk_*``) its
    search path points into, each with the requirement that installs it ("" if none does).
    A name of ROCm's core runtime is expected from the core package's folders only."""
    from .rocmwheels import CORE_LIBS

    here = posixpath.dirname(arc)
    folders: list[str] = []
    for entry in info.search_path:
        for prefix in ("${ORIGIN}", "$ORIGIN"):
            if entry == prefix or entry.startswith(prefix + "/"):
                rest = entry[len(prefix) :].lstrip("/")
                target = posixpath.normpath(posixpath.join(here or ".", rest))
                if target.startswith("_rocm_sdk_") and target not in folders:
                    folders.append(target)
                break
    out: dict[str, list[dict[str, str]]] = {}
    for name in names:
        core = any(fnmatch.fnmatchcase(name, p) for p in CORE_LIBS)
        fits = [f for f in folders if f.startswith("_rocm_sdk_core") == core] or folders
        if not fits:
            continue
        out[name] = []
        for folder in fits:
            top = folder.split("/", 1)[0]
            match = [f for f in requires if top.lower().startswith(f)]
            req = requires[max(match, key=len)] if match else ""
            out[name].append({"folder": folder, "requirement": req})
    return out


def _origin_folders(arc: str, entries: tuple[str, ...]) -> set[str]:
    """The wheel folders that ``$ORIGIN``-relative ``entries`` of member ``arc`` name."""
    here = posixpath.dirname(arc)
    out = set()
    for entry in entries:
        for prefix in ("${ORIGIN}", "$ORIGIN"):
            if entry == prefix or entry.startswith(prefix + "/"):
                rest = entry[len(prefix) :].lstrip("/")
                target = posixpath.normpath(posixpath.join(here or ".", rest))
                if not target.startswith(".."):
                    out.add("" if target == "." else target)
    return out


def _search_folders(elves: dict[str, elf.ElfInfo]) -> dict[str, set[str]]:
    """Per ELF member, the wheel folders the loader searches for its NEEDED names: its
    DT_RUNPATH; or, without one, its DT_RPATH and the DT_RPATH of the members that load it,
    and of theirs, as glibc does (any member that NEEDs it counts as a loader)."""
    loaders: dict[str, list[str]] = defaultdict(list)  # file name -> members that NEED it
    for arc, info in elves.items():
        for name in info.needed:
            loaders[name].append(arc)
    out: dict[str, set[str]] = {}
    for arc, info in elves.items():
        if info.runpath:
            out[arc] = _origin_folders(arc, info.runpath)
            continue
        found, seen, todo = set(), {arc}, [arc]
        while todo:
            cur = todo.pop()
            if not elves[cur].runpath:  # an object's DT_RUNPATH makes its DT_RPATH ignored
                found |= _origin_folders(cur, elves[cur].rpath)
            for up in loaders.get(posixpath.basename(cur), []):
                if up not in seen:
                    seen.add(up)
                    todo.append(up)
        out[arc] = found
    return out


def _device_code(found: tuple[elf.OffloadBundle, ...]) -> dict[str, Any]:
    return {
        "offload_bundles": len(found),
        "compressed_bundles": sum(1 for b in found if b.compressed),
        "targets": sorted(set().union(*(b.targets for b in found))) if found else [],
    }


def _device_code_line(row: dict[str, Any]) -> Iterator[str]:
    if row["offload_bundles"]:
        yield (
            f"    device code: {', '.join(row['targets'])}  ({row['offload_bundles']} bundles,"
            f" {row['compressed_bundles']} compressed)"
        )


def render(data: dict[str, Any]) -> Iterator[str]:
    yield f"{data['wheel']}  ({human_size(data['size'])})"
    tag_note = (
        ""
        if data["platform_tag"].split(".")[0] in data["file_platform_tag"]
        else (f"  (file name says {data['file_platform_tag']})")
    )
    yield f"platform tag satisfied: {data['platform_tag']}{tag_note}"
    if data["over_pypi_limit"]:
        yield (
            f"note: larger than PyPI's default {human_size(PYPI_LIMIT)} per-file limit: ask PyPI "
            "for a larger limit, host it on your own index, or build for fewer targets"
        )
    yield ""
    if data["elf_files"] or not data["pe_files"]:
        yield (
            "ELF files:"
            if data["elf_files"]
            else "ELF files: none (no compiled code: nothing to bundle)"
        )
    for row in data["elf_files"]:
        path = ":".join(row["rpath"]) or "-"
        run = f"  RUNPATH={':'.join(row['runpath'])}" if row["runpath"] else ""
        yield f"  {row['path']}  RPATH={path}{run}"
        yield f"    NEEDED: {', '.join(row['needed']) or '-'}"
        if row["escaping"]:
            yield f"    ESCAPES THE WHEEL: {', '.join(row['escaping'])}"
        if row["unresolved"]:
            yield f"    NOT IN THE WHEEL: {', '.join(row['unresolved'])}"
        for lib, where in row.get("from_packages", {}).items():
            places = ", ".join(
                f"{w['folder']} ({w['requirement'] or 'NO Requires-Dist installs it'})"
                for w in where
            )
            yield f"    {lib}: from {places}"
        if row.get("off_search_path"):
            yield (
                f"    IN THE WHEEL BUT NOT ON ITS SEARCH PATH: {', '.join(row['off_search_path'])}"
            )
        yield from _device_code_line(row)
    if data["pe_files"]:
        yield "DLL and PYD files:"
        for row in data["pe_files"]:
            yield f"  {row['path']}"
            yield f"    IMPORTS: {', '.join(row['imports']) or '-'}"
            if row["unresolved"]:
                yield f"    NOT IN THE WHEEL: {', '.join(row['unresolved'])}"
            yield from _device_code_line(row)
    if data["bundled"]:
        yield ""
        yield "bundled libraries:"
        for lib in data["bundled"]:
            why = (
                "dlopen"
                if lib["reason"] == "dlopen"
                else "needed by " + ", ".join(posixpath.basename(n) for n in lib["needed_by"])
            )
            yield f"  {lib['name']}  from {lib['origin']}: {lib['source']}  ({why})"
            if lib.get("aliases"):
                yield f"    also as {', '.join(lib['aliases'])} (the name it is opened by)"
    if data["coverage"]:
        yield ""
        yield "gfx coverage (requested vs present; bytes per target, uncompressed):"
        req = set(data["requested_targets"])
        for row in data["coverage"]:
            mark = "requested" if row["target"] in req else "extra"
            code = f"code in {len(row['code'])} files" if row["code"] else "NO CODE"
            if row["code"] and row["missing_in"]:
                code += (
                    " (MISSING in "
                    + ", ".join(posixpath.basename(p) for p in row["missing_in"])
                    + ")"
                )
            if row["code"]:
                code += f", {human_size(row['code_bytes'])}"
            data_note = (
                f", data: {', '.join(row['data'])} {human_size(row['data_bytes'])}"
                if row["data"]
                else ""
            )
            yield f"  {row['target']:<9} {mark:<9} {code}{data_note}"
    yield ""
    yield "size by component (uncompressed):"
    for comp, n in list(data["sizes"].items())[:20]:
        yield f"  {human_size(n):>12}  {comp}"
