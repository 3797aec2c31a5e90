"""Building Triton beside torch: Triton first, then torch told to require exactly that wheel.

Triton versions itself: ``+git<sha>`` off release branches, then ``TRITON_WHEEL_VERSION_SUFFIX``
appended. Triton 3.6 and later turn the suffix's ``+`` into ``-`` when there is a ``+git`` part
(``get_triton_version_suffix``: TheRock's nightly wheels are ``3.4.0+git1234abcd-rocm7.0.0...``);
older Triton appends it as it is, and a second ``+`` makes an invalid version. So a release
branch gets the build's local label (``+rocm7.14``) and a checkout at torch's CI pin gets it as
one more local segment, ``.rocm7.14``, which every Triton appends to its ``+git<sha>``
(``3.5.0+git1234abcd.rocm7.14``): builds against two ROCm versions make wheels of two names, as
TheRock's do. Its version is read back from the wheel it made, never recomputed.

Where the branch has them, ``python/requirements.txt`` is installed first and ``python/setup.py``
builds the wheel (ROCm's older Triton branches keep both there; ``[projects.triton]
requirements`` and ``plan.build_dir``).

Torch's build gets the requirement through ``PYTORCH_EXTRA_INSTALL_REQUIREMENTS`` (``|``-separated,
after the user's own), and its wheel must carry it: the name, the exact version built and the
marker.

Triton's wheel holds no HIP code objects and does not link the HIP runtime (it ``dlopen``s
``libamdhip64.so`` at run time), so the ROCm code-object check of other projects does not apply;
its wheel is checked for a valid version and for being a ``triton`` package instead.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from rocm_build.common.errors import BuildFailed, ConfigError
from rocm_build.config.schema import TritonSettings
from rocm_build.repo.manifest import MANIFEST_NAME, read_manifest
from rocm_build.repo.tritonpin import TRITON

__all__ = [
    "EXTRA_REQUIREMENTS",
    "PLACEHOLDER",
    "SUFFIX_ENV",
    "TRITON",
    "TritonBuild",
    "check_requires",
    "check_triton_wheel",
    "configure",
    "pin_suffix",
    "requirement",
    "requirement_env",
]

log = logging.getLogger(__name__)

EXTRA_REQUIREMENTS = "PYTORCH_EXTRA_INSTALL_REQUIREMENTS"
SUFFIX_ENV = "TRITON_WHEEL_VERSION_SUFFIX"
PLACEHOLDER = "<version of triton>"  # torch's requirement in a plan, until Triton is built
TRITON_WHEEL_NAME_ENV = "TRITON_WHEEL_NAME"
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True)
class TritonBuild:
    """Which step builds Triton, which steps require it, and how they name it."""

    project: str
    requirers: tuple[str, ...]  # projects built after it that require it (torch)
    wheel_name: str
    marker: str


def requirement(build: TritonBuild, version: str) -> str:
    """``triton==V; platform_system == "Linux"``: what torch's wheel must require."""
    text = f"{build.wheel_name}=={version}"
    return f"{text}; {build.marker}" if build.marker else text


def _release_checkout(src_dir: Path, project: str) -> bool:
    """Whether the checkout is at a release branch (its ref in the source manifest)."""
    try:
        ref = str(read_manifest(src_dir / MANIFEST_NAME)["projects"][project]["ref"])
    except (ConfigError, KeyError):
        return False
    return ref.startswith("release/")


def configure(
    names: list[str], settings: TritonSettings, src_dir: Path, label: str
) -> tuple[dict[str, dict[str, str]], TritonBuild | None]:
    """What to add to Triton's step's environment (its version suffix and wheel name), and who
    requires it; None when the run builds no Triton."""
    if TRITON not in names:
        return {}, None
    later = names[names.index(TRITON) + 1 :]
    build = TritonBuild(
        project=TRITON,
        requirers=tuple(n for n in later if n == "torch"),
        wheel_name=settings.wheel_name,
        marker=settings.marker,
    )
    suffix = label if _release_checkout(src_dir, TRITON) else pin_suffix(label)
    adds = {TRITON: {SUFFIX_ENV: suffix, TRITON_WHEEL_NAME_ENV: settings.wheel_name}}
    return adds, build


def pin_suffix(label: str) -> str:
    """The local label as a segment after Triton's ``+git<sha>``: ``+rocm7.14`` -> ``.rocm7.14``."""
    body = label.lstrip("+")
    return f".{body}" if body else ""


def requirement_env(env: Mapping[str, str], build: TritonBuild, version: str) -> dict[str, str]:
    """``PYTORCH_EXTRA_INSTALL_REQUIREMENTS`` with the Triton requirement after any the user's
    environment already gives (an older Triton requirement of theirs is replaced)."""
    own = [
        r
        for r in env.get(EXTRA_REQUIREMENTS, "").split("|")
        if r.strip() and not _names(r, build.wheel_name)
    ]
    return {EXTRA_REQUIREMENTS: "|".join([*own, requirement(build, version)])}


def _names(line: str, name: str) -> bool:
    """Whether a requirement line is about ``name`` (its leading name; the line may be our own
    placeholder, not a valid requirement)."""
    match = _NAME.match(line)
    return match is not None and canonicalize_name(match.group(1)) == canonicalize_name(name)


def check_triton_wheel(wheel_name: str, version: str, project: str) -> None:
    """The wheel Triton's build made: a valid version (one ``+`` at most)."""
    try:
        Version(version)
    except InvalidVersion:
        msg = (
            f"{project}: the wheel's version {version!r} is not valid (a local label appended "
            f"to a +git version?); check {SUFFIX_ENV} in the build log"
        )
        raise BuildFailed(msg) from None
    log.info("%s: built %s %s", project, wheel_name, version)


def check_requires(
    build: TritonBuild, env: Mapping[str, str], project: str, requires: tuple[str, ...]
) -> None:
    """Refuse a wheel of ``project`` (torch) whose METADATA does not require, exactly (name,
    version and marker), the Triton wheel its build was told to (``env``)."""
    told = [r for r in env.get(EXTRA_REQUIREMENTS, "").split("|") if _names(r, build.wheel_name)]
    if not told:
        return
    want = Requirement(told[-1])
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if (
            canonicalize_name(req.name) == canonicalize_name(want.name)
            and str(req.specifier) == str(want.specifier)
            and str(req.marker or "") == str(want.marker or "")
        ):
            return
    have = [r for r in requires if _names(r, build.wheel_name)]
    msg = (
        f"{project}'s wheel does not require the Triton built in this run ({want}; it has "
        f"{', '.join(have) or 'no Triton requirement'}); its build ignored {EXTRA_REQUIREMENTS}"
    )
    raise BuildFailed(msg)
