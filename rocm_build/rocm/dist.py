"""The ROCm tree a build uses: discovery, version, validation, targets, the build environment,
and downloading a tree from a URL.

Three layouts are the same tree for our purposes: a TheRock dist tree (``build/dist/rocm``), an
``/opt/rocm``-style install, and the ``_rocm_sdk_devel`` folder that the ``rocm[devel]`` wheel
expands to. The tree is read-only input: nothing here writes into it.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from rocm_build.common import arch
from rocm_build.common.errors import RocmTreeError
from rocm_build.common.treepath import denied, reading
from rocm_build.config.loader import ProjectSpec
from rocm_build.rocm.distfetch import (
    DOWNLOAD_RETRIES,
    Progress,
    _split_url,
    cached,
    download_cache_dir,
    fetch,
)

__all__ = [
    "DEFAULT_ROOT",
    "DOWNLOAD_RETRIES",
    "LEAKY_PREFIXES",
    "Progress",
    "RocmTree",
    "TreeCheck",
    "_split_url",
    "cached",
    "compose_env",
    "download_cache_dir",
    "fetch",
    "find_tree",
    "has_cmake_package",
    "is_url",
    "join_values",
    "local_version_label",
    "open_tree",
    "read_tree_version",
    "require_valid",
    "rocm_label_version",
    "validate",
]

log = logging.getLogger(__name__)

DEFAULT_ROOT = Path("/opt/rocm")
#: Variables of another ROCm or CUDA setup that would steer a build away from the chosen tree.
LEAKY_PREFIXES = ("ROCM_", "HIP_", "CUDA_", "HSA_", "NVCC_")
LEAKY_NAMES = frozenset({"CUDACXX", "CUDAHOSTCXX", "HIPCXX", "HIPFLAGS"})
# Variables whose user value is kept and extended rather than replaced.
EXTENDED_PATHS = ("PATH", "CMAKE_PREFIX_PATH", "LD_LIBRARY_PATH", "PKG_CONFIG_PATH")
EXTENDED_FLAGS = ("CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS")

_DEVICE_LIB_DIRS = ("lib/llvm/amdgcn/bitcode", "amdgcn/bitcode", "llvm/amdgcn/bitcode")
_CLANG_DIRS = ("lib/llvm/bin", "llvm/bin")
_SDK_DEVEL = "_rocm_sdk_devel"


def is_url(value: str) -> bool:
    return urlparse(value).scheme in ("http", "https", "file")


#: The stamp ``rocm debian`` writes into a tree it assembled (``debtree``).
DEBIAN_STAMP = ".rocm-build-debtree.json"
#: Each layout, in the words ``doctor`` shows.
LAYOUT_WORDS = {
    "therock": "a TheRock tree",
    "debian": "assembled from Debian packages by rocm-build rocm debian",
    "opt-rocm": "an /opt/rocm-style install",
    "rocm-sdk-devel": "the rocm[devel] wheel's tree",
}


@dataclass(frozen=True)
class RocmTree:
    """Facts about one ROCm tree, read once."""

    root: Path
    layout: str  # "therock" | "debian" | "opt-rocm" | "rocm-sdk-devel" (see LAYOUT_WORDS)
    version: str  # "" when no version file was found
    version_source: str
    clang_dir: Path | None
    hipcc: Path | None
    device_lib_dir: Path | None
    declared_targets: tuple[str, ...] | None  # share/therock/dist_info.json, when present
    bitcode_targets: tuple[str, ...]  # from oclc_isa_version_<N>.bc in the device-lib dir

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"

    @property
    def sysdeps_dir(self) -> Path | None:
        path = self.root / "lib" / "rocm_sysdeps"
        return path if path.is_dir() else None

    def supports(self, target: str) -> bool:
        base = arch.base_name(target)
        if self.declared_targets is not None:
            return base in self.declared_targets
        return base in self.bitcode_targets

    @property
    def targets_source(self) -> str:
        if self.declared_targets is not None:
            return "share/therock/dist_info.json"
        return "device-library bitcode"


@dataclass(frozen=True)
class TreeCheck:
    """Validation result: every problem at once, plus warnings that do not block a build."""

    tree: RocmTree
    problems: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


def _sdk_devel_root(path: Path) -> Path | None:
    """``path`` itself, or the ``_rocm_sdk_devel*`` folder inside a site-packages folder or a
    virtual environment where the ``rocm[devel]`` wheel is installed."""
    if path.name.startswith(_SDK_DEVEL):
        return path
    if not path.is_dir():
        return None
    for pattern in (f"{_SDK_DEVEL}*", f"lib/python3*/site-packages/{_SDK_DEVEL}*"):
        found = sorted(p for p in path.glob(pattern) if p.is_dir())
        if found:
            return found[0]
    for pattern in ("rocm_sdk_devel", "lib/python3*/site-packages/rocm_sdk_devel"):
        if any(p.is_dir() for p in path.glob(pattern)):
            # The wheel ships the tree as an archive, expanded on first use.
            msg = (
                f"the rocm[devel] wheel in {path} is not expanded yet; run 'rocm-sdk path --root' "
                "with that Python once, then pass --rocm again"
            )
            raise RocmTreeError(msg)
    return None


def find_tree(setting: str) -> Path:
    """The tree folder from the resolved ``rocm`` setting (``--rocm``, then ``ROCM_PATH`` /
    ``ROCM_HOME`` through config's aliases, then the config file), else ``/opt/rocm``. URLs are
    fetched by the caller first."""
    with reading("the ROCm tree"):
        return _find_tree(setting)


def _find_tree(setting: str) -> Path:
    if setting:
        path = Path(setting).expanduser()
        if not path.exists():
            msg = f"ROCm tree {path} does not exist; pass --rocm DIR (or a URL of a tarball)"
            raise RocmTreeError(msg)
        return _sdk_devel_root(path) or path
    if DEFAULT_ROOT.exists():
        return DEFAULT_ROOT
    msg = (
        "no ROCm tree: pass --rocm DIR (a TheRock dist tree, /opt/rocm-style install or "
        "_rocm_sdk_devel folder), --rocm URL, or set ROCM_PATH"
    )
    raise RocmTreeError(msg)


def _read_version(root: Path) -> tuple[str, str]:
    info = root / ".info" / "version"
    if info.is_file():
        text = info.read_text(encoding="utf-8", errors="replace").strip()
        match = re.match(r"\d+(\.\d+)+", text)
        if match:
            return match.group(0), ".info/version"
    header = root / "include" / "rocm-core" / "rocm_version.h"
    if header.is_file():
        found = _defines(header.read_text(encoding="utf-8", errors="replace"), "ROCM_VERSION_")
        if "MAJOR" in found and "MINOR" in found:
            patch = found.get("PATCH", "0")
            return f"{found['MAJOR']}.{found['MINOR']}.{patch}", "include/rocm-core/rocm_version.h"
    header = root / "include" / "hip" / "hip_version.h"
    if header.is_file():
        found = _defines(header.read_text(encoding="utf-8", errors="replace"), "HIP_VERSION_")
        if "MAJOR" in found and "MINOR" in found:
            # HIP_VERSION_PATCH is a build number, not the release's patch level.
            return f"{found['MAJOR']}.{found['MINOR']}", "include/hip/hip_version.h"
    return "", ""


def read_tree_version(root: Path) -> str:
    """The ROCm version of the tree at ``root`` ("" when nothing in it says)."""
    return _read_version(root)[0]


def _defines(text: str, prefix: str) -> dict[str, str]:
    pattern = re.compile(rf"^\s*#\s*define\s+{prefix}(MAJOR|MINOR|PATCH)\s+(\d+)", re.MULTILINE)
    return {m.group(1): m.group(2) for m in pattern.finditer(text)}


def _declared_targets(root: Path) -> tuple[str, ...] | None:
    info = root / "share" / "therock" / "dist_info.json"
    if not info.is_file():
        return None
    try:
        raw = json.loads(info.read_text(encoding="utf-8")).get("dist_amdgpu_targets")
    except (json.JSONDecodeError, AttributeError):
        log.warning("%s is not valid JSON; using the device-library bitcode instead", info)
        return None
    if raw is None:
        return None
    names = arch.split_arch(raw if isinstance(raw, str) else [str(x) for x in raw])
    return tuple(dict.fromkeys(arch.base_name(n).lower() for n in names))


def _bitcode_targets(device_lib_dir: Path | None) -> tuple[str, ...]:
    if device_lib_dir is None:
        return ()
    # Newer device libraries add family targets (oclc_isa_version_9-4-generic.bc): not gfx names.
    names = [
        "gfx" + path.name[len("oclc_isa_version_") : -len(".bc")]
        for path in device_lib_dir.glob("oclc_isa_version_*.bc")
    ]
    names = [n for n in names if re.fullmatch(r"gfx[0-9a-f]+", n)]
    return tuple(sorted(names, key=lambda n: (len(n), n)))


#: Folders of a tree whose contents validation looks at; a listing this user may not read would
#: look like a missing part, so it is refused as a permission problem instead.
_READ_DIRS = ("", "lib", "bin", "include", "lib/llvm/bin", "llvm/bin", ".info", *_DEVICE_LIB_DIRS)


def _require_readable(root: Path) -> None:
    for rel in _READ_DIRS:
        folder = root / rel if rel else root
        if folder.is_dir() and not os.access(folder, os.R_OK | os.X_OK):
            raise denied(PermissionError(13, "Permission denied", str(folder)), "the ROCm tree")


def open_tree(root: Path) -> RocmTree:
    """Read the facts of the tree at ``root`` (no validation: see ``validate``)."""
    with reading("the ROCm tree"):
        return _open_tree(root)


def _open_tree(root: Path) -> RocmTree:
    root = root.resolve()
    _require_readable(root)
    if root.name.startswith(_SDK_DEVEL):
        layout = "rocm-sdk-devel"
    elif (root / DEBIAN_STAMP).is_file():  # TheRock's arrangement, of Debian's packages
        layout = "debian"
    elif (root / "share" / "therock").is_dir() or (root / "lib" / "llvm").is_dir():
        layout = "therock"
    else:
        layout = "opt-rocm"
    version, version_source = _read_version(root)
    clang_dir = next((root / d for d in _CLANG_DIRS if (root / d / "clang").exists()), None)
    hipcc = root / "bin" / "hipcc"
    device_lib_dir = next(
        (root / d for d in _DEVICE_LIB_DIRS if any((root / d).glob("*.bc"))), None
    )
    return RocmTree(
        root=root,
        layout=layout,
        version=version,
        version_source=version_source,
        clang_dir=clang_dir,
        hipcc=hipcc if hipcc.exists() else None,
        device_lib_dir=device_lib_dir,
        declared_targets=_declared_targets(root),
        bitcode_targets=_bitcode_targets(device_lib_dir),
    )


def has_cmake_package(tree: RocmTree, package: str) -> bool:
    """Whether the tree has the CMake package's config folder (any case, as CMake finds it)."""
    return _has_cmake_package(tree.root, package)


def _has_cmake_package(root: Path, package: str) -> bool:
    for base in (root / "lib" / "cmake", root / "lib64" / "cmake", root / "share" / "cmake"):
        if not base.is_dir():
            continue
        for child in base.iterdir():
            if child.is_dir() and child.name.lower() == package.lower():
                return True
    return False


def _has_optional(root: Path, package: str) -> bool:
    """A CMake package, ``lib:NAME`` (``lib/libNAME.so*``), or several joined by `` or ``
    (any one will do: Kineto traces through rocprofiler-sdk on ROCm 7, roctracer before)."""
    if " or " in package:
        return any(_has_optional(root, p.strip()) for p in package.split(" or "))
    if package.startswith("lib:"):
        return any((root / "lib").glob(f"lib{package[4:]}.so*"))
    return _has_cmake_package(root, package)


def _tree_links(root: Path, spec: ProjectSpec) -> list[str]:
    """What the project's build links because the tree has it (``tree_links``)."""
    out = []
    for entry in spec.tree_links:
        path, what, setting = (*(p.strip() for p in entry.split("|")), "", "")[:3]
        if path and (root / path).exists():
            text = f"{spec.name}: {path} is in the tree, so the build links {what or path}"
            out.append(text + (f" ({setting} leaves it out)" if setting else ""))
    return out


def validate(tree: RocmTree, projects: Sequence[ProjectSpec], targets: Sequence[str]) -> TreeCheck:
    """Check everything a build of ``projects`` for ``targets`` needs; report every problem.
    A part this user may not read is a ``FileAccessError``, not a missing part."""
    with reading("the ROCm tree"):
        _require_readable(tree.root)
        return _validate(tree, projects, targets)


def _validate(tree: RocmTree, projects: Sequence[ProjectSpec], targets: Sequence[str]) -> TreeCheck:
    problems: list[str] = []
    warnings: list[str] = []
    if not tree.version:
        problems.append(
            "no ROCm version (.info/version, include/rocm-core/rocm_version.h or "
            "include/hip/hip_version.h)"
        )
    if tree.clang_dir is None:
        problems.append("no ROCm clang (lib/llvm/bin/clang)")
    if tree.hipcc is None:
        warnings.append(
            "no bin/hipcc: builds that compile through hipcc (torch.utils.cpp_extension) need it"
        )
    if tree.device_lib_dir is None:
        problems.append("no device libraries (lib/llvm/amdgcn/bitcode/*.bc)")
    if not any(tree.lib_dir.glob("libamdhip64.so*")):
        problems.append("no HIP runtime (lib/libamdhip64.so)")
    for spec in projects:
        missing = [p for p in spec.cmake_packages if not _has_cmake_package(tree.root, p)]
        if missing:
            problems.append(
                f"{spec.name} needs CMake packages missing from lib/cmake: {', '.join(missing)}"
            )
    for spec in projects:
        for entry in spec.optional_cmake_packages:
            package, feature, setting = (*(p.strip() for p in entry.split("|")), "", "")[:3]
            if not _has_optional(tree.root, package):
                text = f"{spec.name}: {package} is missing, so the build leaves out "
                text += feature or "a feature"
                warnings.append(text + (f"; turn it off with {setting}" if setting else ""))
    for spec in projects:
        warnings += _tree_links(tree.root, spec)
    unsupported = [t for t in targets if not tree.supports(t)]
    if unsupported:
        have = tree.declared_targets if tree.declared_targets is not None else tree.bitcode_targets
        problems.append(
            f"cannot target {', '.join(unsupported)} (the tree's {tree.targets_source} lists "
            f"{', '.join(have) or 'no targets'})"
        )
    return TreeCheck(tree=tree, problems=tuple(problems), warnings=tuple(warnings))


def require_valid(check: TreeCheck) -> None:
    """Raise one ``RocmTreeError`` naming every problem."""
    if check.ok:
        return
    count = len(check.problems)
    msg = (
        f"ROCm tree {check.tree.root} has {count} problem{'s' if count > 1 else ''}: "
        + "; ".join(check.problems)
        + "; pass --rocm with a complete tree (rocm-build doctor shows the details)"
    )
    raise RocmTreeError(msg)


def rocm_label_version(tree_version: str) -> str:
    """The ROCm version as PyTorch's wheels name it in their label: major.minor (``7.14.0`` and
    ``7.14.0a20260801`` -> ``7.14``, as in ``torch-2.7.1+rocm6.3`` and
    ``torch-2.13.0.dev+rocm7.2``); a version without a minor number as it is."""
    match = re.match(r"(\d+)\.(\d+)", tree_version)
    return f"{match.group(1)}.{match.group(2)}" if match else tree_version


def local_version_label(tree_version: str, suffix: str) -> str:
    """The ``+...`` part added to project versions: ``suffix`` if given, the user's as written
    (``{rocm}`` in it: the tree's ROCm version as :func:`rocm_label_version` gives it), else
    ``+rocm<major.minor>`` as PyTorch writes it."""
    short = rocm_label_version(tree_version)
    if suffix:
        suffix = suffix.replace("{rocm}", short)
        return suffix if suffix.startswith("+") else "+" + suffix
    return f"+rocm{short}" if short else "+rocm"


def join_values(*parts: str | None, sep: str = os.pathsep) -> str:
    """Search paths joined without duplicates (first one wins); flags (``sep=" "``) are
    concatenated as given, since repeating a flag can be meaningful."""
    if sep == " ":
        return " ".join(p.strip() for p in parts if p and p.strip())
    seen: list[str] = []
    for part in parts:
        for item in (part or "").split(sep):
            if item and item not in seen:
                seen.append(item)
    return sep.join(seen)


@dataclass(frozen=True)
class ComposedEnv:
    """The environment for one build, with what was set, extended and removed."""

    env: Mapping[str, str]
    changed: Mapping[str, str]
    removed: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())


