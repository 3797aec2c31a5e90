"""A ROCm tree as ROCm's own Python packages (``rocm wheels``).

ROCm publishes its runtime and libraries as Python distributions: ``rocm-sdk-core`` (HIP
runtime, HSA, comgr, the bundled system libraries), ``rocm-sdk-libraries-<target family>``
(math libraries and their data) and the pure ``rocm`` meta package. Each platform package
installs one import folder in site-packages, ``_rocm_sdk_core/`` or
``_rocm_sdk_libraries_<family>/`` (dashes as underscores), holding the tree's own layout:
``lib/``, ``lib/rocm_sysdeps/lib``, ``lib/llvm/lib``, ... This module writes the same
distributions from a tree so thin wheels (``bundle --mode thin``) can be installed and tested
without ROCm's package index: same names, same folders, version = the tree's version. A
kpack-split tree gets today's names instead: an arch-neutral ``rocm-sdk-libraries`` and one
``rocm-sdk-device-<target>`` per target (:mod:`.rocmdevice`).

A wheel holds no symlinks: a library is stored once, under the name the loader looks up (its
soname). Core libraries keep their search paths (``$ORIGIN``-relative inside the same layout);
the libraries package's ELF files get entries into ``_rocm_sdk_core``'s folders as well.

Size: `rocm wheels`: its own plan and execute, the wheels' names, tags and files in one place.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.binary import elf, kpack
from rocm_build.bundle import prune, rocmdevice
from rocm_build.bundle.apply import ElfChange
from rocm_build.bundle.apply import stream_elf as _stream_elf
from rocm_build.bundle.closure import rel_origin as _rel_origin
from rocm_build.bundle.data import data_mode, gfx_tokens, program_info
from rocm_build.bundle.device import plan_device
from rocm_build.bundle.libraries import LibraryIndex, system_lib_dirs, tree_lib_dirs
from rocm_build.bundle.model import ThinSource
from rocm_build.bundle.policy import is_loader as _is_loader
from rocm_build.bundle.policy import platform_tag, policy_whitelist
from rocm_build.bundle.provenance import rocm_version as _rocm_version
from rocm_build.common import arch, tempfiles
from rocm_build.common.errors import ConfigError, FileAccessError, RocmTreeError
from rocm_build.common.treepath import TreeGuard
from rocm_build.wheel import wheelmeta
from rocm_build.wheel.deflate import Deflate
from rocm_build.wheel.wheelfile import WheelWriter

#: How a ``rocm wheels`` user allows a folder outside the tree (it has no setting for it).
WHEELS_HINT = "rocm wheels --allow-outside DIR"

CORE_DIST = "rocm-sdk-core"
LIBRARIES_DIST = "rocm-sdk-libraries-{family}"
META_DIST = "rocm"
DEFAULT_FAMILY = "all"

#: Libraries of the core package (with everything they need from the tree); the other shared
#: libraries of ``lib/`` go into the libraries package.
CORE_LIBS = (
    "libamdhip64.so*",
    "libhiprtc*.so*",
    "libhsa-runtime64.so*",
    "libhsakmt.so*",
    "libamd_comgr*.so*",
    "libroctx64.so*",
    "libroctracer64.so*",
    "librocprofiler*.so*",
    "libhsa-amd-aqlprofile64.so*",
    "librocm_smi64.so*",
    "libamd_smi.so*",
    "librocm-core.so*",
    "librocm_sysdeps_*.so*",
)
#: Data of the core package's libraries (libdrm's GPU names), tree-relative.
CORE_DATA = ("lib/rocm_sysdeps/share/libdrm", "share/libdrm")
#: Data trees of the libraries package outside ``lib/`` (MIOpen's databases and kernels).
LIBRARIES_DATA = ("share/miopen",)
#: Folders of ``lib/`` that are no library's data tree.
_NOT_DATA = ("cmake", "pkgconfig", "llvm", "llvm-*", "rocm_sysdeps", "host-math", "python*")


def import_folder(dist: str) -> str:
    """The folder a platform distribution installs: ``_`` + its name with ``_`` for ``-``."""
    return "_" + dist.replace("-", "_")


def libraries_dist(family: str) -> str:
    return LIBRARIES_DIST.format(family=family)


def tree_libraries_dist(tree: Path, family: str) -> str:
    """The libraries package of ``tree``: arch-neutral ``rocm-sdk-libraries`` for a kpack-split
    tree (``family`` unused), else ``rocm-sdk-libraries-<family>``."""
    return rocmdevice.LIBRARIES_DIST if kpack.is_split_tree(tree) else libraries_dist(family)


def _file_dist(dist: str) -> str:
    """The distribution's name as a wheel file name spells it."""
    return re.sub(r"[-_.]+", "_", dist)


