"""``rocm-build fetch``: what torch's and Triton's builds would download mid-build, fetched
beforehand into the download cache, so that ``build`` runs offline.

- aotriton: the runtime for the tree's ROCm and the image archives of the targets' families,
  each from the URL and with the sha256 the torch checkout's ``aotriton.cmake`` names
  (``repo.aotritoncmake``), unpacked and put together as one install prefix
  (``<cache>/aotriton/aotriton-<ver>-<rocm>-<arch>-<images>``: ``lib/libaotriton_v2.so*``,
  ``include/``, ``lib/aotriton.images/amd-<family>/``) that ``build`` passes as
  ``AOTRITON_INSTALLED_PREFIX``;
- Triton's downloads (``--what llvm``): the LLVM archive of the Triton checkout's
  ``cmake/llvm-hash.txt`` for this host, and the packages its ``setup.py`` downloads besides
  (nlohmann JSON; pybind11 where it downloads it), from the URLs it names (``repo.llvmpin``),
  unpacked under ``<cache>/llvm`` and passed as ``LLVM_SYSPATH``, ``JSON_SYSPATH`` and
  ``PYBIND11_SYSPATH``, with ``TRITON_OFFLINE_BUILD=1`` when nothing else is left to download.
  Triton publishes no hash for them: the sha256 of the first download of each URL is recorded in
  ``<cache>/llvm/first-sha256.json`` (trust on first use), and a later download or cached
  folder of another sha256 is refused (the download is deleted) or not used.

Downloads go through ``rocm.distfetch`` (progress, sha256, safe unpacking) without resuming: a
download that stops, is too big, has the wrong sha256 or lacks the file that marks the package
(``include/nlohmann/json.hpp``...) keeps nothing. ``plan`` only reads (the
checkouts, the cache's stamps); ``execute`` downloads.
"""

from __future__ import annotations

import os
import platform
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rocm_build.common import locks, statefile, tempfiles
from rocm_build.common.errors import ConfigError, FetchError, FileAccessError, UnsafeInput
from rocm_build.common.masking import mask_url
from rocm_build.repo import aotritoncmake, checkoutfile, llvmpin
from rocm_build.repo.aotritoncmake import Download
from rocm_build.rocm import distfetch
from rocm_build.rocm.dist import RocmTree

__all__ = [
    "FETCH_COMMAND",
    "WHAT",
    "AotritonSet",
    "FetchPlan",
    "TritonPackage",
    "aotriton_cache_dir",
    "aotriton_set",
    "execute",
    "llvm_cache_dir",
    "triton_llvm",
    "triton_packages",
]

WHAT = ("aotriton", "llvm")
FETCH_COMMAND = "rocm-build fetch"
#: Bounds on one archive (aotriton's largest image and Triton's LLVM are well under 2 GiB).
MAX_BYTES = 4 << 30
_STAMP = "aotriton prefix stamp"
#: The sha256 of the first download of each URL that has no published hash (Triton's).
FIRST_SEEN = "first-sha256.json"
_FIRST_WHAT = "record of first downloads"
#: What marks Triton's LLVM (its CMake looks for MLIR's package).
LLVM_MARKER = "lib/cmake/mlir/MLIRConfig.cmake"
Show = Callable[[str], tuple[Callable[[int, int | None], None], Callable[[], None]]]


def _cache_root(env: Mapping[str, str], work_dir: Path, name: str) -> Path:
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "rocm-build" / name
    if env.get("HOME"):
        return Path(env["HOME"]) / ".cache" / "rocm-build" / name
    return work_dir / name


def aotriton_cache_dir(env: Mapping[str, str], work_dir: Path) -> Path:
    """Where aotriton installs live: ``<cache>/rocm-build/aotriton``."""
    return _cache_root(env, work_dir, "aotriton")


def llvm_cache_dir(env: Mapping[str, str], work_dir: Path) -> Path:
    """Where Triton's LLVM builds live: ``<cache>/rocm-build/llvm``."""
    return _cache_root(env, work_dir, "llvm")


@dataclass(frozen=True)
class AotritonSet:
    """The aotriton downloads one build needs and the prefix they make."""

    version: str
    runtime: Download
    images: tuple[Download, ...]
    prefix: Path
    present: bool  # the prefix is there, made from exactly these downloads

    @property
    def downloads(self) -> tuple[Download, ...]:
        return (self.runtime, *self.images)


