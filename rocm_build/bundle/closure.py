"""Planning: everything the bundle will do, decided before a byte is written (pure: from ELF facts,
a library index and settings to a frozen :class:`Closure`)."""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Literal

from rocm_build.binary import elf
from rocm_build.bundle.libraries import Candidate, Resolver
from rocm_build.bundle.model import (
    Closure,
    DataFile,
    Library,
    RpathChange,
    ThinSource,
    TorchWheel,
)
from rocm_build.bundle.policy import (
    is_loader,
    is_path,
    platform_tag,
    requested_tag,
)
from rocm_build.common.errors import BundleError, UnsafeInput
from rocm_build.wheel import wheelmeta
from rocm_build.wheel.analyze import PROVENANCE
from rocm_build.wheel.membernames import shown
from rocm_build.wheel.wheelfile import WheelName

__all__ = [
    "ClosureInput",
    "ClosureRules",
    "DataSelector",
    "inside",
    "rel_origin",
    "resolve_closure",
]

#: picks the data files for the bundled libraries' names: (files, left out for other targets)
DataSelector = Callable[[Sequence[str]], tuple[Sequence[DataFile], int]]


def rel_origin(from_dir: str, to_dir: str) -> str:
    rel = posixpath.relpath(to_dir or ".", from_dir or ".")
    return "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"


def inside(from_dir: str, entry: str) -> bool:
    """An ``$ORIGIN``-relative entry that stays inside the wheel."""
    for prefix in ("$ORIGIN", "${ORIGIN}"):
        if entry == prefix or entry.startswith(prefix + "/"):
            rest = entry[len(prefix) :].lstrip("/")
            target = posixpath.normpath(posixpath.join(from_dir or ".", rest))
            return not target.startswith("..")
    return False


@dataclass(frozen=True)
class ClosureInput:
    """The wheel a plan is made for: where it is and goes, its name, METADATA, members and the
    ELF facts of its ELF members."""

    input_path: Path
    output_path: Path
    wheel_name: WheelName
    metadata: str
    members: Sequence[str]
    elves: Mapping[str, elf.ElfInfo]


@dataclass(frozen=True)
class ClosureRules:
    """What decides the plan besides the wheel and the library index.

    A library the tree lacks comes from the build machine only if its name matches
    ``system_allowed`` and none of ``rocm_only`` (ROCm's own libraries: those come from the
    tree ``tree`` or the bundle stops). ``thin`` (mode thin): the ROCm libraries it knows stay
    out of the wheel; the ELF files that need them get search-path entries into their packages'
    folders and the wheel requires those packages."""

    lib_dir: str
    targets: Sequence[str]
    dlopen_patterns: Sequence[str]
    whitelist: frozenset[str]
    torch: TorchWheel | None = None
    fingerprint: str = ""
    policy: str = "auto"
    rocm_only: Sequence[str] = ()
    system_allowed: Sequence[str] = ("*",)
    tree: str = ""
    thin: ThinSource | None = None
    #: ``--exclude`` (``bundle.exclude``): names or patterns never bundled; each stays a NEEDED
    #: entry for the loader to find at run time, and is not walked (what only it needs stays out)
    exclude: Sequence[str] = ()


