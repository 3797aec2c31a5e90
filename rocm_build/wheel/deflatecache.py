"""A cache of deflated wheel members, so that re-bundling against the same ROCm tree deflates
nothing it deflated before.

Users re-bundle after every torch rebuild against the same tree: the ROCm libraries (patched the
same way each time) and data files compress to the same bytes each time, and deflating them is
most of a bundle's work. :class:`.wheelfile.WheelWriter` stores each new member's raw
deflate stream here with its CRC-32, size and sha256 (its RECORD hash), keyed by what determines
those bytes (see :func:`file_key`); a hit is copied raw, as an unchanged wheel member is.

One file per entry, ``<folder>/<key[:2]>/<key>``: a fixed header (magic, the member's CRC-32 and
size, the stream's length and CRC-32, the member's sha256) and then the stream. Entries are
written to a temporary name in the same folder and renamed into place, never fsynced: after a
crash an entry may be short or hold garbage, which its length and the stream's CRC-32 reveal
(the writer checks both before the entry's bytes can end up in a wheel). An entry is used only if
this user owns it and no one else may write to it: what another account could have planted is
deflated again, not trusted. Folders and entries are opened without following links; a cache
folder that another user owns or may write to is refused (exit 14), a two-hex folder that is a
link or not this user's alone is left alone (not used, not trimmed). A hit refreshes the
entry's mtime; :meth:`DeflateCache.trim` removes the least recently used entries beyond the
size bound, and only files it can prove its own (name, owner, type, header). Settings:
``bundle.deflate_cache`` (the folder; ``none`` turns it off) and ``bundle.deflate_cache_gb``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import re
import secrets
import stat
import struct
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from rocm_build.common.errors import FileAccessError
from rocm_build.common.locks import check_cache_folder

__all__ = ["DeflateCache", "Entry", "check_folder", "default_folder", "file_key", "from_settings"]

_MAGIC = b"RBDC1\n"
HEAD = struct.Struct(
    "<6sLQQL32s"
)  # magic, member CRC-32, size, stream length, stream CRC-32, sha256
_STALE_TMP = 3600.0  # seconds after which a temporary entry is a killed run's leftover
_VERSION = "1"  # part of every key: bump when the stream format or the deflater changes
# What the cache writes, and all the trim may delete: two-hex folders holding entries named by
# their 64-hex key (which starts with the folder's name) and temporary entries.
_SUB = re.compile(r"[0-9a-f]{2}")
_KEY = re.compile(r"[0-9a-f]{64}")
_TMP = re.compile(r"\.tmp-[A-Za-z0-9_]{8,16}")
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_HINT = "set bundle.deflate_cache to a folder of your own, or to none"

log = logging.getLogger(__name__)


def _own(st: os.stat_result) -> bool:
    """Written by this user alone: owned by them and writable by no group or other user."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


@dataclass(frozen=True)
class Entry:
    """A cached member: its deflate stream starts at ``HEAD.size`` in ``path``."""

    path: Path
    crc: int
    file_size: int
    compress_size: int
    stream_crc: int
    sha256: bytes
    ident: tuple[int, int] = (0, 0)  # (device, inode) of the file get() checked

    def open(self) -> BinaryIO:
        """The entry's file, as get() checked it (not a link or a file put there since)."""
        fd = os.open(self.path, _READ)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self.ident:
            os.close(fd)
            raise OSError(errno.ESTALE, "the entry changed since it was checked", str(self.path))
        return os.fdopen(fd, "rb")


def file_key(
    path: Path, level: int, transform: str = "", content: str | None = None, deflater: str = ""
) -> str:
    """The key of ``path``'s bytes, deflated at ``level`` after ``transform`` (e.g. an rpath
    edit): the file's identity (device, inode, size, mtime and ctime in ns; a rewrite changes
    the ctime even when it keeps the mtime), or ``content`` (a hash of the bytes) when given,
    the transformation and the deflater (``bundle.deflater`` as it runs here, and its version:
    another release of a deflater may write other bytes)."""
    from rocm_build.wheel import rawdeflate

    st = path.stat()
    ident: object = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if content:
        ident = (content, st.st_size)
    name = rawdeflate.implementation(deflater)
    text = repr((_VERSION, ident, transform, level, name, rawdeflate.version(name)))
    return hashlib.sha256(text.encode()).hexdigest()