def _host() -> tuple[str, str]:
    return platform.machine(), platform.libc_ver()[1]


def aotriton_set(
    torch_source: Path, tree: RocmTree, targets: Sequence[str], env: Mapping[str, str], cache: Path
) -> AotritonSet | None:
    """What torch's ``aotriton.cmake`` would download for this tree and these targets, or None
    when the checkout has no such file; reads, never writes."""
    where = torch_source / aotritoncmake.AOTRITON_CMAKE
    text = checkoutfile.read_text(
        torch_source, aotritoncmake.AOTRITON_CMAKE, "torch's aotriton.cmake"
    )
    if text is None:
        return None
    pins = aotritoncmake.parse(text, str(where), env)
    arch = _host()[0]
    runtime = pins.runtime(tree.version or "0.0", arch)
    images = pins.images_for(targets)
    rocm = runtime.what.rsplit(" ", 1)[-1]
    families = "+".join(d.what.rsplit("-", 1)[-1] for d in images) or "noimages"
    prefix = cache / f"aotriton-{pins.version}-{rocm}-{arch}-{families}"
    found = AotritonSet(pins.version, runtime, images, prefix, present=False)
    return replace(found, present=_prefix_present(found))


def _stamp(prefix: Path) -> Path:
    return prefix.with_name(prefix.name + ".json")


def _pieces(found: AotritonSet) -> dict[str, str]:
    return {mask_url(d.url): d.sha256 for d in found.downloads}


def _prefix_present(found: AotritonSet) -> bool:
    try:
        recorded = statefile.read_json(_stamp(found.prefix), _STAMP)
    except (FileNotFoundError, ValueError):
        return False
    st = statefile.check_folder(found.prefix, "aotriton prefix")
    return st is not None and recorded == {"pieces": _pieces(found)}


def _first_seen(cache: Path) -> dict[str, str]:
    """The recorded first sha256 by (masked) URL; a damaged record is one line, exit 5."""
    path = cache / FIRST_SEEN
    try:
        data = statefile.read_json(path, _FIRST_WHAT)
    except FileNotFoundError:
        return {}
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        msg = (
            f"{path} is damaged; delete it to trust the next downloads of Triton's packages "
            "anew (the cached ones are fetched again)"
        )
        raise FetchError(msg)
    return data


def _first_sha(cache: Path, url: str) -> str:
    return _first_seen(cache).get(mask_url(url), "")


def triton_llvm(
    triton_source: Path, env: Mapping[str, str], cache: Path, base_url: str = ""
) -> tuple[Download, Path | None] | None:
    """Triton's pinned LLVM for this host and its unpacked folder when fetched (of the sha256
    first downloaded), or None when the checkout pins none."""
    rev = llvmpin.read_pin(triton_source)
    if rev is None:
        return None
    machine, glibc = _host()
    wanted = llvmpin.llvm_download(rev, llvmpin.host_suffix(machine, glibc), base_url)
    return wanted, distfetch.cached(wanted.url, cache, _first_sha(cache, wanted.url))


@dataclass(frozen=True)
class TritonPackage:
    """A package Triton's setup.py downloads and its unpacked folder when fetched."""

    package: llvmpin.Package
    folder: Path | None


def triton_packages(
    triton_source: Path, cache: Path
) -> tuple[tuple[TritonPackage, ...], tuple[str, ...]]:
    """The packages the checkout's setup.py downloads (each with its cached folder or None) and
    the ``*_SYSPATH`` variables it reads whose download rocm-build does not know."""
    packages, unknown = llvmpin.setup_packages(triton_source)
    found = tuple(
        TritonPackage(p, distfetch.cached(p.download.url, cache, _first_sha(cache, p.download.url)))
        for p in packages
    )
    return found, unknown


@dataclass(frozen=True)
class FetchPlan:
    """What ``fetch`` downloads, and where it lands."""

    aotriton: AotritonSet | None
    llvm: Download | None
    llvm_cache: Path
    llvm_dir: Path | None
    aotriton_cache: Path
    notes: tuple[str, ...] = ()
    packages: tuple[TritonPackage, ...] = ()

    @property
    def nothing_to_do(self) -> bool:
        aot = self.aotriton is None or self.aotriton.present
        llvm = self.llvm is None or self.llvm_dir is not None
        return aot and llvm and all(p.folder is not None for p in self.packages)

    def as_json(self) -> dict[str, Any]:
        aot = self.aotriton
        return {
            "aotriton": None
            if aot is None
            else {
                "version": aot.version,
                "prefix": str(aot.prefix),
                "present": aot.present,
                "downloads": [_download_json(d) for d in aot.downloads],
            },
            "llvm": None
            if self.llvm is None
            else {**_download_json(self.llvm), "folder": str(self.llvm_dir or "")},
            "triton_packages": [
                {
                    **_download_json(p.package.download),
                    "syspath": p.package.syspath,
                    "folder": str(p.folder or ""),
                }
                for p in self.packages
            ],
            "notes": list(self.notes),
        }


