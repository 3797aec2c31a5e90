"""What a Triton checkout's build downloads: the LLVM of ``cmake/llvm-hash.txt`` for the host
(``get_llvm_package_info``), and the packages its ``setup.py`` (``get_thirdparty_packages``)
fetches besides: nlohmann JSON for proton (``get_json_package_info``) and, on older
releases, pybind11 (``get_pybind11_package_info``).

Triton reads the pin's first 8 characters and downloads
``https://oaitriton.blob.core.windows.net/public/llvm-builds/llvm-<rev8>-<system>.tar.gz``,
``<system>`` being ``ubuntu-x64`` (glibc above 2.28), ``almalinux-x64`` (above 2.17),
``centos-x64``, or ``ubuntu-arm64`` on aarch64; the archive's single top folder is that name,
with LLVM's ``bin``, ``include`` and ``lib``. JSON is
``https://github.com/nlohmann/json/releases/download/v3.11.3/include.zip`` (a literal in
``setup.py``; some forks read the tag from ``cmake/json-version.txt``), a zip whose top folder
is ``include/`` (``include/nlohmann/json.hpp``). pybind11 is GitHub's archive of the tag in
``cmake/pybind11-version.txt``,
``https://github.com/pybind/pybind11/archive/refs/tags/v<version>.tar.gz``, whose single top
folder ``pybind11-<version>`` holds ``include/pybind11``; later releases take pybind11
from the build venv's ``pybind11`` package instead (no download). The build uses the folders
named by ``LLVM_SYSPATH``, ``JSON_SYSPATH`` and ``PYBIND11_SYSPATH`` instead of downloading
(it passes ``<folder>/include``), and ``TRITON_OFFLINE_BUILD=1`` (where ``setup.py`` has
``is_offline_build``) refuses any download: a package whose variable is unset stops the
build, and NVIDIA's toolchain (``download_and_copy``: ptxas, cuobjdump, nvdisasm, CUDA headers,
CUPTI), which its ``setup.py`` otherwise downloads even for a ROCm build, is skipped. Triton
publishes no checksum for any of these archives: ``building.prefetch`` records the sha256 of
the first download of each URL and checks every later download and use against it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from rocm_build.common.errors import ConfigError
from rocm_build.repo import checkoutfile
from rocm_build.repo.aotritoncmake import Download

__all__ = [
    "JSON_DEFAULT_URL",
    "LLVM_BASE_URL",
    "LLVM_PIN",
    "PYBIND11_DEFAULT_URL",
    "PYBIND11_DEFAULT_VERSION",
    "SETUP_PY",
    "Package",
    "host_suffix",
    "llvm_download",
    "read_pin",
    "read_setup",
    "setup_packages",
]

LLVM_PIN = "cmake/llvm-hash.txt"
LLVM_BASE_URL = "https://oaitriton.blob.core.windows.net/public/llvm-builds/"


def read_pin(checkout: Path) -> str | None:
    """The LLVM commit a Triton checkout pins, or None when it has no pin file; a file that
    is not one commit hash is one line, exit 2."""
    text = checkoutfile.read_text(checkout, LLVM_PIN, "Triton's LLVM pin")
    if text is None:
        return None
    rev = text.strip()
    if not re.fullmatch(r"[0-9a-f]{8,40}", rev):
        shown = rev[:40].encode("ascii", "replace").decode() if rev else "nothing"
        msg = (
            f"{checkout / LLVM_PIN} holds '{shown}', not an LLVM commit hash; "
            "check the Triton checkout out again"
        )
        raise ConfigError(msg)
    return rev


def host_suffix(machine: str, glibc: str) -> str:
    """Triton's name for the host's LLVM build (``get_llvm_package_info``)."""
    arch = {"x86_64": "x64", "arm64": "arm64", "aarch64": "arm64"}.get(machine, machine)
    if arch == "arm64":
        return "ubuntu-arm64"
    if arch != "x64":
        msg = f"Triton publishes no LLVM build for {machine}; build LLVM and set LLVM_SYSPATH"
        raise ConfigError(msg)
    parts = [int(p) for p in re.findall(r"\d+", glibc)[:2]] or [0, 0]
    level = parts[0] * 100 + (parts[1] if len(parts) > 1 else 0)
    if level > 228:
        return "ubuntu-x64"
    return "almalinux-x64" if level > 217 else "centos-x64"


def llvm_download(rev: str, suffix: str, base_url: str = "") -> Download:
    """The archive of the pinned LLVM for the host (``base_url``: ``triton.llvm_url``, a
    mirror of Triton's folder)."""
    name = f"llvm-{rev[:8]}-{suffix}"
    base = base_url or LLVM_BASE_URL
    return Download(f"Triton's LLVM {rev[:8]}", name, f"{base.rstrip('/')}/{name}.tar.gz", "")


#: Triton's ``setup.py`` files: the checkout's root, or ``python/`` on older ROCm branches.
SETUP_PY = ("setup.py", "python/setup.py")
#: Where ``get_json_package_info`` names no URL rocm-build can read: released setup.py's one.
JSON_DEFAULT_URL = "https://github.com/nlohmann/json/releases/download/v3.11.3/include.zip"
#: ``get_pybind11_package_info``'s URL; ``{version}`` from ``cmake/pybind11-version.txt``.
PYBIND11_DEFAULT_URL = "https://github.com/pybind/pybind11/archive/refs/tags/v{version}.tar.gz"
PYBIND11_DEFAULT_VERSION = "2.13.1"


@dataclass(frozen=True)
class Package:
    """A package Triton's ``setup.py`` downloads (``get_thirdparty_packages``) and the variable
    that points its build at a folder instead: ``<folder>/include`` is passed to CMake."""

    syspath: str  # "JSON_SYSPATH"
    download: Download
    marker: str  # a file the unpacked folder must hold: "include/nlohmann/json.hpp"


@dataclass(frozen=True)
class _Kind:
    function: str
    syspath: str
    label: str
    marker: str
    default_url: str
    default_version: str


_KINDS = (
    _Kind(
        "get_json_package_info",
        "JSON_SYSPATH",
        "Triton's nlohmann JSON",
        "include/nlohmann/json.hpp",
        JSON_DEFAULT_URL,
        "",
    ),
    _Kind(
        "get_pybind11_package_info",
        "PYBIND11_SYSPATH",
        "Triton's pybind11",
        "include/pybind11/pybind11.h",
        PYBIND11_DEFAULT_URL,
        PYBIND11_DEFAULT_VERSION,
    ),
)


def read_setup(checkout: Path) -> tuple[Path, str] | None:
    """The Triton checkout's ``setup.py`` (its path and text), or None when it has none."""
    for rel in SETUP_PY:
        text = checkoutfile.read_text(checkout, rel, "Triton's setup.py")
        if text is not None:
            return checkout / rel, text
    return None


def setup_packages(checkout: Path) -> tuple[tuple[Package, ...], tuple[str, ...]]:
    """The packages the checkout's ``setup.py`` downloads that rocm-build can fetch, and the
    other ``*_SYSPATH`` variables it reads (``LLVM_SYSPATH`` aside) whose download rocm-build
    does not know: with those unset, ``TRITON_OFFLINE_BUILD`` would stop its build. pybind11
    from the build venv's ``pybind11`` package (``pybind11.get_include``) is no download."""
    found = read_setup(checkout)
    if found is None:
        return (), ()
    path, text = found
    try:
        module = ast.parse(text, str(path))
    except (SyntaxError, ValueError) as exc:
        msg = (
            f"{path} is not Python rocm-build can read ({exc}); check the Triton checkout out again"
        )
        raise ConfigError(msg) from None
    functions = {
        n.name: n for n in ast.walk(module) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    packages = []
    for kind in _KINDS:
        fn = functions.get(kind.function)
        if fn is not None:
            url = _url(fn, checkout, kind) or kind.default_url.format(version=kind.default_version)
            name = url.rstrip("/").rsplit("/", 1)[-1]
            packages.append(Package(kind.syspath, Download(kind.label, name, url, ""), kind.marker))
    covered = {p.syspath for p in packages} | {"LLVM_SYSPATH"}
    if "pybind11.get_include" in text:
        covered.add("PYBIND11_SYSPATH")
    named = sorted(set(re.findall(r"\b([A-Z0-9_]+_SYSPATH)\b", text)) - covered)
    return tuple(packages), tuple(named)


def _url(fn: ast.AST, checkout: Path, kind: _Kind) -> str | None:
    """The URL string in ``fn``: a literal, or an f-string whose ``{version}`` is the text of
    the ``cmake/*-version.txt`` file the function reads."""
    strings = [n.value for n in ast.walk(fn) if isinstance(n, ast.Constant)]
    files = [s for s in strings if isinstance(s, str) and s.endswith("-version.txt")]
    for node in ast.walk(fn):
        if isinstance(node, ast.Constant) and str(node.value).startswith(("http://", "https://")):
            return str(node.value)
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                if isinstance(value, ast.Constant):
                    parts.append(str(value.value))
                elif (
                    isinstance(value, ast.FormattedValue)
                    and isinstance(value.value, ast.Name)
                    and value.value.id == "version"
                ):
                    parts.append(_version(checkout, files, kind))
                else:
                    break
            else:
                if parts and parts[0].startswith(("http://", "https://")):
                    return "".join(parts)
    return None


def _version(checkout: Path, files: list[str], kind: _Kind) -> str:
    if not files:
        return kind.default_version
    rel = f"cmake/{files[0]}"
    text = checkoutfile.read_text(checkout, rel, f"{kind.label}'s version file")
    version = (text or "").strip()
    if not re.fullmatch(r"v?[0-9][0-9A-Za-z._+-]{0,40}", version):
        shown = version[:40].encode("ascii", "replace").decode() if version else "nothing"
        msg = (
            f"{checkout / rel} holds '{shown}', not a version, and Triton's setup.py "
            f"({kind.function}) reads it; check the Triton checkout out again"
        )
        raise ConfigError(msg)
    return version