@dataclass(frozen=True)
class TreeLib:
    name: str  # the name the loader looks up (soname, else file name)
    source: Path  # the real file
    rel_dir: str  # its lib folder relative to the tree, e.g. "lib/rocm_sysdeps/lib"
    info: elf.ElfInfo
    system: bool = False  # from the build machine, not the tree


def _tree_libs(tree: Path, guard: TreeGuard | None = None) -> dict[str, TreeLib]:
    """Every shared library of the tree's lib folders, by every name it has there; with
    ``guard``, a library reached through a link out of the tree is refused (as ``bundle`` does)."""
    out: dict[str, TreeLib] = {}
    by_file: dict[Path, TreeLib] = {}
    for folder in tree_lib_dirs(tree):
        rel_dir = folder.relative_to(tree).as_posix()
        for path in sorted(folder.iterdir()):
            if ".so" not in path.name or not path.is_file() or path.name in out:
                continue
            real = guard.check(path) if guard is not None else path.resolve()
            if real not in by_file:
                try:
                    info = elf.read_elf(real)
                except elf.NotElfError:
                    continue
                if not info.is_host:
                    continue
                by_file[real] = TreeLib(info.soname or path.name, real, rel_dir, info)
            out[path.name] = by_file[real]
    return out


def _closure(seeds: Iterable[TreeLib], libs: dict[str, TreeLib], skip: set[Path]) -> list[TreeLib]:
    found: dict[Path, TreeLib] = {}
    queue = [s for s in seeds if s.source not in skip]
    while queue:
        lib = queue.pop()
        if lib.source in found or lib.source in skip:
            continue
        found[lib.source] = lib
        queue += [libs[n] for n in lib.info.needed if n in libs]
    return sorted(found.values(), key=lambda lib: (lib.rel_dir, lib.name))


def _files_under(folder: Path, guard: TreeGuard | None = None) -> list[Path]:
    out: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for path in (Path(root) / f for f in sorted(files)):
            if path.is_file():
                if guard is not None and path.is_symlink():
                    guard.check(path)
                out.append(path)
    return out


def _data_files(
    tree: Path, targets: Sequence[str] = (), guard: TreeGuard | None = None
) -> list[Path]:
    """The libraries package's data: the trees under ``lib/`` (rocBLAS, hipBLASLt, rocFFT
    kernels) and :data:`LIBRARIES_DATA`; with ``targets``, a file whose path inside its tree
    names gfx targets only if one of them is wanted (the rule of ``bundle --arch``)."""
    lib = tree / "lib"
    roots: list[Path] = []
    for sub in sorted(lib.iterdir()) if lib.is_dir() else []:
        if not sub.is_dir() or sub.is_symlink():
            continue
        if any(fnmatch.fnmatchcase(sub.name, p) for p in _NOT_DATA):
            continue
        roots.append(sub)
    roots += [tree / rel for rel in LIBRARIES_DATA]
    out: list[Path] = []
    for root in roots:
        for path in _files_under(root, guard):
            tokens = gfx_tokens(path.relative_to(root).as_posix())
            if arch.keeps(tokens, targets):
                out.append(path)
    return out


SYSDEPS_DIR = "lib/rocm_sysdeps/lib"  # where ROCm keeps the system libraries it ships


