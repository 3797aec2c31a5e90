"""inspect: what a wheel carries, as data (for --json) and as text lines (for people).

The wheel is read once by :func:`rocm_build.wheel.analyze.analyze` (the pass the bundle and
the build's wheel check use too): ELF and PE members are extracted one at a time to a scratch
folder, read (headers and device code through mmap) and deleted again.

Size: `inspect`: every fact it reports about a wheel, read in one pass.
"""

from __future__ import annotations

import posixpath
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.binary import elf, pe
from rocm_build.bundle import kpacked, rocmlabel
from rocm_build.bundle import split as splitarch
from rocm_build.bundle.attribution import Contents, attribute, requires_by_folder
from rocm_build.bundle.closure import inside
from rocm_build.bundle.data import gfx_tokens
from rocm_build.bundle.policy import is_loader, is_path, platform_tag, policy_whitelist
from rocm_build.common import arch
from rocm_build.common.errors import RequirementNotMet, UnsafeInput
from rocm_build.common.sizes import human_size
from rocm_build.run.context import RunContext
from rocm_build.wheel import torchinfo
from rocm_build.wheel.analyze import WheelAnalysis, analyze
from rocm_build.wheel.membernames import shown
from rocm_build.wheel.wheelread import WheelReader

__all__ = [
    "PYPI_LIMIT",
    "InspectResult",
    "human_size",
    "inspect_wheel",
    "installed_together",
    "render",
]

PYPI_LIMIT = 100 * 1000 * 1000  # PyPI's default per-file upload limit; raised on request


@dataclass(frozen=True)
class InspectResult:
    data: dict[str, Any]
    missing: tuple[str, ...]

    def check(self) -> None:
        """Exit codes after the report: a member that does not match RECORD (15), a required
        target missing (11)."""
        if problems := self.data.get("record_problems"):
            more = f" (and {len(problems) - 1} more, listed above)" if len(problems) > 1 else ""
            raise UnsafeInput(problems[0] + more)
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


def installed_together(wheels: Iterable[Path]) -> Contents:
    """What the wheels would install together: their members, by folder."""
    known = Contents()
    for wheel in wheels:
        with WheelReader(wheel) as reader:
            known = known | Contents.of_members(m.name for m in reader.members)
    return known


def inspect_wheel(
    path: Path,
    ctx: RunContext,
    *,
    require_arch: str | None = None,
    together: Contents | None = None,
) -> InspectResult:
    """What ``path`` carries; ``together``: what the wheels inspected with it install."""
    known, families = ctx.settings.known_targets, ctx.settings.target_families
    requested = arch.Targets.parse(require_arch or "", known=known, families=families).bases
    with WheelReader(path) as reader:
        analysis = analyze(reader, pe_files=True)
        # what the pass did not read (all but ELF and PE files) is checked too
        record_problems = reader.record_problems()
        features = torchinfo.build_features(reader, [m.name for m in reader.members])
    prov = analysis.bundle_record()
    held = prov.get("from_packages")
    installed = Contents.of_members(analysis.members) | (together or Contents())
    if isinstance(held, dict):
        installed = installed | Contents.of_record({str(k): str(v) for k, v in held.items()})
    rows, external = _elf_rows(analysis, prov, installed)
    pe_rows = _pe_rows(analysis)
    code_targets = sorted({t for r in [*rows, *pe_rows] for t in r["targets"]})
    wanted = list(requested) or list(prov.get("targets", []))
    lib_dir = str(prov.get("lib_dir", ""))
    # a generic processor (gfx9-4-generic) is no row: its code counts for its processors
    targets = sorted(set(wanted) | {c for c in code_targets if c not in arch.GENERIC})
    coverage = _coverage(analysis, lib_dir, [*rows, *pe_rows], targets)
    elves = analysis.infos
    machine = next(iter(elves.values())).machine if elves else "EM_X86_64"
    name = analysis.name
    tag = platform_tag(elves.values(), external, machine) if elves else name.platform_tag
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
        "excluded": sorted(
            {str(x.get("name")) for x in prov.get("excluded", []) if isinstance(x, dict)}
        ),
        "bundle": {k: v for k, v in prov.items() if k not in ("libraries", "sources")},
        "code_targets": code_targets,
        "requested_targets": wanted,
        "coverage": coverage,
        "sizes": dict(sorted(_sizes(analysis, lib_dir).items(), key=lambda kv: -kv[1])),
        "device_wheels": splitarch.device_requirements(analysis.metadata),
        "record_problems": record_problems,
        "build_features": features,
    }
    warnings: list[str] = []
    if any(r.get("kpack") for r in rows) and not any(
        posixpath.basename(m).startswith("librocm_kpack.so") for m in analysis.members
    ):
        warnings.append(
            "kpack-split libraries and no kpack loader (librocm_kpack.so) in the wheel: the "
            "HIP runtime they load must find their archives itself (TheRock's does)"
        )
    warnings += [
        f"the program {r['path']} cannot run once installed: {'; '.join(r['program_problems'])}"
        for r in rows
        if r.get("program") and not r["program_runs"]
    ]
    if ordering := rocmlabel.ordering_warning(str(name.version)):
        warnings.append(ordering)
    if warnings:
        data["warnings"] = warnings
    gaps = {row["target"] for row in coverage if row["missing_in"] or not row["code"]}
    missing = tuple(t for t in requested if t in gaps)
    return InspectResult(data, missing)