def _download_json(d: Download) -> dict[str, str]:
    return {"what": d.what, "url": mask_url(d.url), "sha256": d.sha256}


_CACHE_HINT = "or point XDG_CACHE_HOME at a folder of your own"


def plan(
    what: Sequence[str],
    *,
    torch_source: Path,
    triton_source: Path,
    tree: RocmTree | None,
    targets: Sequence[str],
    env: Mapping[str, str],
    work_dir: Path,
    llvm_url: str = "",
) -> FetchPlan:
    """What to fetch of ``what`` (``aotriton``, ``llvm``); a checkout that is missing is one
    line naming the checkout command."""
    unknown = [w for w in what if w not in WHAT]
    if unknown:
        msg = f"fetch --what: unknown {', '.join(unknown)} (known: {', '.join(WHAT)})"
        raise ConfigError(msg)
    aot_cache, llvm_cache = aotriton_cache_dir(env, work_dir), llvm_cache_dir(env, work_dir)
    # The rule of every cache: links planted in a folder others may write to could make the
    # build take what is not the download (locks.check_cache_folder; exit 14).
    shared = [(aot_cache.parent, "download cache")] if aot_cache.parent.name == "rocm-build" else []
    for folder, what_ in [*shared, (aot_cache, "aotriton cache"), (llvm_cache, "LLVM cache")]:
        locks.check_cache_folder(folder, what_, _CACHE_HINT)
    aot = None
    notes = []
    if "aotriton" in what:
        if tree is None:
            raise ConfigError("fetch aotriton needs the ROCm tree: pass --rocm")
        aot = aotriton_set(_checkout(torch_source, "torch"), tree, targets, env, aot_cache)
        if aot is None:
            notes.append(f"torch's checkout has no {aotritoncmake.AOTRITON_CMAKE}: no aotriton")
    llvm, llvm_dir = None, None
    packages: tuple[TritonPackage, ...] = ()
    if "llvm" in what:
        source = _checkout(triton_source, "triton")
        found = triton_llvm(source, env, llvm_cache, llvm_url)
        if found is None:
            notes.append(f"Triton's checkout has no {llvmpin.LLVM_PIN}: no LLVM pin")
        else:
            llvm, llvm_dir = found
        packages, others = triton_packages(source, llvm_cache)
        notes.extend(unknown_note(v) for v in others)
    return FetchPlan(aot, llvm, llvm_cache, llvm_dir, aot_cache, tuple(notes), packages)


def unknown_note(variable: str) -> str:
    return (
        f"Triton's setup.py reads {variable}, a download rocm-build does not fetch: set it "
        "(build_env) to a folder of that package for an offline build"
    )


def _checkout(source: Path, name: str) -> Path:
    if not source.is_dir():
        msg = (
            f"no checkout of {name} at {source}; run 'rocm-build checkout {name}' or pass --src-dir"
        )
        raise ConfigError(msg)
    return source


@dataclass(frozen=True)
class FetchResult:
    aotriton_prefix: Path | None
    llvm_dir: Path | None
    fetched: tuple[str, ...]
    package_dirs: tuple[tuple[str, Path], ...] = ()  # (``*_SYSPATH``, folder)

    @property
    def nothing_to_do(self) -> bool:
        return not self.fetched

    def as_json(self) -> dict[str, Any]:
        return {
            "aotriton_prefix": str(self.aotriton_prefix or ""),
            "llvm_dir": str(self.llvm_dir or ""),
            "triton_packages": {name: str(folder) for name, folder in self.package_dirs},
            "fetched": list(self.fetched),
        }


def _get(d: Download, cache: Path, show: Show | None) -> Path:
    update, close = show(d.url) if show else (None, lambda: None)
    folder = distfetch.cache_folder(d.url, cache)
    try:
        return distfetch.fetch(
            d.url,
            cache_dir=cache,
            sha256=d.sha256,
            progress=update,
            resume=False,
            max_bytes=MAX_BYTES,
        )
    except (FetchError, UnsafeInput, FileAccessError):
        _drop(folder)
        raise
    finally:
        close()


