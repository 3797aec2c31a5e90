"""A cache of deflated wheel members, so that re-bundling against the same ROCm tree deflates
nothing it deflated before.

Users re-bundle after every torch rebuild against the same tree: the ROCm libraries (patched the
same way each time) and data files compress to the same bytes each time, and deflating them is
most of a bundle's work. :class:`rocm_build.wheelfile.WheelWriter` stores each new member's raw
deflate stream here with its CRC-32, size and sha256 (its RECORD hash), keyed by what determines
those bytes (see :func:`file_key`); a hit is copied raw, as an unchanged wheel member is.

One file per entry, ``<folder>/<key[:2]>/<key>``: a fixed header (magic, the member's CRC-32 and
size, the stream's length and CRC-32, the member's sha256) and then the stream. Entries are
written to a temporary name in the same folder and renamed into place, never fsynced: after a
crash an entry may be short or hold garbage, which its length and the stream's CRC-32 reveal
(the writer checks both before the entry's bytes can end up in a wheel). An entry is used only if
this user owns it and no one else may write to it: what another account could have planted is
deflated again, not trusted. A hit refreshes the entry's mtime; :meth:`DeflateCache.trim`
removes the least recently used entries beyond the size bound. Settings:
``bundle.deflate_cache`` (the folder; ``none`` turns it off) and ``bundle.deflate_cache_gb``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import struct
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["DeflateCache", "Entry", "active", "configure", "default_folder", "file_key"]

_MAGIC = b"RBDC1\n"
HEAD = struct.Struct(
    "<6sLQQL32s"
)  # magic, member CRC-32, size, stream length, stream CRC-32, sha256
_STALE_TMP = 3600.0  # seconds after which a temporary entry is a killed run's leftover
_VERSION = "1"  # part of every key: bump when the stream format or the deflater changes

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


def file_key(path: Path, level: int, transform: str = "", content: str | None = None) -> str:
    """The key of ``path``'s bytes, deflated at ``level`` after ``transform`` (e.g. an rpath
    edit): the file's identity (device, inode, size, mtime and ctime in ns; a rewrite changes
    the ctime even when it keeps the mtime), or ``content`` (a hash of the bytes) when given,
    the transformation and the deflater."""
    from . import rawdeflate

    st = path.stat()
    ident: object = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if content:
        ident = (content, st.st_size)
    text = repr((_VERSION, ident, transform, level, rawdeflate.implementation()))
    return hashlib.sha256(text.encode()).hexdigest()


class DeflateCache:
    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.hits = 0
        self.stored = 0
        self._tmp: dict[int, Path] = {}  # entries being written: their temporary names
        self.foreign = 0  # entries found that this user did not write alone: not used

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / key

    def get(self, key: str) -> Entry | None:
        """The entry for ``key`` when its header is sound and its length matches; else None (and
        a damaged entry is removed). The stream's CRC-32 is the reader's to check."""
        path = self._path(key)
        try:
            with path.open("rb") as fh:
                st = os.fstat(fh.fileno())
                head = fh.read(HEAD.size)
        except OSError:
            return None
        if not _own(st):
            if not self.foreign:
                log.warning(
                    "deflate cache: %s is another user's or others may write to it: not used "
                    "(deflating again); give the cache folder to this user alone or set "
                    "bundle.deflate_cache to a folder of its own",
                    path,
                )
            self.foreign += 1
            return None
        length = st.st_size
        if len(head) == HEAD.size:
            magic, crc, size, csize, scrc, sha = HEAD.unpack(head)
            if magic == _MAGIC and length == HEAD.size + csize:
                with contextlib.suppress(OSError):
                    os.utime(path)
                return Entry(path, crc, size, csize, scrc, sha)
        self.discard(key)
        return None

    def discard(self, key: str) -> None:
        with contextlib.suppress(OSError):
            self._path(key).unlink()

    @contextlib.contextmanager
    def new_entry(self, key: str) -> Iterator[BinaryIO]:
        """A temporary file for ``key``'s entry, positioned after the header; the caller writes
        the stream and then :meth:`seal`; an exception discards it."""
        folder = self._path(key).parent
        if not folder.is_dir():
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            folder.mkdir(mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        fh = os.fdopen(fd, "w+b")
        self._tmp[id(fh)] = Path(tmp)
        try:
            fh.write(bytes(HEAD.size))
            yield fh
        except BaseException:
            fh.close()
            Path(tmp).unlink(missing_ok=True)
            raise
        finally:
            del self._tmp[id(fh)]
        fh.close()
        with contextlib.suppress(OSError):
            Path(tmp).unlink()

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
        os.replace(self._tmp[id(fh)], self._path(key))
        self.stored += 1

    def trim(self) -> None:
        """Remove the least recently used entries until the cache fits its bound, and the
        temporary entries killed runs left."""
        now = time.time()
        entries: list[tuple[float, int, Path]] = []
        for sub in self.folder.glob("??"):
            for path in sub.iterdir():
                with contextlib.suppress(OSError):
                    st = path.stat()
                    if path.name.startswith(".tmp-"):
                        if now - st.st_mtime > _STALE_TMP:
                            path.unlink()
                        continue
                    entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
            total -= size


def default_folder(env: Mapping[str, str]) -> Path:
    """$XDG_CACHE_HOME/rocm-build/deflate, else ~/.cache/rocm-build/deflate."""
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rocm-build" / "deflate"


_active: DeflateCache | None = None


def configure(setting: str, max_gb: float, env: Mapping[str, str] = os.environ) -> None:
    """Use the cache the settings describe for the wheel writers made from now on: ``setting``
    is its folder, ``""`` for the default one, ``none`` for no cache."""
    global _active
    if setting.strip().lower() == "none" or max_gb <= 0:
        _active = None
        return
    folder = Path(setting).expanduser() if setting else default_folder(env)
    _active = DeflateCache(folder, int(max_gb * 1e9))


def active() -> DeflateCache | None:
    """The cache new wheel writers use (None until :func:`configure` turns one on)."""
    return _active