def compose_env(
    base: Mapping[str, str],
    *,
    tree: RocmTree,
    targets: Sequence[str],
    jobs: int,
    versions: Mapping[str, str] = {},
    extra: Mapping[str, str] = {},
    path_prepend: Sequence[Path] = (),
) -> ComposedEnv:
    """The build environment: ``base`` (the user's), without variables of another ROCm/CUDA
    setup, plus the tree's variables. The user's search paths and compiler flags are extended,
    never replaced. ``extra`` (project settings, compiler cache) is applied last."""
    env = dict(base)
    removed = sorted(
        k for k in env if k.startswith(LEAKY_PREFIXES) and not k.startswith("ROCM_BUILD_")
    )
    removed += sorted(k for k in env if k in LEAKY_NAMES)
    for key in removed:
        del env[key]
    root = str(tree.root)
    ours: dict[str, str] = {
        "ROCM_PATH": root,
        "ROCM_HOME": root,
        "HIP_PATH": root,
        "HIP_PLATFORM": "amd",  # hipcc picks NVIDIA when it finds CUDA otherwise
        "PYTORCH_ROCM_ARCH": ";".join(targets),
        "USE_ROCM": "1",
        "USE_CUDA": "0",
        "FORCE_CUDA": "1",
        "BUILD_TEST": "0",
        "MAX_JOBS": str(jobs),
        "CMAKE_BUILD_PARALLEL_LEVEL": str(jobs),
    }
    if tree.clang_dir is not None:
        ours["HIP_CLANG_PATH"] = str(tree.clang_dir)
    if tree.device_lib_dir is not None:
        # clang's own search for device libraries goes wrong when ROCM_PATH is set.
        ours["HIP_DEVICE_LIB_PATH"] = str(tree.device_lib_dir)
    ours.update(versions)
    paths = [str(p) for p in path_prepend] + [str(tree.root / "bin")]
    ours["PATH"] = join_values(*paths, base.get("PATH"))
    ours["CMAKE_PREFIX_PATH"] = join_values(root, base.get("CMAKE_PREFIX_PATH"))
    lib_paths = [str(tree.lib_dir)]
    sysdeps = tree.sysdeps_dir
    if sysdeps is not None:
        lib_paths.append(str(sysdeps / "lib"))
    ours["LD_LIBRARY_PATH"] = join_values(*lib_paths, base.get("LD_LIBRARY_PATH"))
    if sysdeps is not None:
        # TheRock ships libdrm's headers here; kfd_ioctl.h includes them.
        ours["CFLAGS"] = join_values(base.get("CFLAGS"), f"-I{sysdeps / 'include'}", sep=" ")
        ours["CXXFLAGS"] = join_values(base.get("CXXFLAGS"), f"-I{sysdeps / 'include'}", sep=" ")
        ours["LDFLAGS"] = join_values(base.get("LDFLAGS"), f"-L{sysdeps / 'lib'}", sep=" ")
    for key, value in extra.items():
        if key in EXTENDED_PATHS:
            ours[key] = join_values(value, ours.get(key, base.get(key)))
        elif key in EXTENDED_FLAGS:
            ours[key] = join_values(ours.get(key, base.get(key)), value, sep=" ")
        else:
            ours[key] = value
    env.update(ours)
    changed = {k: v for k, v in sorted(ours.items()) if base.get(k) != v}
    return ComposedEnv(env=env, changed=changed, removed=tuple(removed))
