"""Which Triton goes with a torch checkout: torch pins it in its own tree.

``.ci/docker/ci_commit_pins/triton.txt`` holds the commit of the Triton repository that torch's CI
builds, ``.ci/docker/triton_version.txt`` its version; a release build takes the branch
``release/X.Y.x`` of that version instead. The ``triton`` project's ref is read from these files in
the checked-out torch (``pinned_by``), after torch's checkout and before Triton's.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path

from rocm_build.common.errors import ConfigError
from rocm_build.config.schema import TritonSettings
from rocm_build.repo import checkoutfile

__all__ = [
    "PIN_FILE",
    "TRITON",
    "VERSION_FILE",
    "TritonPin",
    "check_platform",
    "origin",
    "read_pin",
]

TRITON = "triton"
PIN_FILE = ".ci/docker/ci_commit_pins/triton.txt"
VERSION_FILE = ".ci/docker/triton_version.txt"
_SHA = re.compile(r"[0-9a-f]{40}")
_VERSION = re.compile(r"(\d+)\.(\d+)(\.\d+)?([.+-]\S*)?")


@dataclass(frozen=True)
class TritonPin:
    ref: str  # a full commit SHA, or release/X.Y.x
    version: str  # torch's triton_version.txt
    source: str  # where the ref came from, for messages

    @property
    def release(self) -> bool:
        return self.ref.startswith("release/")


def origin(settings: TritonSettings) -> str:
    """The Triton repository the ``repo`` setting chooses."""
    return settings.fork_url if settings.repo == "fork" else settings.upstream_url


def check_platform(system: str | None = None) -> None:
    """Triton's AMD backend is Linux-only: asking for it elsewhere is a one-line error."""
    system = system or platform.system()
    if system != "Linux":
        msg = (
            f"the triton project is not supported on {system} (Triton's AMD backend is "
            "Linux-only); leave triton out of the projects"
        )
        raise ConfigError(msg)


def read_pin(torch_src: Path, *, release: bool, pinner: str = "torch") -> TritonPin:
    """The Triton ref torch's checkout at ``torch_src`` pins."""
    if not (torch_src / ".git").exists():
        msg = (
            f"triton's ref comes from {pinner}'s pin files, and {torch_src} is not checked "
            f"out; check out {pinner} first (rocm-build checkout {pinner} triton) or pass "
            "--ref triton=REF"
        )
        raise ConfigError(msg)
    version = _read(torch_src, VERSION_FILE, pinner)
    if release:
        match = _VERSION.fullmatch(version)
        if match is None:
            msg = (
                f"{pinner}'s {VERSION_FILE} holds {version!r}, not a Triton version; "
                "pass --ref triton=REF"
            )
            raise ConfigError(msg)
        branch = f"release/{match.group(1)}.{match.group(2)}.x"
        return TritonPin(branch, version, f"{pinner}'s {VERSION_FILE} ({version})")
    commit = _read(torch_src, PIN_FILE, pinner)
    if not _SHA.fullmatch(commit):
        msg = (
            f"{pinner}'s {PIN_FILE} holds {commit[:60]!r}, not a full commit SHA; "
            "pass --ref triton=REF"
        )
        raise ConfigError(msg)
    return TritonPin(commit, version, f"{pinner}'s {PIN_FILE}")


def _read(torch_src: Path, rel: str, pinner: str) -> str:
    text = (checkoutfile.read_text(torch_src, rel, f"{pinner}'s Triton pin file") or "").strip()
    if not text:
        msg = (
            f"the {pinner} checkout at {torch_src} has no Triton pin ({rel} is missing or "
            "empty); pass --ref triton=REF, or check out a torch that pins Triton"
        )
        raise ConfigError(msg)
    return text.splitlines()[0].strip()
