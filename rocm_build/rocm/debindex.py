"""Debian releases (``debian.toml``) and a private apt index per release, from which
``debtree`` downloads the packages it assembles a ROCm tree from.

The cache (``rocm debian --cache``) may be a folder others can reach, and rocm-build often runs
there as root, so it is held to the rule of every cache (``locks.check_cache_folder``: this
user's alone, else exit 14), the memo of what was downloaded is a state file (``statefile``: no
fixed temporary name, no link followed), and every ``.deb`` taken from it, downloaded or found
there, must have the SHA256 the package index gives for its version: one that has not is
removed and downloaded again, and a download that still has not stops the run (exit 15).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import threading
import tomllib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from rocm_build.common import locks, proc, statefile
from rocm_build.common.errors import (
    CommandFailed,
    ConfigError,
    FetchError,
    FileAccessError,
    ToolMissing,
    UnsafeInput,
)

__all__ = [
    "DEFAULT_MIRROR",
    "AptIndex",
    "Deb",
    "Release",
    "host_mirror",
    "load_release",
    "own_cache_folder",
    "packages_stamp",
    "release_names",
]

log = logging.getLogger(__name__)


def packages_stamp(packages: Iterable[str]) -> str:
    """A short name for a set of packages (memo files of what was downloaded)."""
    return hashlib.sha256("\n".join(sorted(packages)).encode()).hexdigest()[:16]


_CACHE_HINT = "pass --cache with a folder of your own"
_MEMO = "package memo"
_DEB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+~%_-]*\.deb$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def own_cache_folder(folder: Path, what: str = "Debian package cache") -> Path:
    """``folder``, made 0700 when missing; refused (exit 14) unless it is this user's alone
    (``locks.check_cache_folder``, the rule of every cache)."""
    locks.check_cache_folder(folder, what, _CACHE_HINT)
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        msg = f"cannot make the {what} {folder} ({exc.strerror}): {_CACHE_HINT}"
        raise FileAccessError(msg) from exc
    locks.check_cache_folder(folder, what, _CACHE_HINT)  # what was put there in between
    return folder


@dataclass(frozen=True)
class Deb:
    """A package's file as ``apt-get download`` names it, and its SHA256 from the index."""

    file: str
    sha256: str
    size: int = 0  # bytes, from the index (0: not known, as in a memo)


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
        own_cache_folder(self.dir.parent)
        own_cache_folder(self.dir)
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

    def resolve(self, packages: Sequence[str]) -> dict[str, Deb]:
        """package -> the file ``apt-get download`` gives its candidate version, and its
        SHA256."""
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

    def fetch(
        self, packages: Sequence[str], dest: Path, show: ShowDownload | None = None
    ) -> dict[str, Path]:
        """Download what is not in ``dest`` yet; never downloads a package version twice.
        Every file returned has the SHA256 the index gives (see the module's docstring).
        ``show`` is told how far a download is (``ShowDownload``) while apt-get runs."""
        own_cache_folder(dest)
        memo = dest / f".{self.release.name}-{packages_stamp(packages)}.debs.json"
        debs = _read_memo(memo, packages)
        if debs is not None and all(_cached(dest, debs[p]) for p in packages):
            return {p: dest / debs[p].file for p in packages}
        debs = self.resolve(packages)
        missing = [p for p in packages if not _cached(dest, debs[p])]
        if missing:
            log.info("downloading %d Debian %s packages", len(missing), self.release.suite)
            self._download(missing, dest, [debs[p] for p in missing], show)
            if any(not _cached(dest, debs[p]) for p in missing) and not self._updated:
                # The index is older than the mirror: read it again and retry once.
                self.update()
                debs = self.resolve(packages)
                missing = [p for p in packages if not _cached(dest, debs[p])]
                self._download(missing, dest, [debs[p] for p in missing], show)
            still = [p for p in missing if not _cached(dest, debs[p], final=True)]
            if still:
                msg = f"apt-get download did not produce {', '.join(still)}; try again"
                raise FetchError(msg)
        data = {p: {"file": debs[p].file, "sha256": debs[p].sha256} for p in packages}
        statefile.write_json(memo, data, _MEMO)
        return {p: dest / debs[p].file for p in packages}

    def _download(
        self, packages: Sequence[str], dest: Path, debs: Sequence[Deb], show: ShowDownload | None
    ) -> None:
        what = f"Debian {self.release.suite} packages"
        try:
            with _watching(dest, debs, what, show):
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