def _system_deps(libs: Sequence[TreeLib], env: dict[str, str]) -> list[TreeLib]:
    """Libraries ``libs`` need that the tree lacks, from the build machine's folders as in a fat
    wheel (the manylinux whitelist and the loader stay with the system); they go into
    :data:`SYSDEPS_DIR`, which ROCm's libraries search, as ROCm's own packages ship them."""
    if not libs:
        return []
    provided = {lib.name for lib in libs}
    whitelist = policy_whitelist("auto")
    index = LibraryIndex([], system_lib_dirs(libs[0].info.machine, env=env))
    found: dict[str, TreeLib] = {}
    queue = list(libs)
    while queue:
        lib = queue.pop()
        for name in lib.info.needed:
            if name in provided or name in found or name in whitelist or _is_loader(name):
                continue
            cand = index.find(name, lib.info)
            if cand is not None:  # else left to the system: the platform tag says so
                found[name] = TreeLib(name, cand.path.resolve(), SYSDEPS_DIR, cand.info, True)
                queue.append(found[name])
    return sorted(found.values(), key=lambda lib: lib.name)


@dataclass(frozen=True)
class _OnCore:
    """What a package that requires rocm-sdk-core gets from it: the requirement, the library
    names core provides, and core's library folders (site-packages-relative)."""

    requirement: str
    names: frozenset[str]
    dirs: Sequence[str]


def _refuse_output_file(output_dir: Path) -> None:
    """A one-line error if ``--output-dir`` is a file (the plan's check: nothing made)."""
    if output_dir.exists() and not output_dir.is_dir():
        msg = f"--output-dir {output_dir} is a file, not a folder; name a folder"
        raise FileAccessError(msg)


def _make_output_dir(output_dir: Path) -> None:
    _refuse_output_file(output_dir)
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:
        msg = f"--output-dir {output_dir}: a part of it is a file ({exc.strerror}); name a folder"
        raise FileAccessError(msg) from None
    tempfiles.check_folder(output_dir)


#: The longest family name: the libraries package's wheel file name must stay a file name.
MAX_FAMILY = 64


def check_family(family: str) -> str:
    """``--target-family``, checked: it becomes part of a distribution name, a folder name in
    site-packages and the search paths written into thin wheels."""
    if len(family) > MAX_FAMILY or not re.fullmatch(r"[A-Za-z0-9]+([-_.][A-Za-z0-9]+)*", family):
        shown = family if len(family) <= MAX_FAMILY else family[:MAX_FAMILY] + "..."
        msg = (
            f"bad --target-family '{shown}': use letters, digits and single - _ . between them, "
            f"at most {MAX_FAMILY} characters (as gfx94X-dcgpu)"
        )
        raise ConfigError(msg)
    return family


@dataclass(frozen=True)
class LibMember:
    """A library as a platform wheel stores it: at ``arcname``, from ``source``; ``streamed``:
    through the ELF pass (a new search path ``rpath``, or its device code cut by ``cut``)."""

    arcname: str
    source: Path
    streamed: bool
    rpath: str | None
    cut: prune.PrunePlan | None


@dataclass(frozen=True)
class PlatformWheel:
    """One platform package as ``rocm wheels`` will write it."""

    dist: str
    version: str
    summary: str
    name: str  # the wheel's file name
    tags: tuple[str, ...]
    libs: tuple[LibMember, ...]
    data: tuple[tuple[Path, str], ...]  # (file, member name)
    requires: tuple[str, ...]

    @property
    def dist_info(self) -> str:
        return f"{_file_dist(self.dist)}-{self.version}.dist-info"