def resolve_closure(
    wheel: ClosureInput,
    index: Resolver,
    rules: ClosureRules,
    data: DataSelector | tuple[Sequence[DataFile], int] = ((), 0),
) -> Closure:
    """Everything the bundle will do, decided before a byte is written.

    A file reached by several names is bundled once, under its soname; the other names become
    alias stubs. ``data``: the data files (and how many were left out for other targets), or
    what picks them for the bundled libraries' names (not in thin mode: ROCm's packages have
    them). Other libraries of a thin wheel follow the same rules as in a fat wheel.
    """
    r = rules
    lib_dir = r.lib_dir.strip("/")
    host = {arc: info for arc, info in wheel.elves.items() if info.is_host}
    closure = _Walk(
        lib_dir,
        index,
        r.whitelist,
        r.torch,
        r.thin,
        r.rocm_only,
        r.system_allowed,
        host,
        tuple(r.exclude),
    )
    closure.resolve(r.dlopen_patterns, r.tree)
    libraries = closure.libraries()
    if callable(data):
        data = ((), 0) if r.thin is not None else data([lib.name for lib in libraries])
    present = set(wheel.members)
    data_files = tuple(d for d in data[0] if d.arcname not in present)
    name, metadata = wheel.wheel_name, wheel.metadata
    return Closure(
        input=str(wheel.input_path),
        output=str(wheel.output_path),
        distribution=name.distribution,
        version=wheelmeta.consistent_version(name.version, metadata),
        lib_dir=lib_dir,
        targets=tuple(r.targets),
        libraries=libraries,
        rpaths=tuple(closure.search_paths(libraries)),
        data=data_files,
        data_skipped=data[1],
        from_torch=tuple(sorted(closure.from_torch.items())),
        from_packages=tuple(sorted((n, f) for n, (_, f) in closure.from_packages.items())),
        requires=tuple(closure.requires(metadata)),
        system_libs=tuple(sorted(closure.system)),
        excluded=tuple((n, tuple(sorted(set(w)))) for n, w in sorted(closure.excluded.items())),
        platform_tag=_platform_tag(host, closure.system, libraries, r.policy, name),
        provenance_arcname=f"{lib_dir.split('/', 1)[0]}/{PROVENANCE}",
        fingerprint=r.fingerprint,
    )