#: Told how far a download is: (what, packages done, packages, bytes done, bytes in all).
ShowDownload = Callable[[str, int, int, int, int], None]


@contextlib.contextmanager
def _watching(
    dest: Path, debs: Sequence[Deb], what: str, show: ShowDownload | None
) -> Iterator[None]:
    """While the body runs (apt-get download into ``dest``), tell ``show`` how many of
    ``debs`` are there and how many of their bytes (a package still in ``partial/`` counts
    its bytes so far), five times a second and once at the end."""
    if show is None or not debs:
        yield
        return
    total = sum(d.size for d in debs)
    stop = threading.Event()
    last: list[tuple[int, int]] = []

    def poll() -> None:
        done, got = 0, 0
        for deb in debs:
            for where in (dest / deb.file, dest / "partial" / deb.file):
                try:
                    size = where.stat().st_size
                except OSError:
                    continue
                got += min(size, deb.size) if deb.size else size
                done += where.parent == dest and size >= deb.size
                break
        if not last or last[-1] != (done, got):
            last.append((done, got))
            show(what, done, len(debs), got, total)

    def watch() -> None:
        while not stop.wait(0.2):
            poll()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        poll()


def _read_memo(memo: Path, packages: Sequence[str]) -> dict[str, Deb] | None:
    """The packages' files and hashes the memo records; None when there is none or it is not of
    the types this version writes (derived: the index is asked again). A link, a FIFO or another
    user's file at its name stops the run (exit 14)."""
    try:
        data = statefile.read_json(memo, _MEMO)
    except (FileNotFoundError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    out: dict[str, Deb] = {}
    for p in packages:
        entry = data.get(p)
        if not isinstance(entry, dict):
            return None
        deb = _deb(entry.get("file"), entry.get("sha256"))
        if deb is None:
            return None
        out[p] = deb
    return out


def _deb(file: object, sha256: object, size: int = 0) -> Deb | None:
    """A ``Deb`` when ``file`` is a plain package file name and ``sha256`` a digest."""
    if not isinstance(file, str) or not isinstance(sha256, str):
        return None
    if not _DEB_NAME.match(file) or not _SHA256.match(sha256.lower()):
        return None
    return Deb(file, sha256.lower(), size)


def _cached(dest: Path, deb: Deb, *, final: bool = False) -> bool:
    """Whether ``dest`` holds ``deb`` with its SHA256. A file there of other bytes (damaged, or
    put there by someone else) is removed, so it is downloaded again; after the last download
    (``final``) it stops the run (exit 15). A link, a FIFO or another user's file there stops the
    run (exit 14): nothing is read through it or unpacked from it."""
    path = dest / deb.file
    if statefile.check(path, "downloaded package") is None:
        return False
    try:
        digest = statefile.file_sha256(path)
    except OSError as exc:
        msg = f"cannot read the downloaded package {path} ({exc.strerror}): {_CACHE_HINT}"
        raise FileAccessError(msg) from exc
    if digest == deb.sha256:
        return True
    if final:
        msg = (
            f"{path} does not have the SHA256 the Debian index gives for it "
            f"({deb.sha256[:16]}...): the mirror served other bytes; pass another --mirror, or "
            "try again"
        )
        raise UnsafeInput(msg)
    log.warning("%s does not have the SHA256 the index gives for it: downloading it again", path)
    statefile.remove(path, "downloaded package")
    return False


def _parse_stanzas(text: str) -> dict[str, Deb]:
    """``apt-cache show`` output -> package -> ``name_version_arch.deb`` (as apt names it) and
    the ``SHA256`` the index gives for it."""
    found: dict[str, Deb] = {}
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith(" "):
                fields[key] = value.strip()
        if {"Package", "Version", "Architecture", "SHA256"} <= fields.keys():
            version = fields["Version"].replace(":", "%3a")
            name = f"{fields['Package']}_{version}_{fields['Architecture']}.deb"
            size = fields.get("Size", "")
            deb = _deb(name, fields["SHA256"], int(size) if size.isdigit() else 0)
            if deb is not None:
                found.setdefault(fields["Package"], deb)
    return found