def _elf_rows(
    analysis: WheelAnalysis, prov: Mapping[str, Any], known: Contents
) -> tuple[list[dict[str, Any]], set[str]]:
    """One row per host ELF file (search path, what it needs and where that is), and the
    libraries the wheel takes from outside it (``known``: what is known to be installed)."""
    elves = analysis.infos
    requires = requires_by_folder(analysis.metadata)
    # by file name, as the loader looks NEEDED names up (a SONAME alone provides nothing)
    provided = {posixpath.basename(a) for a in elves}
    whitelist = policy_whitelist("auto")
    from_torch = set(prov.get("from_torch", []))
    excluded = {str(x.get("name")) for x in prov.get("excluded", []) if isinstance(x, dict)}
    rows: list[dict[str, Any]] = []
    external: set[str] = set()
    folders = _search_folders(elves)
    where: dict[str, set[str]] = defaultdict(set)  # file name -> folders holding it
    for arc in elves:
        where[posixpath.basename(arc)].add(posixpath.dirname(arc))
    for arc, member in analysis.elves.items():
        info = member.info
        here = posixpath.dirname(arc)
        escaping = [e for e in info.rpath + info.runpath if not inside(here, e)]
        # in the wheel, but in no folder the loader searches for this file
        off_path = [n for n in info.needed if n in where and not where[n] & folders[arc]]
        paths = [n for n in info.needed if is_path(n)]  # bundle refuses them (exit 15)
        unresolved = [
            n
            for n in info.needed
            if n not in provided and n not in whitelist and not is_loader(n) and n not in from_torch
            if n not in paths
        ]
        expected = attribute(arc, info, unresolved, requires, known)
        left = [n for n in unresolved if n in excluded and n not in expected]
        unresolved = [n for n in unresolved if n not in expected and n not in left]
        # as auditwheel: an excluded library does not count against the platform tag
        external |= {
            n
            for n in info.needed
            if n not in provided and n not in from_torch | set(expected) | excluded
        }
        rows.append(
            {
                "path": arc,
                "needed": list(info.needed),
                "rpath": list(info.rpath),
                "runpath": list(info.runpath),
                "escaping": escaping,
                "unresolved": unresolved,
                "excluded": left,
                "needed_paths": paths,
                "off_search_path": off_path,
                "from_packages": expected,
                **_device_code(member.bundles),
                **_kpack_code(analysis, arc),
                **_program(info, member.mode, unresolved + off_path),
            }
        )
    rows.sort(key=lambda r: str(r["path"]))
    return rows, external


def _program(info: elf.ElfInfo, mode: int, lost: list[str]) -> dict[str, Any]:
    """A program's row says whether it can run once installed: executable (its mode in the
    wheel; none recorded counts as executable) and finding every library it needs."""
    if not info.is_executable:
        return {}
    runs = (mode & 0o111 or not mode) and not lost
    why = ([] if mode & 0o111 or not mode else [f"mode {mode & 0o777:04o}, not executable"]) + (
        [f"cannot find {', '.join(lost)}"] if lost else []
    )
    return {"program": True, "program_runs": bool(runs), "program_problems": why}


def _pe_rows(analysis: WheelAnalysis) -> list[dict[str, Any]]:
    in_wheel = {posixpath.basename(a).lower() for a in analysis.pes}
    return [
        {
            "path": arc,
            "imports": list(m.imports),
            "unresolved": [
                n
                for n in m.imports
                if n.lower() not in in_wheel and not pe.windows_provides(n, m.machine)
            ],
            **_device_code(m.bundles),
        }
        for arc, m in sorted(analysis.pes.items())
    ]


