"""The bundle platforms, by their ``bundle.platform`` name: which one bundles a wheel.

A platform is one module that answers :class:`.job.Platform` (:mod:`.linux`, :mod:`.windows`);
adding one is that module and its entry in :data:`PLATFORMS` (and its name in the
``bundle.platform`` setting's choices, which a unit test holds to this registry).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from rocm_build.bundle import linux, windows
from rocm_build.bundle.job import Platform
from rocm_build.bundle.model import BundleResult
from rocm_build.common.errors import BundleError, ConfigError
from rocm_build.wheel.wheelfile import WheelName

__all__ = ["DEFAULT", "PLATFORMS", "check_split", "choose", "owner", "plan_lines", "platform_for"]

PLATFORMS: dict[str, Platform] = {p.name: p for p in (linux.PLATFORM, windows.PLATFORM)}

#: the platform of a wheel whose tag no platform claims (a pure-Python wheel), and of a plan
#: that names none
DEFAULT = "linux"


def owner(wheel: Path) -> Platform | None:
    """The platform the wheel's tag says it is for, if any claims it."""
    tags = _tags(wheel)
    return next((p for p in PLATFORMS.values() if p.owns(tags)), None)


def platform_for(wheel: Path, setting: str) -> Platform:
    """The platform that bundles ``wheel``: the one ``bundle.platform`` (``setting``) names, or
    with ``auto`` the one its tag says (else :data:`DEFAULT`)."""
    if setting == "auto":
        return owner(wheel) or PLATFORMS[DEFAULT]
    if setting not in PLATFORMS:
        raise ConfigError(f"bundle.platform is {setting}: use one of auto, {', '.join(PLATFORMS)}")
    return PLATFORMS[setting]


def choose(wheel: Path, setting: str, *, thin: bool) -> Platform:
    """:func:`platform_for`, checked: a platform asked for that the wheel's tag contradicts is a
    mistake, not a no-op (a Linux wheel through delvewheel would come out unbundled), and thin
    mode (``thin``) needs a platform that makes thin wheels."""
    platform = platform_for(wheel, setting)
    tagged = owner(wheel)
    if setting != "auto" and tagged is not None and not platform.owns(_tags(wheel)):
        raise ConfigError(
            f"{wheel.name} is a {tagged.label} wheel but --platform (bundle.platform) is "
            f"{setting}: leave it at auto, which goes by the wheel's tag"
        )
    if thin and not platform.thin:
        makers = _labels(lambda p: p.thin)
        raise BundleError(
            f"{wheel.name}: --mode thin makes {makers} wheels only so far: bundle this "
            f"{platform.label} wheel in fat mode"
        )
    return platform


def check_split(wheel: Path, setting: str) -> None:
    """``--split-arch`` needs a platform whose fat wheels it can cut."""
    platform = platform_for(wheel, setting)
    if not platform.split_arch:
        makers = _labels(lambda p: p.split_arch)
        raise BundleError(
            f"{wheel.name}: --split-arch makes {makers} wheels only so far: bundle this "
            f"{platform.label} wheel without it"
        )


def plan_lines(result: BundleResult) -> Iterator[str]:
    """A planned (dry-run) bundle, for people, by the platform that planned it."""
    return PLATFORMS.get(result.platform, PLATFORMS[DEFAULT]).plan_lines(result)


def _tags(wheel: Path) -> list[str]:
    return [t.split("-")[2] for t in WheelName.parse(wheel.name).tags]


def _labels(able: Callable[[Platform], bool]) -> str:
    return " and ".join(p.label for p in PLATFORMS.values() if able(p))