def _drop(folder: Path) -> None:
    """A failed download keeps nothing: its folder goes unless an earlier good one is in it
    (the stamp), and only when it is a folder of this user's (``statefile.check_folder``)."""
    if statefile.check_folder(folder, "download cache folder") is None:
        return
    if statefile.check(folder / "done.json", "download cache stamp") is None:
        shutil.rmtree(folder)


def execute(plan: FetchPlan, show: Show | None = None) -> FetchResult:
    """Download, check and unpack what the plan names; assemble the aotriton prefix."""
    fetched: list[str] = []
    prefix = None
    if plan.aotriton is not None:
        aot = plan.aotriton
        prefix = aot.prefix
        if not aot.present:
            statefile.own_folder(plan.aotriton_cache, "aotriton cache")
            trees = [_get(d, plan.aotriton_cache / "downloads", show) for d in aot.downloads]
            _assemble(aot, trees)
            fetched += [d.what for d in aot.downloads]
    llvm_dir = plan.llvm_dir
    if plan.llvm is not None and llvm_dir is None:
        statefile.own_folder(plan.llvm_cache, "LLVM cache")
        llvm_dir = _get_first_seen(plan.llvm, plan.llvm_cache, show, LLVM_MARKER)
        fetched.append(plan.llvm.what)
    dirs = []
    for p in plan.packages:
        folder = p.folder
        if folder is None:
            statefile.own_folder(plan.llvm_cache, "LLVM cache")
            folder = _get_first_seen(p.package.download, plan.llvm_cache, show, p.package.marker)
            fetched.append(p.package.download.what)
        dirs.append((p.package.syspath, folder))
    return FetchResult(prefix, llvm_dir, tuple(fetched), tuple(dirs))


def _get_first_seen(d: Download, cache: Path, show: Show | None, marker: str) -> Path:
    """``_get`` of an archive with no published hash: checked against the sha256 of its first
    download (recorded then), and against the file that marks what it is."""
    record = _first_seen(cache)
    key = mask_url(d.url)
    first = record.get(key, "")
    try:
        tree = _get(replace(d, sha256=first), cache, show)
    except FetchError as exc:
        if first and f", expected {first};" in str(exc):
            msg = (
                f"{d.name} from {key} is not the archive first downloaded from there (its sha256 "
                f"is in {cache / FIRST_SEEN}); nothing was kept: if it was replaced on purpose, "
                "delete its line there and fetch again"
            )
            raise FetchError(msg) from None
        raise
    folder = distfetch.cache_folder(d.url, cache)
    if not (tree / marker).is_file():
        if statefile.check_folder(folder, "download cache folder") is not None:
            shutil.rmtree(folder)
        msg = (
            f"{d.name} from {key} holds no {marker}, so it is not {d.what} as Triton's build "
            "uses it; nothing was kept: check the URL"
        )
        raise FetchError(msg)
    if not first:
        stamp = statefile.read_json(folder / "done.json", "download cache stamp")
        record[key] = str(stamp["sha256"])
        statefile.write_json(cache / FIRST_SEEN, record, _FIRST_WHAT)
    return tree


def _link_or_copy(src: str, dst: str) -> object:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)
    return dst


def _assemble(aot: AotritonSet, trees: Sequence[Path]) -> None:
    """The runtime and the images as one prefix, made under a temporary name and renamed into
    place; the files are hard links to the unpacked downloads where the disk allows."""
    parent = aot.prefix.parent
    tempfiles.sweep(parent)
    with tempfiles.folder(parent, aot.prefix.name) as tmp:
        for tree in trees:
            shutil.copytree(
                tree, tmp, symlinks=True, copy_function=_link_or_copy, dirs_exist_ok=True
            )
        if not any((tmp / "lib").glob("libaotriton_v2.so*")):
            msg = f"{aot.runtime.name} holds no lib/libaotriton_v2.so*; check the URL"
            raise FetchError(msg)
        if statefile.check_folder(aot.prefix, "aotriton prefix") is not None:
            shutil.rmtree(aot.prefix)
        tmp.rename(aot.prefix)
    statefile.write_json(_stamp(aot.prefix), {"pieces": _pieces(aot)}, _STAMP)
