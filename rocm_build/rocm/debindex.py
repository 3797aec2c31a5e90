"""Debian releases (``debian.toml``) and a private apt index per release, from which
``debtree`` downloads the packages it assembles a ROCm tree from."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from rocm_build import proc
from rocm_build.errors import CommandFailed, ConfigError, FetchError, ToolMissing

__all__ = [
    "DEFAULT_MIRROR",
    "AptIndex",
    "Release",
    "host_mirror",
    "load_release",
    "packages_stamp",
    "release_names",
]

log = logging.getLogger(__name__)


def packages_stamp(packages: Iterable[str]) -> str:
    """A short name for a set of packages (memo files of what was downloaded)."""
    return hashlib.sha256("\n".join(sorted(packages)).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Release:
    """One Debian release's packages and index settings (rocm_build/rocm/debian.toml)."""

    name: str
    suite: str
    apt_options: tuple[str, ...]
    llvm: int
    version_from: str
    packages: tuple[str, ...]
    sysdeps: tuple[str, ...]
    root_packages: tuple[str, ...]


def _releases_data() -> dict[str, Any]:
    text = resources.files("rocm_build.rocm").joinpath("debian.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def release_names() -> tuple[str, ...]:
    return tuple(_releases_data()["releases"])


def load_release(name: str = "") -> Release:
    data = _releases_data()
    name = name or str(data["default"])
    releases = data["releases"]
    if name not in releases:
        msg = f"unknown Debian release '{name}'; choose one of {', '.join(releases)}"
        raise ConfigError(msg)
    raw = releases[name]
    return Release(
        name=name,
        suite=str(raw["suite"]),
        apt_options=tuple(str(o) for o in raw.get("apt_options", ())),
        llvm=int(raw["llvm"]),
        version_from=str(raw["version_from"]),
        packages=tuple(str(p) for p in raw["packages"]),
        sysdeps=tuple(str(p) for p in raw["sysdeps"]),
        root_packages=tuple(str(p) for p in raw.get("root_packages", ())),
    )


DEFAULT_MIRROR = "http://deb.debian.org/debian"


_KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


def host_mirror() -> str:
    """The Debian mirror this machine's own apt sources name, else deb.debian.org."""
    try:
        result = proc.run(
            ["apt-get", "indextargets", "--format", "$(REPO_URI)"], capture=True, check=False
        )
    except ToolMissing:
        return DEFAULT_MIRROR
    for line in (result.stdout or "").splitlines():
        uri = line.strip().rstrip("/")
        if uri.endswith("/debian"):
            return uri
    return DEFAULT_MIRROR


class AptIndex:
    """A private apt index for one release: its own source list, lists and state folders under
    ``state``, so reading another release's index never touches the system's apt setup."""

    def __init__(self, release: Release, state: Path, mirror: str = "") -> None:
        self.release = release
        self.dir = state / release.suite
        self.mirror = mirror
        self._updated = False

    def options(self) -> list[str]:
        opts = {
            "Dir::Etc::sourcelist": str(self.dir / "sources.list"),
            "Dir::Etc::sourceparts": "-",
            "Dir::State::Lists": str(self.dir / "lists"),
            "Dir::State::status": str(self.dir / "status"),
            "Dir::Cache": str(self.dir / "cache"),
            "Debug::NoLocking": "1",
            # apt's own retries (with back-off) for a mirror's transient failures
            "Acquire::Retries": "3",
        }
        if os.geteuid() == 0:
            # apt's download user cannot enter root's home, where the cache usually lives.
            opts["APT::Sandbox::User"] = "root"
        for option in self.release.apt_options:
            key, _, value = option.partition("=")
            opts[key.strip()] = value.strip()
        out: list[str] = []
        for key, value in opts.items():
            out += ["-o", f"{key}={value}"]
        return out

    def _prepare(self) -> None:
        for sub in ("lists/partial", "cache/archives/partial"):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "status").touch()
        mirror = self.mirror or host_mirror()
        signed = f"[signed-by={_KEYRING}] " if _KEYRING.is_file() else ""
        line = f"deb {signed}{mirror} {self.release.suite} main\n"
        sources = self.dir / "sources.list"
        if not sources.is_file() or sources.read_text() != line:
            sources.write_text(line)
            self._updated = False
            for old in (self.dir / "lists").glob("*_Packages*"):
                old.unlink()

    def update(self) -> None:
        self._prepare()
        proc.which("apt-get", hint="assembling a tree from Debian packages needs apt")
        log.info("reading Debian %s's package index", self.release.suite)
        try:
            proc.run(["apt-get", *self.options(), "update"], capture=True, what="apt-get update")
        except CommandFailed as exc:
            msg = (
                f"could not read Debian {self.release.suite}'s package index ({exc}); "
                "check the network or pass --mirror URL"
            )
            raise FetchError(msg) from exc
        self._updated = True

    def resolve(self, packages: Sequence[str]) -> dict[str, str]:
        """package -> the file name ``apt-get download`` gives its candidate version."""
        self._prepare()
        if not any((self.dir / "lists").glob("*_Packages*")):
            self.update()
        for attempt in range(2):
            result = proc.run(
                ["apt-cache", *self.options(), "show", "--no-all-versions", *packages],
                capture=True,
                check=False,
            )
            found = _parse_stanzas(result.stdout or "")
            missing = [p for p in packages if p not in found]
            if not missing:
                return {p: found[p] for p in packages}
            if attempt == 0 and not self._updated:
                self.update()
        msg = (
            f"Debian {self.release.suite} has no package {', '.join(missing)}; "
            "update the list in rocm_build/rocm/debian.toml"
        )
        raise FetchError(msg)

    def fetch(self, packages: Sequence[str], dest: Path) -> dict[str, Path]:
        """Download what is not in ``dest`` yet; never downloads a package version twice."""
        dest.mkdir(parents=True, exist_ok=True)
        memo = dest / f".{self.release.name}-{packages_stamp(packages)}.json"
        if memo.is_file():
            with contextlib.suppress(ValueError, OSError):
                names = json.loads(memo.read_text())
                if all((dest / names[p]).is_file() for p in packages):
                    return {p: dest / names[p] for p in packages}
        names = self.resolve(packages)
        missing = [p for p in packages if not (dest / names[p]).is_file()]
        if missing:
            log.info("downloading %d Debian %s packages", len(missing), self.release.suite)
            self._download(missing, dest)
            still = [p for p in missing if not (dest / names[p]).is_file()]
            if still and not self._updated:
                # The index is older than the mirror: read it again and retry once.
                self.update()
                names = self.resolve(packages)
                self._download([p for p in packages if not (dest / names[p]).is_file()], dest)
            still = [p for p in packages if not (dest / names[p]).is_file()]
            if still:
                msg = f"apt-get download did not produce {', '.join(still)}; try again"
                raise FetchError(msg)
        tmp = memo.with_name(memo.name + ".tmp")
        tmp.write_text(json.dumps(names))
        tmp.replace(memo)
        return {p: dest / names[p] for p in packages}

    def _download(self, packages: Sequence[str], dest: Path) -> None:
        try:
            proc.run(
                ["apt-get", *self.options(), "download", *packages],
                cwd=dest,
                capture=True,
                what="apt-get download",
            )
        except CommandFailed as exc:
            if self._updated:
                msg = f"could not download {' '.join(packages)} with apt-get ({exc}); try again"
                raise FetchError(msg) from exc
            log.info("apt-get download failed (%s); reading the index again", exc)


def _parse_stanzas(text: str) -> dict[str, str]:
    """``apt-cache show`` output -> package -> ``name_version_arch.deb`` (as apt names it)."""
    found: dict[str, str] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith(" "):
                fields[key] = value.strip()
        if {"Package", "Version", "Architecture"} <= fields.keys():
            version = fields["Version"].replace(":", "%3a")
            name = f"{fields['Package']}_{version}_{fields['Architecture']}.deb"
            found.setdefault(fields["Package"], name)
    return found