def check_folder(folder: Path) -> None:
    """Refuse (``FileAccessError``, exit 14) a cache folder that is not this user's alone
    (``locks.check_cache_folder``): links planted in it could make the trim delete, or the cache
    use, what is not the cache's. A missing folder is fine (made 0700 when needed)."""
    check_cache_folder(folder, "deflate cache", _HINT)


class DeflateCache:
    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.hits = 0
        self.stored = 0
        self._tmp: dict[int, tuple[int, str]] = {}  # entries being written: folder, temp name
        self.foreign = 0  # entries found that this user did not write alone: not used

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / key

    def _warn_foreign(self, path: Path) -> None:
        if not self.foreign:
            log.warning(
                "deflate cache: %s is another user's or others may write to it: not used "
                "(deflating again); give the cache folder to this user alone or set "
                "bundle.deflate_cache to a folder of its own",
                path,
            )
        self.foreign += 1

    def _open_sub(self, name: str, *, create: bool = False) -> int | None:
        """The two-hex folder ``name``, opened without following a link; None if it is
        missing (and not ``create``) or is not this user's alone (a planted link or folder)."""
        if create:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            top = os.open(self.folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        if not _own(os.fstat(top)):  # check_folder() refused it; a cache made directly skips it
            os.close(top)
            self._warn_foreign(self.folder)
            return None
        try:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=top)
            fd = os.open(name, _DIR, dir_fd=top)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                self._warn_foreign(self.folder / name)
            return None
        finally:
            os.close(top)
        if not _own(os.fstat(fd)):
            os.close(fd)
            self._warn_foreign(self.folder / name)
            return None
        return fd

    def get(self, key: str) -> Entry | None:
        """The entry for ``key`` when its header is sound and its length matches; else None (and
        a damaged entry is removed). The stream's CRC-32 is the reader's to check."""
        sub = self._open_sub(key[:2])
        if sub is None:
            return None
        try:
            return self._get(sub, key)
        finally:
            os.close(sub)

    def _get(self, sub: int, key: str) -> Entry | None:
        path = self._path(key)
        try:
            fd = os.open(key, _READ, dir_fd=sub)
        except FileNotFoundError:
            return None
        except OSError:
            self._warn_foreign(path)  # a link, or unreadable: not ours to use
            return None
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not _own(st):
                self._warn_foreign(path)
                return None
            head = fh.read(HEAD.size)
            if len(head) == HEAD.size:
                magic, crc, size, csize, scrc, sha = HEAD.unpack(head)
                if magic == _MAGIC and st.st_size == HEAD.size + csize:
                    with contextlib.suppress(OSError):
                        os.utime(fd)
                    ident = (st.st_dev, st.st_ino)
                    return Entry(path, crc, size, csize, scrc, sha, ident)
        self.discard(key)
        return None

    def discard(self, key: str) -> None:
        sub = self._open_sub(key[:2])
        if sub is not None:
            try:
                with contextlib.suppress(OSError):
                    os.unlink(key, dir_fd=sub)
            finally:
                os.close(sub)

    @contextlib.contextmanager
    def new_entry(self, key: str) -> Iterator[BinaryIO]:
        """A temporary file for ``key``'s entry, positioned after the header; the caller writes
        the stream and then :meth:`seal`; an exception discards it."""
        sub = self._open_sub(key[:2], create=True)
        if sub is None:
            raise OSError(errno.EPERM, "not this user's folder alone", str(self._path(key)))
        tmp = f".tmp-{secrets.token_hex(8)}"
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fh = os.fdopen(os.open(tmp, flags, 0o600, dir_fd=sub), "w+b")
        except BaseException:
            os.close(sub)
            raise
        self._tmp[id(fh)] = (sub, tmp)
        try:
            fh.write(bytes(HEAD.size))
            yield fh
        finally:
            del self._tmp[id(fh)]
            fh.close()
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=sub)  # not sealed (sealed: renamed away already)
            os.close(sub)

    def seal(self, fh: BinaryIO, key: str, entry: Entry) -> None:
        """Write the header of the entry being written in ``fh`` and rename it into place."""
        fh.seek(0)
        fh.write(
            HEAD.pack(
                _MAGIC,
                entry.crc,
                entry.file_size,
                entry.compress_size,
                entry.stream_crc,
                entry.sha256,
            )
        )
        fh.flush()
        sub, tmp = self._tmp[id(fh)]
        os.replace(tmp, key, src_dir_fd=sub, dst_dir_fd=sub)
        self.stored += 1

    def trim(self) -> None:
        """Remove the least recently used entries until the cache fits its bound, and the
        temporary entries killed runs left. Only what is provably the cache's own goes: files
        of this user, named as the cache names them, in its own two-hex folders, starting with
        its header; never a link, nor anything a link leads to."""
        now = time.time()
        entries: list[tuple[float, int, str, str]] = []
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return
        for sub_name in filter(_SUB.fullmatch, names):
            sub = self._open_sub(sub_name)
            if sub is None:
                continue
            try:
                for name, st in _own_files(sub):
                    if _TMP.fullmatch(name):
                        if now - st.st_mtime > _STALE_TMP:
                            _unlink_if_ours(sub, name, st, (bytes(6), _MAGIC))
                    elif _KEY.fullmatch(name) and name.startswith(sub_name):
                        entries.append((st.st_mtime, st.st_size, sub_name, name))
            finally:
                os.close(sub)
        total = sum(size for _, size, _, _ in entries)
        for _, size, sub_name, name in sorted(entries):
            if total <= self.max_bytes:
                break
            sub = self._open_sub(sub_name)
            if sub is None:
                continue
            try:
                with contextlib.suppress(OSError):
                    st = os.stat(name, dir_fd=sub, follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode) and _own(st):
                        _unlink_if_ours(sub, name, st, (_MAGIC,))
            finally:
                os.close(sub)
            total -= size