def _coverage(
    analysis: WheelAnalysis, lib_dir: str, rows: list[dict[str, Any]], targets: list[str]
) -> list[dict[str, Any]]:
    """Per target: the files with device code for it and those without, its data trees, and
    the bytes of each (code objects uncompressed)."""
    code_bytes: dict[str, int] = defaultdict(int)
    counted: set[str] = set()
    for m in analysis.code_members:
        for b in m.bundles:
            for entry in b.entries:
                if entry.target:
                    code_bytes[entry.target] += entry.size
    data_targets: dict[str, set[str]] = defaultdict(set)
    data_bytes: dict[str, int] = defaultdict(int)
    libs = set(analysis.elves) | set(analysis.pes)
    for name, size in analysis.sizes.items():
        comp = _component(name, lib_dir, libs)
        if comp.startswith("data: "):
            for tok in gfx_tokens(name):
                data_targets[tok].add(comp[len("data: ") :])
                data_bytes[tok] += size
    for r in rows:  # a kpack archive's bytes count for the targets it serves
        for h in r.get("kpack", {}).get("archives", []):
            for t in gfx_tokens(posixpath.basename(h)):
                code_bytes[t] += analysis.sizes.get(h, 0) if h not in counted else 0
            counted.add(h)
    with_code = [r for r in rows if r["targets"] or r.get("kpack")]
    return [
        {
            "target": t,
            "code": [r["path"] for r in with_code if arch.covered(t, r["targets"])],
            # a library with device code but none for t fails on t at run time
            "missing_in": [r["path"] for r in with_code if not arch.covered(t, r["targets"])],
            "data": sorted(set().union(*(v for k, v in data_targets.items() if arch.serves(k, t)))),
            "code_bytes": sum(v for k, v in code_bytes.items() if arch.serves(k, t)),
            "data_bytes": sum(v for k, v in data_bytes.items() if arch.serves(k, t)),
        }  # a generic processor's code counts for each processor it serves
        for t in targets
    ]


def _sizes(analysis: WheelAnalysis, lib_dir: str) -> dict[str, int]:
    """Uncompressed bytes per component (library, data tree, python, metadata, other)."""
    libs = set(analysis.elves) | set(analysis.pes)
    sizes: dict[str, int] = defaultdict(int)
    for name, size in analysis.sizes.items():
        sizes[_component(name, lib_dir, libs)] += size
    return dict(sizes)


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


def _kpack_code(analysis: WheelAnalysis, arc: str) -> dict[str, Any]:
    """A kpack-split library's device code: the archives its marker finds in the wheel and the
    targets for which they hold all its code objects (none: it has device code, for no
    target)."""
    ref = analysis.elves[arc].kpack_ref
    if ref is None:
        return {}
    hits = kpacked.wheel_kpack_members({arc: ref}, analysis.members)[arc]
    ids = kpacked.wheel_targets(analysis, arc, hits)
    return {
        "kpack": {"archives": list(hits), "target_ids": ids, "marker": list(ref.search_paths)},
        "targets": sorted({arch.base_name(t) for t in ids}),
    }


def _device_code_line(row: dict[str, Any]) -> Iterator[str]:
    if kp := row.get("kpack"):
        found = ", ".join(kp["target_ids"]) or "none: no archive in the wheel"
        yield f"    device code in kpack archives: {found} ({len(kp['archives'])} archives)"
    if row["offload_bundles"]:
        yield (
            f"    device code: {', '.join(row['targets'])}  ({row['offload_bundles']} bundles,"
            f" {row['compressed_bundles']} compressed)"
        )


def render(data: dict[str, Any]) -> Iterator[str]:
    """The report as lines of text. What the wheel says (member names, sonames, search paths,
    metadata) is shown with its control characters escaped: an escape sequence in a library's
    RPATH must not reach the terminal."""
    for line in _render(data):
        yield shown(line)