def _platform_wheel(
    dist: str,
    version: str,
    summary: str,
    libs: Sequence[TreeLib],
    data: Sequence[tuple[Path, str]],
    on_core: _OnCore | None,
    targets: Sequence[str] = (),
) -> PlatformWheel:
    """One platform package: ``libs`` under ``<import folder>/<their lib folder>``; their search
    path gains ``on_core``'s folders (site-packages-relative) after their own entries; their
    offload bundles keep only the code that serves ``targets`` (all when empty)."""
    folder = import_folder(dist)
    extra_dirs = on_core.dirs if on_core else ()
    provided = {lib.name for lib in libs} | (on_core.names if on_core else set())
    programs = [(p, rel, i) for p, rel in data if data_mode(p) & 0o111 and (i := program_info(p))]
    infos = [lib.info for lib in libs] + [i for _p, _rel, i in programs]
    external = {n for info in infos for n in info.needed if n not in provided}
    machine = libs[0].info.machine if libs else "EM_X86_64"
    plat = platform_tag(infos, external, machine)
    members: list[LibMember] = []
    # a program (rocFFT's rocfft_rtc_helper) finds this package's and core's libraries
    lib_dirs = dict.fromkeys([*sorted({f"{folder}/{lib.rel_dir}" for lib in libs}), *extra_dirs])
    for path, rel, _info in programs:
        here = posixpath.dirname(f"{folder}/{rel}")
        search = ":".join(_rel_origin(here, d) for d in lib_dirs)
        members.append(LibMember(f"{folder}/{rel}", path, True, search or None, None))
    data = [(p, rel) for p, rel in data if all(p != q for q, _rel, _i in programs)]
    for lib in libs:
        here = f"{folder}/{lib.rel_dir}"
        arc = f"{here}/{lib.name}"
        cut = _cut(arc, lib, targets)
        rpath = None
        if extra_dirs or lib.system:
            own = ["$ORIGIN"] if lib.system else list(lib.info.search_path)
            entries = [*own, *(_rel_origin(here, d) for d in extra_dirs)]
            rpath = ":".join(dict.fromkeys(entries))
        streamed = bool(extra_dirs or lib.system or cut)
        members.append(LibMember(arc, lib.source, streamed, rpath, cut))
    return PlatformWheel(
        dist=dist,
        version=version,
        summary=summary,
        name=f"{_file_dist(dist)}-{version}-py3-none-{plat}.whl",
        tags=tuple(f"py3-none-{p}" for p in plat.split(".")),
        libs=tuple(members),
        data=tuple((path, f"{folder}/{rel}") for path, rel in data),
        requires=(on_core.requirement,) if on_core else (),
    )


def _write_platform_wheel(output_dir: Path, wheel: PlatformWheel, level: int) -> Path:
    """Write the platform package ``wheel`` into ``output_dir``."""
    folder = import_folder(wheel.dist)
    out = output_dir / wheel.name
    with (
        tempfiles.folder(output_dir, f"{wheel.name}.scratch") as scratch,
        WheelWriter(out, wheel.dist_info, Deflate(level=level)) as writer,
    ):
        writer.add_bytes(f"{folder}/__init__.py", f'__version__ = "{wheel.version}"\n'.encode())
        for lib in wheel.libs:
            if lib.streamed:
                change = ElfChange(lib.rpath, prune=lib.cut)
                _stream_elf(writer, lib.arcname, lib.source, change, Path(scratch), 0o755)
            else:
                writer.add_file(lib.arcname, lib.source, 0o755)
        for path, arc in wheel.data:
            writer.add_file(arc, path, data_mode(path))
        meta = wheelmeta.new_metadata(wheel.dist, wheel.version, wheel.summary, wheel.requires)
        writer.add_bytes(f"{wheel.dist_info}/METADATA", meta.encode())
        info = wheelmeta.new_wheel_info(list(wheel.tags))
        writer.add_bytes(f"{wheel.dist_info}/WHEEL", info.encode())
        writer.commit()
    return out


def _cut(arc: str, lib: TreeLib, targets: Sequence[str]) -> prune.PrunePlan | None:
    """How ``lib``'s device code is pruned for ``targets`` (None: left as it is)."""
    if not targets or not lib.info.has_fatbin:
        return None
    files = plan_device([(arc, str(lib.source), None)], targets, prune_code=True)
    return files[0].cut if files and files[0].pruned else None


def _meta_name(version: str) -> str:
    return f"{META_DIST}-{version}-py3-none-any.whl"


def _write_meta_wheel(
    output_dir: Path, version: str, requires: Sequence[str], extras: Sequence[str], level: int
) -> Path:
    dist_info = f"{META_DIST}-{version}.dist-info"
    out = output_dir / _meta_name(version)
    meta = wheelmeta.new_metadata(
        META_DIST, version, "ROCm (meta package)", requires, extras=extras
    )
    info = wheelmeta.new_wheel_info(["py3-none-any"], purelib=True)
    with WheelWriter(out, dist_info, Deflate(level=level)) as writer:
        writer.add_bytes("rocm_sdk/__init__.py", f'__version__ = "{version}"\n'.encode())
        writer.add_bytes(f"{dist_info}/METADATA", meta.encode())
        writer.add_bytes(f"{dist_info}/WHEEL", info.encode())
        writer.commit()
    return out