def _own_files(sub: int) -> Iterator[tuple[str, os.stat_result]]:
    """The regular files in the folder ``sub`` that this user alone wrote (no links)."""
    with os.scandir(sub) as it:
        for entry in it:
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(st.st_mode) and _own(st):
                    yield entry.name, st


def _unlink_if_ours(sub: int, name: str, st: os.stat_result, heads: tuple[bytes, ...]) -> None:
    """Remove ``name`` if it is still the file ``st`` describes and starts with one of
    ``heads`` (the cache's header, or a temporary entry's zeroed one)."""
    with contextlib.suppress(OSError):
        fd = os.open(name, _READ, dir_fd=sub)
        try:
            now = os.fstat(fd)
            same = (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
            if same and os.pread(fd, len(_MAGIC), 0) in heads:
                os.unlink(name, dir_fd=sub)
        finally:
            os.close(fd)


def default_folder(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/rocm-build/deflate, else ~/.cache/rocm-build/deflate."""
    base = env.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError) as exc:
            raise FileAccessError(
                "no folder for the deflate cache: HOME is not set and this user has no home "
                f"folder; set HOME or XDG_CACHE_HOME, or {_HINT}"
            ) from exc
    return Path(base) / "rocm-build" / "deflate"


def from_settings(
    setting: str, max_gb: float, env: Mapping[str, str] = os.environ
) -> DeflateCache | None:
    """The cache the settings describe: ``setting`` is its folder, ``""`` for the default one,
    ``none`` for no cache (as is a bound of 0). Decides only: its user checks the folder
    (:func:`check_folder`) before writing through it."""
    if setting.strip().lower() == "none" or max_gb <= 0:
        return None
    folder = Path(setting).expanduser() if setting else default_folder(env)
    return DeflateCache(folder, int(min(max_gb, 1e9) * 1e9))
