"""Downloading a ROCm tree from a URL (``--rocm URL``, ``rocm fetch``): resumed, retried,
checked and unpacked safely into the cache (re-exported by ``dist``)."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO
from urllib.parse import urldefrag, urlparse
from urllib.request import url2pathname

from rocm_build.common import faults, statefile, tempfiles
from rocm_build.common.errors import ConfigError, FetchError, FileAccessError, UnsafeInput
from rocm_build.common.masking import mask_url
from rocm_build.common.treepath import refuse_outside_links

if TYPE_CHECKING:
    import requests

__all__ = ["DOWNLOAD_RETRIES", "Progress", "cache_folder", "cached", "download_cache_dir", "fetch"]

log = logging.getLogger(__name__)

#: ``progress(done_bytes, total_bytes_or_None)``; the CLI renders it.
Progress = Callable[[int, int | None], None]
# Small reads keep what arrived before a dropped connection (it is resumed from there).
_NET_CHUNK = 1 << 16
_DONE = "download cache stamp"
_PART = "downloaded tarball"
_HINT = "set build.rocm_cache to a folder of your own"


def download_cache_dir(setting: str, env: Mapping[str, str], work_dir: Path) -> Path:
    """Where downloaded trees live: the setting, else $XDG_CACHE_HOME/rocm-build/rocm or
    ~/.cache/rocm-build/rocm, else under the work folder."""
    if setting:
        return Path(setting).expanduser()
    if env.get("XDG_CACHE_HOME"):
        return Path(env["XDG_CACHE_HOME"]) / "rocm-build" / "rocm"
    if env.get("HOME"):
        return Path(env["HOME"]) / ".cache" / "rocm-build" / "rocm"
    return work_dir / "rocm-downloads"


def _split_url(url: str, sha256: str) -> tuple[str, str]:
    plain, fragment = urldefrag(url)
    if fragment.startswith("sha256="):
        from_url = fragment.split("=", 1)[1]
        if sha256 and sha256.lower() != from_url.lower():
            msg = f"--sha256 {sha256} disagrees with the URL's #sha256={from_url}; keep one"
            raise ConfigError(msg)
        sha256 = from_url
    if sha256 and not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
        msg = f"'{sha256}' is not a sha256 (64 hex digits)"
        raise ConfigError(msg)
    return plain, sha256.lower()


#: Transient HTTP failures (rate limits, a mirror's 5xx, a refused connection) are retried this
#: many times, with exponential back-off (0, 2, 4, 8 s) or the server's Retry-After, before the
#: download fails and asks for another run.
DOWNLOAD_RETRIES = 4
_RETRY_STATUS = (429, 500, 502, 503, 504)


def _session() -> requests.Session:
    """A session whose requests are retried by urllib3's own ``Retry`` (requests' adapter)."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    retry = Retry(
        total=DOWNLOAD_RETRIES,
        backoff_factor=1.0,
        status_forcelist=_RETRY_STATUS,
        allowed_methods=frozenset({"GET"}),
        respect_retry_after_header=True,
        raise_on_status=False,  # the last answer is reported with its status
    )
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _download(
    url: str, dest: Path, progress: Progress | None, *, resume: bool = True, max_bytes: int = 0
) -> None:
    """``url`` to ``dest``. With ``resume`` a stopped download keeps its ``.part`` for the next
    run; without it nothing of a failed download is kept. ``max_bytes`` (0: no limit) stops a
    download that announces or sends more."""
    part = dest.with_name(dest.name + ".part")
    if resume:
        _download_part(url, dest, progress, max_bytes)
        return
    if statefile.check(part, _PART) is not None:
        part.unlink()  # a resumable download's leftover: this one starts afresh
    try:
        _download_part(url, dest, progress, max_bytes)
    except BaseException as exc:
        if statefile.check(part, _PART) is not None:
            part.unlink()
        if isinstance(exc, FetchError) and "run again to resume" in str(exc):
            text = str(exc).replace("run again to resume", "nothing was kept: run again")
            raise FetchError(text) from exc
        raise


def _too_big(url: str, size: int, max_bytes: int) -> FetchError:
    return FetchError(
        f"download of {mask_url(url)} is over {max_bytes} bytes ({size}); nothing was kept: "
        "check the URL"
    )


