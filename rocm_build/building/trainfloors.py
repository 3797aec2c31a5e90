"""Release trains' floors (``[floors."<train>"]``): the oldest ROCm a train's torch accepts and
the CMake packages its ``cmake/public/LoadHIP.cmake`` requires, checked against a tree.

A floor is either known (``rocm`` and/or per project a list of packages) or marked ``unknown``
with the reason it could not be confirmed: then nothing is checked, and ``doctor`` says so, since
a wrong floor would refuse a tree that builds. A package written ``name>=X.Y`` is required only
from that ROCm on (LoadHIP.cmake gates some on the tree's version, as hipfile from 7.14).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from packaging.version import InvalidVersion, Version

from rocm_build.common.errors import ConfigError
from rocm_build.config.loader import ProjectSpec
from rocm_build.rocm import dist

__all__ = ["Floor", "check", "floor_of", "unmet"]


@dataclass(frozen=True)
class Floor:
    """``rocm`` is "" when the floor names none; ``unknown`` is the reason it is not recorded."""

    train: str
    rocm: str = ""
    packages: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    unknown: str = ""

    def describe(self) -> str:
        if self.unknown:
            return f"{self.train}: no ROCm floor known ({self.unknown})"
        parts = [f"ROCm {self.rocm} or newer" if self.rocm else "ROCm floor not recorded"]
        parts += [
            f"{name} needs {', '.join(_shown(p) for p in pkgs)}"
            for name, pkgs in self.packages.items()
            if pkgs
        ]
        return f"{self.train}: " + "; ".join(parts)

    def as_json(self) -> dict[str, Any]:
        return {
            "train": self.train,
            "rocm": self.rocm or None,
            "packages": {k: list(v) for k, v in self.packages.items()},
            "unknown": self.unknown or None,
        }


def floor_of(train: str, floors: Mapping[str, Mapping[str, Any]]) -> Floor:
    """The train's floor from the ``[floors]`` tables; a train without one is ``unknown``."""
    where = f'[floors."{train}"]'
    table = floors.get(train)
    if table is None:
        return Floor(train, unknown=f"no {where} table")
    if not isinstance(table, Mapping):
        raise ConfigError(f'{where} must be a table (rocm = "X.Y", torch = [...], or unknown)')
    unknown = table.get("unknown", "")
    rocm = table.get("rocm", "")
    packages = {k: v for k, v in table.items() if k not in ("unknown", "rocm")}
    if not isinstance(unknown, str) or not isinstance(rocm, str):
        raise ConfigError(f"{where}: 'rocm' and 'unknown' are strings")
    if unknown and (rocm or packages):
        raise ConfigError(f"{where}: either 'unknown' (a reason) or a floor, not both")
    if not unknown and not rocm and not packages:
        raise ConfigError(f"{where} is empty: give 'rocm', packages per project, or 'unknown'")
    try:
        if rocm:
            Version(rocm)
    except InvalidVersion:
        raise ConfigError(f'{where}: rocm = "{rocm}" is not a version (say "7.14")') from None
    for name, pkgs in packages.items():
        if not isinstance(pkgs, list) or not all(isinstance(p, str) for p in pkgs):
            raise ConfigError(f"{where}: {name} must be a list of CMake package names")
        for entry in pkgs:
            _, since = _split(entry)
            try:
                Version(since or "0")
            except InvalidVersion:
                msg = f'{where}: "{entry}" is not NAME or NAME>=X.Y (say "hipfile>=7.14")'
                raise ConfigError(msg) from None
    return Floor(train, rocm, {k: tuple(v) for k, v in packages.items()}, unknown)


def unmet(floor: Floor, tree: dist.RocmTree, projects: Sequence[str]) -> list[str]:
    """What the tree misses of the floor, for a build of ``projects`` (the ROCm floor counts
    for torch, whose LoadHIP.cmake sets it)."""
    where = f'[floors."{floor.train}"]'
    problems = []
    try:
        too_old = bool(floor.rocm) and Version(tree.version or "0") < Version(floor.rocm)
    except InvalidVersion:
        too_old = False
    if too_old and "torch" in projects:
        problems.append(
            f"release train {floor.train} needs ROCm {floor.rocm} or newer ({where}), "
            f"the tree is {tree.version or 'of unknown version'}"
        )
    for name in projects:
        missing = [
            _shown(entry)
            for entry in floor.packages.get(name, ())
            if _applies(entry, tree.version) and not dist.has_cmake_package(tree, _split(entry)[0])
        ]
        if missing:
            problems.append(
                f"release train {floor.train}'s {name} needs CMake packages missing from "
                f"lib/cmake: {', '.join(missing)} ({where})"
            )
    return problems


def check(
    train: str,
    floors: Mapping[str, Mapping[str, Any]],
    tree: dist.RocmTree,
    specs: Sequence[ProjectSpec],
    targets: Sequence[str],
) -> dist.TreeCheck:
    """The tree's validation for ``specs`` with the train's floor's problems first."""
    checked = dist.validate(tree, specs, targets)
    problems = unmet(floor_of(train, floors), tree, [s.name for s in specs])
    if not problems:
        return checked
    return replace(checked, problems=(*problems, *checked.problems))


def _split(entry: str) -> tuple[str, str]:
    """``hipfile>=7.14`` -> (``hipfile``, ``7.14``); ``hipfile`` -> (``hipfile``, "")."""
    name, _, since = entry.partition(">=")
    return name.strip(), since.strip()


def _shown(entry: str) -> str:
    name, since = _split(entry)
    return f"{name} (from ROCm {since})" if since else name


def _applies(entry: str, tree_version: str) -> bool:
    """Whether a floor's package is required of a tree of this ROCm version (one gated on a
    version does not count for a tree of unknown version, which is refused for that anyway)."""
    since = _split(entry)[1]
    if not since:
        return True
    try:
        return bool(tree_version) and Version(tree_version) >= Version(since)
    except InvalidVersion:
        return False