@dataclass
class _Walk:
    """The NEEDED closure of the wheel's host ELF files, and where each name is found."""

    lib_dir: str
    index: Resolver
    whitelist: frozenset[str]
    torch: TorchWheel | None
    thin: ThinSource | None
    rocm_only: Sequence[str]
    system_allowed: Sequence[str]
    host: Mapping[str, elf.ElfInfo]
    exclude: tuple[str, ...] = ()
    # The loader looks a NEEDED name up as a file name in the search path: a member provides
    # the name it has, never its SONAME (a member libfoo_real.so with SONAME libfoo.so.1 does
    # not answer NEEDED libfoo.so.1).
    provided: dict[str, str] = field(default_factory=dict)  # looked-up name -> arcname
    grafted: dict[str, Library] = field(default_factory=dict)
    same: dict[str, str] = field(default_factory=dict)  # another name -> its grafted name
    by_file: dict[str, str] = field(default_factory=dict)  # real file -> grafted name
    needers: dict[str, list[str]] = field(default_factory=dict)
    missing: dict[str, list[str]] = field(default_factory=dict)
    #: name -> (why, system path, needers)
    refused: dict[str, tuple[str, str, list[str]]] = field(default_factory=dict)
    from_torch: dict[str, str] = field(default_factory=dict)
    #: thin: name -> (distribution, folder)
    from_packages: dict[str, tuple[str, str]] = field(default_factory=dict)
    system: set[str] = field(default_factory=set)
    #: ``exclude``d names -> who needs them (left to the loader at run time)
    excluded: dict[str, list[str]] = field(default_factory=dict)
    #: name in the wheel -> the other names it is opened by (after :meth:`libraries`)
    forced: dict[str, tuple[str, ...]] = field(default_factory=dict)
    queue: list[tuple[str, elf.ElfInfo]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for arc in self.host:
            self.provided.setdefault(posixpath.basename(arc), arc)
        self.queue = sorted(self.host.items())

    def resolve(self, dlopen_patterns: Sequence[str], tree: str) -> None:
        """Walk the NEEDED names, add the ``dlopen``ed libraries of a wheel that uses ROCm (and
        walk theirs); stop on a name that cannot be resolved or may not come from the system."""
        self.walk()
        like = next(iter(self.host.values()), None)
        uses_rocm = any(lib.origin == "rocm" for lib in self.grafted.values()) or any(
            self.index.in_tree(name) for name in self.provided
        )
        if like is not None and uses_rocm and dlopen_patterns and self.thin is None:
            for cand in self.index.dlopen_candidates(dlopen_patterns, like):
                name = cand.info.soname or cand.path.name
                if self._known(name) or (self.torch and name in self.torch.libs):
                    continue
                if self._excluded(name) or self._excluded(cand.path.name):
                    continue
                self.add(cand, name, "dlopen", "")
            self.walk()
        self._broken_links()
        if self.refused:
            raise BundleError(_refusal_message(self.refused, tree))
        if self.missing:
            parts = [
                f"{name} (needed by {', '.join(sorted(set(who)))})"
                for name, who in self.missing.items()
            ]
            raise BundleError(
                "cannot resolve " + "; ".join(sorted(parts)) + ": add it to the ROCm tree or the "
                "build machine's library folders, or install the wheel that provides it and pass "
                "it with --with"
            )

    def _broken_links(self) -> None:
        """A name the tree has only as a link to nothing: say so, naming the link and target."""
        for name, who in sorted(
            {**self.missing, **{n: r[2] for n, r in self.refused.items()}}.items()
        ):
            broken = self.index.dangling(name)
            if broken is not None:
                link, target = broken
                needers = f" (needed by {', '.join(sorted(set(who)))})" if who else ""
                raise BundleError(
                    f"{name}{needers}: the ROCm tree's {link} is a symlink to {target}, which "
                    "does not exist; repair the tree (unpack or install it again) or fix the link"
                )

    def _excluded(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.exclude)

    def _known(self, name: str) -> bool:
        return name in self.provided or name in self.grafted or name in self.same

    def add(
        self, cand: Candidate, name: str, reason: Literal["needed", "dlopen"], who: str
    ) -> None:
        source = str(cand.path.resolve())
        if source in self.by_file and cand.info.soname:  # one file, two names: one copy
            first = self.same[name] = self.by_file[source]
            self.needers[first] += [who] if who else []
            if reason == "needed":
                self.grafted[first] = replace(self.grafted[first], reason="needed")
            return
        self.by_file.setdefault(source, name)
        arc = posixpath.join(self.lib_dir, name)
        self.needers[name] = [who] if who else []
        self.grafted[name] = Library(
            name=name,
            arcname=arc,
            source=source,
            origin=cand.origin,
            reason=reason,
            needed_by=(),
            info=cand.info,
        )
        self.queue.append((arc, cand.info))

    def walk(self) -> None:
        while self.queue:
            who, info = self.queue.pop(0)
            for name in info.needed:
                if is_path(name):
                    msg = (
                        f"{shown(who)}: NEEDED entry {shown(name)!r} is a path, not a library name "
                        "(the loader opens it as it is, outside the wheel); relink it against the "
                        "library by name (-lNAME, or patchelf --replace-needed)"
                    )
                    raise UnsafeInput(msg)
                if is_loader(name) or name in self.whitelist:
                    self.system.add(name)
                elif name in self.provided:
                    continue
                elif self._excluded(name):
                    self.excluded.setdefault(name, []).append(who)
                elif name in self.grafted or name in self.same:
                    self.needers[self.same.get(name, name)].append(who)
                elif self.torch is not None and name in self.torch.libs:
                    self.from_torch[name] = self.torch.libs[name]
                elif self.thin is not None and name in self.thin.folders:
                    self.from_packages[name] = self.thin.folders[name]
                else:
                    self._look_up(name, info, who)

    def _look_up(self, name: str, info: elf.ElfInfo, who: str) -> None:
        cand = self.index.find(name, info)
        why = _system_refusal(cand, name, self.rocm_only, self.system_allowed)
        if cand is None:
            self.missing.setdefault(name, []).append(who)
        elif why:
            self.refused.setdefault(name, (why, str(cand.path), []))[2].append(who)
        else:
            self.add(cand, name, "needed", who)

    def libraries(self) -> tuple[Library, ...]:
        """The grafted libraries, each once under its final name, with who needs it and the
        alias stubs it gets."""
        self.grafted, self.forced = _one_copy(self.grafted, self.same, self.needers, self.provided)
        aliases = self._aliases()
        return tuple(
            Library(
                **{
                    **asdict(lib),
                    "info": lib.info,
                    "needed_by": tuple(sorted(set(self.needers[n]))),
                    "aliases": aliases.get(n, ()),
                }
            )
            for n, lib in sorted(self.grafted.items())
        )

    def _aliases(self) -> dict[str, tuple[str, ...]]:
        # A library opened by another name than its soname (HSA asks for the unversioned
        # "libhsa-amd-aqlprofile64.so", rocSHMEM for "libnuma.so") also answers to that name.
        taken = set(self.provided) | set(self.grafted) | set(self.same)
        other = {  # a stub records the soname as its NEEDED entry: no soname, no stub
            n: [a for a in self.index.other_names(Path(lib.source)) if a not in taken]
            for n, lib in self.grafted.items()
            if lib.info.soname == n
        }
        wanted = {a for names in other.values() for a in names}
        # the wheel's own files, read in the wheel, bring their library-name strings with them
        in_wheel = {a for i in self.host.values() if i.so_strings for a in wanted & i.so_strings}
        callers = [
            *(i.path for i in self.host.values() if i.so_strings is None),
            *(lib.info.path for lib in self.grafted.values()),
        ]
        found = in_wheel | self.index.referenced(callers, wanted - in_wheel)
        exact = _exact_names(self.grafted, taken)
        return {
            n: tuple(
                sorted(
                    {
                        *self.forced.get(n, ()),
                        *(a for a in other.get(n, ()) if a in found),
                        *exact.get(n, ()),
                    }
                )
            )
            for n in self.grafted
        }

    def search_paths(self, libraries: Sequence[Library]) -> list[RpathChange]:
        """The new search paths of the wheel's own ELF files: into ``lib_dir``, the folders of
        their NEEDED names, and their own entries that stay inside the wheel."""
        location = {n: posixpath.dirname(a) for n, a in self.provided.items()}
        location.update(dict.fromkeys([*self.grafted, *self.same], self.lib_dir))
        if self.torch is not None:
            location.update({n: posixpath.dirname(a) for n, a in self.from_torch.items()})
        location.update({n: folder for n, (_, folder) in self.from_packages.items()})
        rpaths: list[RpathChange] = []
        for arc, info in sorted(self.host.items()):
            here = posixpath.dirname(arc)
            entries: list[str] = []
            own = [n for n in info.needed if n in location and n not in self.from_packages]
            if libraries or own or not info.needed:
                entries.append(rel_origin(here, self.lib_dir))
            for name in info.needed:
                if name in location:
                    entries.append(rel_origin(here, location[name]))
            entries += [e for e in info.search_path if inside(here, e)]
            new = ":".join(dict.fromkeys(entries))
            # thin: what finds ROCm's packages is a RUNPATH, as in ROCm's own thin wheels
            run = any(n in self.from_packages for n in info.needed)
            if run and (info.runpath != tuple(new.split(":")) or info.rpath):
                rpaths.append(RpathChange(arc, info.search_path, new, runpath=True))
            elif not run and (info.rpath != tuple(new.split(":")) or info.runpath):
                rpaths.append(RpathChange(arc, info.search_path, new))
        return rpaths

    def requires(self, metadata: str) -> list[str]:
        """Requirements to add: the exact torch whose libraries the wheel uses; thin: the ROCm
        packages at the tree's version."""
        requires: list[str] = []
        if self.torch is not None and self.from_torch:
            want = f"torch=={self.torch.version}"
            if want not in wheelmeta.requirements(metadata):
                requires.append(want)
        if self.thin is not None:
            requires += self.thin.requirements(d for d, _ in self.from_packages.values())
        return requires


def _platform_tag(
    host: Mapping[str, elf.ElfInfo],
    system: set[str],
    libraries: Sequence[Library],
    policy: str,
    wheel_name: WheelName,
) -> str:
    """The tag the result satisfies; the requested one (``--plat``, ``bundle.policy``) if the
    result satisfies it (see :func:`.policy.requested_tag`)."""
    if not host:
        return wheel_name.platform_tag
    infos = [*host.values(), *(lib.info for lib in libraries)]
    machine = next(iter(host.values())).machine
    tag = platform_tag(infos, set(system), machine)
    if policy in ("auto", ""):
        return tag
    return requested_tag(tag, policy, machine)


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


#: Unversioned names that other packages dlopen by exact file name in the wheel's library folder:
#: Triton's AMD backend looks for ``<site-packages>/torch/lib/libamdhip64.so``. The bundled
#: library whose soname is NAME.N also answers to NAME, through an alias stub (a symlink cannot be
#: in a wheel, a linker script cannot be dlopen()ed, a copy would be a second runtime).
EXACT_NAMES = ("libamdhip64.so",)


def _exact_names(grafted: Mapping[str, Library], taken: set[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for n, lib in grafted.items():
        soname = lib.info.soname
        if not soname or soname != n:
            continue
        out[n] = tuple(e for e in EXACT_NAMES if soname.startswith(e + ".") and e not in taken)
    return out


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