def _download_part(url: str, dest: Path, progress: Progress | None, max_bytes: int) -> None:
    import requests  # deferred: only downloads need it

    part = dest.with_name(dest.name + ".part")
    parsed = urlparse(url)
    if parsed.scheme == "file":
        source = Path(url2pathname(parsed.path))
        if not source.is_file():
            msg = f"{source} (from {mask_url(url)}) is not a file; check the URL"
            raise FetchError(msg)
        with source.open("rb") as inp, _open_part(part, append=False) as out:
            shutil.copyfileobj(inp, out, 1 << 20)
        part.replace(dest)
        return
    st = statefile.check(part, _PART)
    have = st.st_size if st is not None else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        with (
            _session() as session,
            session.get(url, headers=headers, stream=True, timeout=60) as resp,
        ):
            if resp.status_code == 416 and have:
                # The partial file is already complete (or bigger than the remote one).
                part.unlink()
                _download_part(url, dest, progress, max_bytes)
                return
            if resp.status_code in _RETRY_STATUS:
                msg = (
                    f"download of {mask_url(url)} failed: HTTP {resp.status_code} after "
                    f"{DOWNLOAD_RETRIES + 1} attempts; the server is busy or down: run again later"
                )
                raise FetchError(msg)
            if resp.status_code not in (200, 206):
                msg = f"download of {mask_url(url)} failed: HTTP {resp.status_code}; check the URL"
                raise FetchError(msg)
            resumed = resp.status_code == 206
            if not resumed:
                have = 0
            length = resp.headers.get("Content-Length")
            total = have + int(length) if length and length.isdigit() else None
            if max_bytes and total is not None and total > max_bytes:
                raise _too_big(url, total, max_bytes)
            if have:
                log.info("resuming download of %s at %d bytes", mask_url(url), have)
            with _open_part(part, append=resumed) as fh:
                done = have
                for chunk in resp.iter_content(_NET_CHUNK):
                    fh.write(chunk)
                    done += len(chunk)
                    if max_bytes and done > max_bytes:
                        raise _too_big(url, done, max_bytes)
                    if progress is not None:
                        progress(done, total)
            if total is not None and done != total:
                msg = (
                    f"download of {mask_url(url)} stopped at {done} of {total} bytes; "
                    "run again to resume"
                )
                raise FetchError(msg)
    except requests.RequestException as exc:
        msg = f"download of {mask_url(url)} failed ({exc.__class__.__name__}); run again to resume"
        raise FetchError(msg) from exc
    part.replace(dest)


def _open_part(part: Path, *, append: bool) -> BinaryIO:
    """The partial download, opened to write: never through a link planted at its name, never
    another user's file (``statefile.check``)."""
    statefile.check(part, _PART)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    flags |= os.O_APPEND if append else os.O_TRUNC
    try:
        fd = os.open(part, flags, 0o644)
    except OSError as exc:
        statefile.check(part, _PART)  # a link planted since (ELOOP)
        raise FileAccessError(f"cannot write {part} ({exc.strerror}); check the cache") from exc
    return os.fdopen(fd, "ab" if append else "wb")


def _sha256(path: Path) -> str:
    statefile.check(path, _PART)
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC), "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _tree_root_in(folder: Path) -> Path:
    """The tree inside an unpacked archive: the folder itself, or its single top folder."""
    entries = [p for p in folder.iterdir() if p.name not in (".", "..")]
    markers = ("lib", "bin", "include", ".info")
    if any(p.name in markers for p in entries):
        return folder
    dirs = [p for p in entries if p.is_dir() and not p.is_symlink()]
    if len(dirs) == 1:
        return _tree_root_in(dirs[0])
    return folder


def _unpack(archive: Path, dest: Path) -> None:
    tempfiles.sweep(dest.parent)  # what a killed unpack left
    with tempfiles.folder(dest.parent, dest.name) as tmp:
        try:
            limit = unpack_limit(archive.stat().st_size)
            if archive.suffix == ".zip":
                _unzip(archive, tmp, limit)
            else:
                with tarfile.open(archive) as tar:
                    tar.extractall(tmp, filter=_bounded_filter(archive.name, limit))  # noqa: S202
        except tarfile.FilterError as exc:
            msg = f"{archive.name} is unsafe: {exc}; refusing to unpack it"
            raise UnsafeInput(msg) from exc
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError) as exc:
            if isinstance(exc, OSError) and tempfiles.is_full(exc):
                raise  # the disk, not the archive: fetch says so
            kind = "zip archive" if archive.suffix == ".zip" else "tarball"
            msg = f"{archive.name} is not a readable {kind} ({exc}); check the URL"
            raise FetchError(msg) from exc
        refuse_outside_links(tmp, archive.name)
        faults.point("fetch.unpacked")
        root = _tree_root_in(tmp)
        if dest.exists():
            shutil.rmtree(dest)
        root.rename(dest)


def unpack_limit(archive_size: int) -> int:
    """The most bytes an archive of ``archive_size`` bytes may unpack to: 100 times its size
    (LLVM's and aotriton's archives unpack to under 10 times theirs), and at least 1 GiB."""
    return max(1 << 30, 100 * archive_size)


def _unpacks_too_big(name: str, limit: int) -> UnsafeInput:
    return UnsafeInput(
        f"{name} unpacks to more than {limit} bytes (a decompression bomb?); refusing to unpack it"
    )


