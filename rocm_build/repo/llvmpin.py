"""The LLVM a Triton checkout's build downloads: the pin in ``cmake/llvm-hash.txt`` and the
archive Triton's ``setup.py`` (``get_llvm_package_info``) names for the host.

Triton reads the pin's first 8 characters and downloads
``https://oaitriton.blob.core.windows.net/public/llvm-builds/llvm-<rev8>-<system>.tar.gz``,
``<system>`` being ``ubuntu-x64`` (glibc above 2.28), ``almalinux-x64`` (above 2.17),
``centos-x64``, or ``ubuntu-arm64`` on aarch64; the archive's single top folder is that name,
with LLVM's ``bin``, ``include`` and ``lib``. Its build uses a folder named by ``LLVM_SYSPATH``
instead of downloading, and ``TRITON_OFFLINE_BUILD=1`` refuses any download (every package's
``*_SYSPATH`` must then be set). Triton publishes no checksum for the archive: rocm-build records
the sha256 of the first download and checks the cached one against it.
"""

from __future__ import annotations

import re
from pathlib import Path

from rocm_build.common.errors import ConfigError
from rocm_build.repo import checkoutfile
from rocm_build.repo.aotritoncmake import Download

__all__ = [
    "LLVM_BASE_URL",
    "LLVM_PIN",
    "SYSPATH_PACKAGES",
    "host_suffix",
    "llvm_download",
    "read_pin",
]

LLVM_PIN = "cmake/llvm-hash.txt"
LLVM_BASE_URL = "https://oaitriton.blob.core.windows.net/public/llvm-builds/"
#: The packages Triton's setup.py downloads besides LLVM, by their ``*_SYSPATH`` variable.
SYSPATH_PACKAGES = ("JSON_SYSPATH", "PYBIND11_SYSPATH")


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