def _render(data: dict[str, Any]) -> Iterator[str]:
    yield f"{data['wheel']}  ({human_size(data['size'])})"
    tag_note = (
        ""
        if data["platform_tag"].split(".")[0] in data["file_platform_tag"]
        else (f"  (file name says {data['file_platform_tag']})")
    )
    yield f"platform tag satisfied: {data['platform_tag']}{tag_note}"
    for problem in data.get("record_problems", []):
        yield f"RECORD MISMATCH: {problem}"
    for warning in data.get("warnings", []):
        yield f"warning: {warning}"
    if data["over_pypi_limit"]:
        yield (
            f"note: larger than PyPI's default {human_size(PYPI_LIMIT)} per-file limit: ask PyPI "
            "for a larger limit, host it on your own index, or build for fewer targets"
        )
    yield ""
    yield from _file_lines(data)
    yield from _bundled_lines(data["bundled"])
    if data.get("excluded"):
        yield ""
        names = ", ".join(data["excluded"])
        yield f"excluded libraries (bundle --exclude; found at run time): {names}"
    yield from _coverage_lines(data)
    yield from _feature_lines(data.get("build_features"), bool(data["code_targets"]))
    if data.get("device_wheels"):
        yield ""
        yield f"device wheels (pip install '{data['wheel'].split('-')[0]}[device-GFX]'):"
        for target, requirement in data["device_wheels"].items():
            yield f"  {target}: device-{target} needs {requirement}"
    yield ""
    yield "size by component (uncompressed):"
    for comp, n in list(data["sizes"].items())[:20]:
        yield f"  {human_size(n):>12}  {comp}"


def _feature_lines(features: Mapping[str, Any] | None, device_code: bool) -> Iterator[str]:
    """What torch was built with, as its own files say (``torchinfo``); a torch with no HIP
    version, USE_ROCM not on and no device code is a CPU-only wheel, and is called one."""
    if not features:
        return

    def said(value: object) -> str:
        return "not recorded" if value is None else ("on" if value else "off")

    images = ", ".join(features["aotriton_images"]) or "none"
    yield ""
    yield f"torch build features (from {', '.join(features['read_from'])}):"
    hip = features["hip"]
    if not hip:
        cpu = not device_code and not features["rocm"] and not features["aotriton"]
        hip = "none (a CPU-only wheel: no HIP, no device code)" if cpu else "not recorded"
    yield f"  HIP: {hip}"
    yield f"  GPU kernel asserts: {said(features['gpu_asserts'])}"
    yield (f"  flash attention (aotriton): {said(features['flash_attention'])}; images: {images}")


def _file_lines(data: dict[str, Any]) -> Iterator[str]:
    """The ELF files (search path, NEEDED and where each is), then the DLLs and PYDs."""
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
        if row.get("excluded"):
            names = ", ".join(row["excluded"])
            yield f"    EXCLUDED (bundle --exclude; found at run time): {names}"
        if row.get("needed_paths"):
            yield (
                "    NEEDED BY PATH, OUTSIDE THE WHEEL (bundle refuses it): "
                + ", ".join(row["needed_paths"])
            )
        for lib, where in row.get("from_packages", {}).items():
            places = ", ".join(
                f"{w['folder']} ({w['requirement'] or _no_requirement(w['distribution'])})"
                for w in where
            )
            if len(where) == 1 and where[0].get("checked", True):
                yield f"    {lib}: from {places}"
            else:
                first = "" if len(where) == 1 else "the first that holds it of "
                yield (
                    f"    {lib}: from {first}{places} (not checked: inspect this wheel "
                    "together with the wheels that install those folders)"
                )
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


def _no_requirement(distribution: str) -> str:
    return f"{distribution}: NO Requires-Dist installs it"


def _bundled_lines(bundled: list[dict[str, Any]]) -> Iterator[str]:
    if bundled:
        yield ""
        yield "bundled libraries:"
        for lib in bundled:
            why = (
                "dlopen"
                if lib["reason"] == "dlopen"
                else "needed by " + ", ".join(posixpath.basename(n) for n in lib["needed_by"])
            )
            yield f"  {lib['name']}  from {lib['origin']}: {lib['source']}  ({why})"
            if lib.get("aliases"):
                yield f"    also as {', '.join(lib['aliases'])} (the name it is opened by)"


def _coverage_lines(data: dict[str, Any]) -> Iterator[str]:
    if data["coverage"]:
        yield ""
        req = set(data["requested_targets"])
        # with no target asked for (--require-arch, or the bundle's --arch), none is "extra"
        yield (
            "gfx coverage (requested vs present; bytes per target, uncompressed):"
            if req
            else "gfx targets present (bytes per target, uncompressed):"
        )
        for row in data["coverage"]:
            mark = ("requested " if row["target"] in req else "extra     ") if req else ""
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
            yield f"  {row['target']:<9} {mark}{code}{data_note}"