def _bounded_filter(name: str, limit: int) -> Callable[[tarfile.TarInfo, str], tarfile.TarInfo]:
    """tarfile's data filter (no member outside the target, no absolute path, no link that
    points outside, no device file), and at most ``limit`` bytes in all, counted from each
    member's header before it is written."""
    total = 0

    def check(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo:
        nonlocal total
        member = tarfile.data_filter(member, dest)
        total += member.size
        if total > limit:
            raise _unpacks_too_big(name, limit)
        return member

    return check


def _unzip(archive: Path, dest: Path, limit: int) -> None:
    """A zip archive (Triton's JSON package) into ``dest``: a member with an absolute path, a
    ``..`` part or a link is refused (``zipfile`` would quietly rename the first two), and so
    is an archive whose members' declared sizes (which ``zipfile`` holds each one to) pass
    ``limit``."""
    with zipfile.ZipFile(archive) as zf:
        total = 0
        for info in zf.infolist():
            parts = Path(info.filename).parts
            link = stat.S_ISLNK(info.external_attr >> 16)
            if info.filename.startswith(("/", "\\")) or ".." in parts or link:
                msg = f"{archive.name} is unsafe: member {info.filename!r}; refusing to unpack it"
                raise UnsafeInput(msg)
            total += info.file_size
        if total > limit:
            raise _unpacks_too_big(archive.name, limit)
        zf.extractall(dest)  # noqa: S202 -- every member was checked above


def cache_folder(url: str, cache_dir: Path) -> Path:
    """The folder of ``cache_dir`` that ``fetch`` keeps the download of ``url`` in."""
    plain, _ = _split_url(url, "")
    return cache_dir / hashlib.sha256(mask_url(plain).encode()).hexdigest()[:16]


def cached(url: str, cache_dir: Path, sha256: str) -> Path | None:
    """The unpacked tree ``fetch`` left for ``url`` (of ``sha256``, when given), or None;
    reads, never writes."""
    folder = cache_folder(url, cache_dir)
    if statefile.check_folder(folder, "download cache folder") is None:
        return None
    tree = folder / "tree"
    return tree if _done(folder / "done.json", tree, sha256.lower()) else None


def fetch(
    url: str,
    *,
    cache_dir: Path,
    sha256: str = "",
    progress: Progress | None = None,
    resume: bool = True,
    max_bytes: int = 0,
) -> Path:
    """Download (resuming a partial download) and unpack a tarball of a ROCm tree into the
    cache; return the tree's root. An unchanged URL is not fetched again. Without ``resume``
    a failed download keeps nothing (``_download``); ``max_bytes`` bounds it."""
    plain, sha256 = _split_url(url, sha256)
    shown = mask_url(plain)  # what is logged and stored; a rotated token is the same tree
    folder = cache_folder(plain, cache_dir)
    tree = folder / "tree"
    stamp = folder / "done.json"
    statefile.own_folder(folder, "download cache folder")
    if _done(stamp, tree, sha256):
        log.info("ROCm tree from %s is already in %s", shown, tree)
        return tree
    name = Path(urlparse(plain).path).name or "rocm.tar"
    archive = folder / name
    try:
        if statefile.check(archive, _PART) is None:
            _download(plain, archive, progress, resume=resume, max_bytes=max_bytes)
        actual = _sha256(archive)  # not through a link planted at its name
        if sha256 and actual != sha256:
            archive.unlink()
            msg = f"{name} has sha256 {actual}, expected {sha256}; the download was deleted"
            raise FetchError(msg)
        _unpack(archive, tree)
    except OSError as exc:
        if not tempfiles.is_full(exc):
            raise
        kept = "what was downloaded is kept: run again to go on" if resume else "nothing was kept"
        free = shutil.disk_usage(folder).free
        msg = (
            f"no space left in {folder} while fetching {name} ({free / 1e6:,.0f} MB free); "
            f"{kept} once there is room, or move the download cache to a bigger disk"
        )
        raise FileAccessError(msg) from exc
    statefile.write_json(stamp, {"url": shown, "sha256": actual}, _DONE)
    archive.unlink()
    return tree


def _check_tree(tree: Path) -> bool:
    """Whether the unpacked tree is there; what stands in its place must be a folder of this
    user's, else it is refused: never used as the ROCm tree, never deleted through a link."""
    try:
        st = tree.lstat()
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
        return True
    if stat.S_ISLNK(st.st_mode):
        problem = "is a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        problem = "is not a folder"
    else:
        problem = f"belongs to another user (uid {st.st_uid})"
    msg = (
        f"the unpacked tree {tree} in the download cache {problem}, not one rocm-build "
        "unpacked; it was neither used nor deleted: move it away and run again"
    )
    raise FileAccessError(msg)


def _done(stamp: Path, tree: Path, sha256: str) -> bool:
    """Whether the cache holds the unpacked tree (of ``sha256``, when given). A stamp that is
    stale, damaged or of other types means no: the tree is fetched again."""
    there = _check_tree(tree)
    try:
        recorded = statefile.read_json(stamp, _DONE)
    except (FileNotFoundError, ValueError):
        return False
    if not there or not isinstance(recorded, dict):
        return False
    return not sha256 or recorded.get("sha256") == sha256