def tree_packages(
    tree: Path, family: str = DEFAULT_FAMILY, guard: TreeGuard | None = None
) -> dict[str, list[TreeLib]]:
    """The tree's libraries by the distribution they belong to (core, libraries)."""
    libs = _tree_libs(tree, guard)
    seeds = [
        lib
        for n, lib in libs.items()
        if lib.rel_dir == "lib" and any(fnmatch.fnmatchcase(n, p) for p in CORE_LIBS)
    ]
    core = _closure(seeds, libs, set())
    rest = [lib for lib in libs.values() if lib.rel_dir == "lib"]
    extra = _closure(rest, libs, {lib.source for lib in core})
    return {CORE_DIST: core, tree_libraries_dist(tree, family): extra}


def package_dirs(tree: Path, family: str = DEFAULT_FAMILY) -> dict[str, tuple[str, str]]:
    """NEEDED name -> (distribution, its folder relative to site-packages) for the tree's
    libraries as :func:`build_wheels` packages them."""
    out: dict[str, tuple[str, str]] = {}
    libs = _tree_libs(tree)
    for dist, members in tree_packages(tree, family).items():
        for lib in members:
            where = (dist, f"{import_folder(dist)}/{lib.rel_dir}")
            out[lib.name] = where
            for n, other in libs.items():
                if other.source == lib.source:
                    out.setdefault(n, where)
    return out


def thin_source(
    tree: Path, family: str = DEFAULT_FAMILY, targets: Sequence[str] = ()
) -> ThinSource:
    """What ``bundle --mode thin`` needs: the tree's version and each library's package; from a
    kpack-split tree, the ``rocm[libraries,device-...]`` requirement for ``targets`` (the
    requested ones: ``device-all`` without) that installs its packages."""
    check_family(family)
    version = _rocm_version(tree)
    if not version:
        raise RocmTreeError(
            f"ROCm tree {tree} has no .info/version: thin wheels require ROCm's packages at the "
            "tree's version; use a tree with .info/version, or bundle in fat mode"
        )
    folders = package_dirs(tree, family)
    if not kpack.is_split_tree(tree):
        return ThinSource(version, family, folders)
    meta = rocmdevice.thin_requirement(version, targets)
    return ThinSource(version, family, folders, meta, rocmdevice.LIBRARIES_DIST)


@dataclass(frozen=True)
class RocmWheelSet:
    """What ``rocm wheels`` will write: the core and libraries packages (their files, names and
    tags decided), then the ``rocm`` meta package, into ``output_dir``."""

    tree: Path
    output_dir: Path
    version: str
    family: str
    level: int
    targets: tuple[str, ...]  # the libraries package keeps these (all when empty)
    core: PlatformWheel
    libraries: PlatformWheel
    #: the ``rocm`` meta package's requirements and extras
    meta_requires: tuple[str, ...]
    meta_extras: tuple[str, ...]
    #: a kpack-split tree's ``rocm-sdk-device-<target>`` packages
    devices: tuple[rocmdevice.DeviceWheel, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """The wheels' file names, in the order they are written."""
        devices = tuple(d.name for d in self.devices)
        return (self.core.name, self.libraries.name, *devices, _meta_name(self.version))


def rocm_wheels_plan(
    tree: Path,
    output_dir: Path,
    *,
    family: str = DEFAULT_FAMILY,
    level: int = 6,
    targets: Sequence[str] = (),
    allow_outside: Sequence[Path] = (),
    env: Mapping[str, str] | None = None,
) -> RocmWheelSet:
    """rocm-sdk-core, rocm-sdk-libraries-<family> and rocm of ``tree``, decided: the libraries
    package keeps the data and the device code of ``targets`` only (all when empty), as ROCm's
    per-family packages do, from one all-targets tree. Nothing outside the tree (or the
    ``allow_outside`` folders) enters a wheel through a symlink. Reads the tree (and the build
    machine's library folders, ``env``: the process's environment by default); writes nothing."""
    version = _rocm_version(tree)
    if not version or not (tree / "lib").is_dir():
        raise RocmTreeError(
            f"{tree} is no ROCm tree (no lib/ or .info/version): pass the tree's top folder"
        )
    check_family(family)
    guard = TreeGuard.of(tree, allow_outside, WHEELS_HINT)
    _refuse_output_file(output_dir)
    packages = tree_packages(tree, family, guard)
    env = dict(os.environ if env is None else env)
    core = packages[CORE_DIST]
    core = core + _system_deps(core, env)
    core_dirs = sorted({f"{import_folder(CORE_DIST)}/{lib.rel_dir}" for lib in core})
    libraries = tree_libraries_dist(tree, family)
    libraries_libs = packages[libraries]
    libraries_libs = libraries_libs + _system_deps([*core, *libraries_libs], env)
    libraries_libs = [lib for lib in libraries_libs if lib not in core]
    data = [(p, p.relative_to(tree).as_posix()) for p in _data_files(tree, targets, guard)]
    split = libraries == rocmdevice.LIBRARIES_DIST
    data, device_data = rocmdevice.split_data(data) if split else (data, {})
    core_data = [
        (p, p.relative_to(tree).as_posix())
        for rel in CORE_DATA
        for p in _files_under(tree / rel, guard)
    ]
    # The libraries package requires core at its version: core's libraries are no external
    # needs of it, so its tag is what its own files need (as `inspect` reads it).
    on_core = _OnCore(f"{CORE_DIST}=={version}", frozenset(lib.name for lib in core), core_dirs)
    core_summary = "ROCm core runtime (HIP, HSA, comgr)"
    libraries_wheel = _platform_wheel(
        libraries,
        version,
        "ROCm libraries" + ("" if split else f" for {family}"),
        libraries_libs,
        data,
        on_core,
        targets,
    )
    devices: tuple[rocmdevice.DeviceWheel, ...] = ()
    if split:
        plat = ".".join(t.removeprefix("py3-none-") for t in libraries_wheel.tags)
        devices = rocmdevice.plan_devices(tree, version, plat, device_data, targets, guard)
    return RocmWheelSet(
        tree=tree,
        output_dir=output_dir,
        version=version,
        family=family,
        level=level,
        targets=tuple(targets),
        core=_platform_wheel(CORE_DIST, version, core_summary, core, core_data, None),
        libraries=libraries_wheel,
        meta_requires=tuple(_meta_requires(version, libraries, devices)),
        meta_extras=tuple(
            rocmdevice.meta_extras(d.target for d in devices) if split else ["libraries"]
        ),
        devices=devices,
    )


def _meta_requires(
    version: str, libraries: str, devices: Sequence[rocmdevice.DeviceWheel]
) -> list[str]:
    if libraries == rocmdevice.LIBRARIES_DIST:
        targets = [d.target for d in devices]
        return rocmdevice.meta_requirements(CORE_DIST, version, targets)
    return [f"{CORE_DIST}=={version}", f'{libraries}=={version}; extra == "libraries"']


def rocm_wheels(plan: RocmWheelSet) -> list[Path]:
    """Write the plan's wheels (the output folder made if missing); their paths."""
    _make_output_dir(plan.output_dir)
    # What a killed run left goes at the start, and at the end what a run that was still going
    # away at the start left (see tempfiles.swept), also when this run fails.
    with tempfiles.swept(plan.output_dir):
        return [
            _write_platform_wheel(plan.output_dir, plan.core, plan.level),
            _write_platform_wheel(plan.output_dir, plan.libraries, plan.level),
            *(rocmdevice.write_device_wheel(plan.output_dir, d, plan.level) for d in plan.devices),
            _write_meta_wheel(
                plan.output_dir, plan.version, plan.meta_requires, plan.meta_extras, plan.level
            ),
        ]


def build_wheels(tree: Path, output_dir: Path, **options: Any) -> list[Path]:
    """:func:`rocm_wheels_plan` (with ``options``) and :func:`rocm_wheels` in one call."""
    return rocm_wheels(rocm_wheels_plan(tree, output_dir, **options))


def requirement_lines(dists: Iterable[str], version: str) -> list[str]:
    return [f"{d}=={version}" for d in sorted(set(dists))]
