"""Compiler cache selection for builds: ccache or sccache, with optional shared remote storage.

``resolve_cache`` finds the cache program and returns a frozen ``CompilerCache`` whose ``env`` is
what a build adds to its environment: the CMake launcher variables (CMake reads
``CMAKE_<LANG>_COMPILER_LAUNCHER`` from the environment, and torch's setup passes ``CMAKE_*``
through), the local cache folder, settings that let a checkout in another folder (another CI job,
another developer) hit the same entries, and the remote storage given by ``url`` (the
``build.cache_url`` setting, ``--cache-url``).

The decision is pure (``plan_cache``: kind, program, version, URL -> CompilerCache) so it is
unit-tested without processes; ``resolve_cache`` only adds finding the program and asking it for
its version and storage backends.
"""

from __future__ import annotations

import logging
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit, urlunsplit

from rocm_build.common import proc
from rocm_build.common.errors import ConfigError, ToolMissing
from rocm_build.common.masking import mask_url, mask_values

__all__ = [
    "KINDS",
    "CompilerCache",
    "ToolInfo",
    "mask_url",
    "mask_values",
    "parse_ccache_version",
    "parse_sccache_version",
    "plan_cache",
    "resolve_cache",
    "tool_info",
]

log = logging.getLogger(__name__)

KINDS = ("auto", "ccache", "sccache", "none")

LAUNCHER_VARS = (
    "CMAKE_C_COMPILER_LAUNCHER",
    "CMAKE_CXX_COMPILER_LAUNCHER",
    "CMAKE_HIP_COMPILER_LAUNCHER",
    # hipcc (ROCm 7.13 and newer) runs clang through it: the device code of hipcc builds
    # (torch 2.9-2.12), which the CMake launchers never see. Older hipccs: ``hiplauncher``.
    "HIP_CLANG_LAUNCHER",
)

INSTALL_HINT = {
    "ccache": "install it (apt-get install ccache, dnf install ccache, or conda install ccache), "
    "or pass --cache none",
    "sccache": "install it (cargo install sccache, a release binary from "
    "https://github.com/mozilla/sccache/releases, or apt-get install sccache), "
    "or pass --cache none",
}

# Hits across folders: paths under base_dir are hashed relative to the working directory, the
# working directory itself is not hashed, and the compiler is identified by its content (the
# same ROCm clang unpacked on another machine has another mtime). The sloppiness drops checks
# that fail on every fresh checkout without making results wrong for a pinned source tree.
CCACHE_SLOPPINESS = "include_file_ctime,include_file_mtime,locale,pch_defines,time_macros"

# Schemes each ccache storage backend (as listed in `ccache --version` "Features") accepts.
CCACHE_BACKEND_SCHEMES = {
    "file-storage": ("file",),
    "http-storage": ("http",),
    "redis-storage": ("redis",),
    "redis+unix-storage": ("redis+unix",),
}
SCCACHE_SCHEMES = ("redis", "rediss", "s3", "gs", "gcs", "http", "https")


@dataclass(frozen=True)
class ToolInfo:
    """What the installed cache program is and what it can do."""

    version: tuple[int, ...]
    features: frozenset[str] = frozenset()
    # URL schemes served by storage helper programs (ccache-storage-<scheme>, ccache 4.13+).
    helpers: frozenset[str] = frozenset()


@dataclass(frozen=True, repr=False)
class CompilerCache:
    """The compiler cache a build uses. ``env`` holds the variables to add to the build's
    environment (empty for ``none``). ``str()`` and ``repr()`` mask passwords in URLs, so the
    object can be shown and logged as it is."""

    kind: str
    program: Path | None = None
    env: Mapping[str, str] = field(default_factory=lambda: types.MappingProxyType({}))
    url: str = ""
    version: tuple[int, ...] = ()

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    @property
    def display_url(self) -> str:
        """``url`` with any password masked, for logs and reports."""
        return _mask(self.url)

    def describe(self) -> str:
        if not self.enabled:
            return "no compiler cache"
        version = ".".join(str(v) for v in self.version)
        remote = f", remote {self.display_url}" if self.url else ", local only"
        return f"{self.kind} {version} ({self.program}){remote}"

    def __str__(self) -> str:
        return self.describe()

    def __repr__(self) -> str:
        env = {k: _mask(v) for k, v in self.env.items()}
        return (
            f"CompilerCache(kind={self.kind!r}, program={self.program!r}, env={env!r}, "
            f"url={self.display_url!r}, version={self.version!r})"
        )


_mask = mask_url


def parse_ccache_version(text: str) -> ToolInfo:
    """``ccache --version`` output -> version and storage features."""
    match = re.search(r"ccache version (\d+(?:\.\d+)*)", text)
    if not match:
        msg = "could not read the ccache version; is it ccache 4.x? (pass --cache none to skip)"
        raise ToolMissing(msg)
    version = tuple(int(p) for p in match.group(1).split("."))
    features_line = re.search(r"^Features:\s*(.*)$", text, re.MULTILINE)
    features = frozenset(features_line.group(1).split()) if features_line else frozenset()
    return ToolInfo(version, features)


def parse_sccache_version(text: str) -> ToolInfo:
    match = re.search(r"sccache (\d+(?:\.\d+)*)", text)
    if not match:
        msg = "could not read the sccache version (pass --cache none to skip)"
        raise ToolMissing(msg)
    return ToolInfo(tuple(int(p) for p in match.group(1).split(".")))


def tool_info(kind: str, program: Path, env: Mapping[str, str], url: str = "") -> ToolInfo:
    """Ask the installed program for its version (and, for ccache, its storage backends and
    the storage helpers on PATH for the schemes in ``url``)."""
    result = proc.run([program, "--version"], env=env, capture=True, what=f"{kind} --version")
    if kind != "ccache":
        return parse_sccache_version(result.stdout)
    info = parse_ccache_version(result.stdout)
    if "crsh-storage" not in info.features:
        return info
    schemes = {_scheme_of(u) for u in url.split()} - {""}
    helpers = {s for s in schemes if _find(f"ccache-storage-{s}", env) is not None}
    return ToolInfo(info.version, info.features, frozenset(helpers))


def _ccache_schemes(info: ToolInfo) -> tuple[str, ...]:
    if info.features:
        features = sorted(info.features)
        builtin = [s for feat in features for s in CCACHE_BACKEND_SCHEMES.get(feat, ())]
    else:
        # Versions that do not list features: the backends ccache 4.4 shipped with.
        builtin = ["file", "http", "redis"]
    return tuple(dict.fromkeys([*builtin, *sorted(info.helpers)]))


def _scheme_of(url: str) -> str:
    # ccache remote specs may carry "|attribute=value" suffixes; the scheme is before "://" or ":".
    head = url.split("|", 1)[0]
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", head)
    return match.group(1).lower() if match else ""


def _only_sccache(url: str) -> bool:
    schemes = {_scheme_of(u) for u in url.split()}
    return bool(schemes) and all(s in ("s3", "gs", "gcs", "rediss", "https") for s in schemes)


def _ccache_env(
    program: Path, info: ToolInfo, url: str, cache_dir: Path | None, base_dir: Path | None
) -> dict[str, str]:
    env = dict.fromkeys(LAUNCHER_VARS, str(program))
    if cache_dir is not None:
        env["CCACHE_DIR"] = str(cache_dir)
    if base_dir is not None:
        env["CCACHE_BASEDIR"] = str(base_dir)
    env["CCACHE_NOHASHDIR"] = "1"
    env["CCACHE_COMPILERCHECK"] = "content"
    env["CCACHE_SLOPPINESS"] = CCACHE_SLOPPINESS
    if info.version >= (4, 5):
        # Content checks of a 100+ MB clang on every compile are slow without it.
        env["CCACHE_INODECACHE"] = "1"
    if url:
        if info.version < (4, 4):
            version = ".".join(str(v) for v in info.version)
            msg = (
                f"ccache {version} has no remote storage; --cache-url needs ccache 4.4 or newer "
                "(or --cache sccache)"
            )
            raise ConfigError(msg)
        allowed = _ccache_schemes(info)
        for spec in url.split():
            scheme = _scheme_of(spec)
            if scheme not in allowed:
                other = " (sccache can: pass --cache sccache)" if scheme in SCCACHE_SCHEMES else ""
                if "crsh-storage" in info.features and scheme:
                    other += f" (or install the storage helper ccache-storage-{scheme})"
                msg = (
                    f"--cache-url '{_mask(spec)}': ccache cannot use '{scheme or spec}' storage"
                    f"{other}; ccache here supports {', '.join(s + '://' for s in allowed)}"
                )
                raise ConfigError(msg)
            if scheme in ("redis", "http") and not urlsplit(spec.split("|", 1)[0]).hostname:
                msg = f"--cache-url '{_mask(spec)}' has no host; e.g. redis://cache.example:6379"
                raise ConfigError(msg)
        # ccache 4.4-4.6 called it secondary storage.
        name = "CCACHE_REMOTE_STORAGE" if info.version >= (4, 7) else "CCACHE_SECONDARY_STORAGE"
        env[name] = url
    return env


def _sccache_env(
    program: Path, info: ToolInfo, url: str, cache_dir: Path | None, base_dir: Path | None
) -> dict[str, str]:
    env = dict.fromkeys(LAUNCHER_VARS, str(program))
    if cache_dir is not None:
        env["SCCACHE_DIR"] = str(cache_dir)
    if base_dir is not None:
        # Newer sccaches (0.16; not 0.13) strip it from what they hash (older ones ignore the
        # variable); the server reads it when it starts, not per compile.
        env["SCCACHE_BASEDIRS"] = str(base_dir)
    # The server must outlive pauses between projects; stats are read from it after the build.
    env["SCCACHE_IDLE_TIMEOUT"] = "0"
    if not url:
        return env
    if len(url.split()) != 1:
        msg = f"--cache-url '{_mask(url)}': sccache uses one remote storage, not several"
        raise ConfigError(msg)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    prefix = parts.path.strip("/")
    if scheme in ("redis", "rediss"):
        if not parts.hostname:
            msg = f"--cache-url '{_mask(url)}' has no host; e.g. redis://cache.example:6379"
            raise ConfigError(msg)
        # sccache 0.8 moved Redis to SCCACHE_REDIS_ENDPOINT (OpenDAL); before it, SCCACHE_REDIS.
        name = "SCCACHE_REDIS_ENDPOINT" if info.version >= (0, 8) else "SCCACHE_REDIS"
        env[name] = url
    elif scheme == "s3":
        if not parts.hostname:
            msg = (
                f"--cache-url '{url}' needs a bucket: s3://BUCKET[/PREFIX][?endpoint=URL&region=R]"
            )
            raise ConfigError(msg)
        env["SCCACHE_BUCKET"] = parts.netloc
        if prefix:
            env["SCCACHE_S3_KEY_PREFIX"] = prefix
        if "endpoint" in query:
            endpoint = urlsplit(query["endpoint"])
            env["SCCACHE_ENDPOINT"] = endpoint.netloc or query["endpoint"]
            if endpoint.scheme:
                env["SCCACHE_S3_USE_SSL"] = "true" if endpoint.scheme == "https" else "false"
        if "region" in query:
            env["SCCACHE_REGION"] = query["region"]
    elif scheme in ("gs", "gcs"):
        if not parts.hostname:
            msg = f"--cache-url '{url}' needs a bucket: gs://BUCKET[/PREFIX]"
            raise ConfigError(msg)
        env["SCCACHE_GCS_BUCKET"] = parts.netloc
        if prefix:
            env["SCCACHE_GCS_KEY_PREFIX"] = prefix
        env["SCCACHE_GCS_RW_MODE"] = query.get("mode", "READ_WRITE").upper()
    elif scheme in ("http", "https"):
        if info.version < (0, 4):
            msg = "sccache before 0.4 has no WebDAV storage; upgrade sccache for http(s) URLs"
            raise ConfigError(msg)
        env["SCCACHE_WEBDAV_ENDPOINT"] = urlunsplit(parts)
    else:
        msg = (
            f"--cache-url '{_mask(url)}': sccache cannot use '{scheme or url}' storage; "
            "use redis://, rediss://, s3://BUCKET, gs://BUCKET or http(s):// (WebDAV)"
        )
        raise ConfigError(msg)
    return env


def plan_cache(
    kind: str,
    program: Path | None,
    info: ToolInfo | None,
    url: str = "",
    cache_dir: Path | None = None,
    *,
    base_dir: Path | None = None,
) -> CompilerCache:
    """The compiler cache for ``kind`` (ccache, sccache or none) given what is installed."""
    url = url.strip()
    if kind == "none":
        if url:
            msg = "--cache-url needs a compiler cache; drop --cache none (or the URL)"
            raise ConfigError(msg)
        return CompilerCache("none")
    if kind not in ("ccache", "sccache"):
        msg = f"unknown compiler cache '{kind}'; use one of {', '.join(KINDS)}"
        raise ConfigError(msg)
    if program is None or info is None:
        raise ToolMissing(f"'{kind}' was not found on PATH: {INSTALL_HINT[kind]}")
    if kind == "ccache":
        env = _ccache_env(program, info, url, cache_dir, base_dir)
    else:
        env = _sccache_env(program, info, url, cache_dir, base_dir)
    return CompilerCache(kind, program, types.MappingProxyType(env), url=url, version=info.version)


def _find(kind: str, env: Mapping[str, str]) -> Path | None:
    try:
        return Path(proc.which(kind, env))
    except ToolMissing:
        return None


def resolve_cache(
    kind: str,
    url: str,
    env: Mapping[str, str],
    cache_dir: Path | None = None,
    *,
    base_dir: Path | None = None,
) -> CompilerCache:
    """Pick and configure the compiler cache.

    ``auto`` is ccache when it is on ``env['PATH']``, else none; with a URL only sccache can use
    (s3://, gs://, rediss://, https://) ``auto`` takes sccache when that is installed. A cache
    asked for by name but missing is ``ToolMissing``; a URL the cache cannot use is
    ``ConfigError``. ``base_dir`` is the folder under which checkouts in different places should
    share entries (ccache's base_dir).
    """
    kind = (kind or "auto").strip().lower()
    url = (url or "").strip()
    if kind not in KINDS:
        msg = f"unknown compiler cache '{kind}'; use one of {', '.join(KINDS)}"
        raise ConfigError(msg)
    if kind == "auto":
        ccache = _find("ccache", env)
        sccache = _find("sccache", env) if url else None
        if url and _only_sccache(url) and sccache is not None:
            kind = "sccache"
        elif ccache is not None:
            kind = "ccache"
        elif url and sccache is not None:
            kind = "sccache"
        elif url:
            msg = f"--cache-url needs ccache or sccache on PATH: {INSTALL_HINT['ccache']}"
            raise ToolMissing(msg)
        else:
            log.debug("no ccache on PATH: building without a compiler cache")
            return CompilerCache("none")
    if kind == "none":
        return plan_cache("none", None, None, url)
    program = _find(kind, env)
    if program is None:
        raise ToolMissing(f"'{kind}' was not found on PATH: {INSTALL_HINT[kind]}")
    info = tool_info(kind, program, env, url)
    cache = plan_cache(kind, program, info, url, cache_dir, base_dir=base_dir)
    log.info("compiler cache: %s", cache.describe())
    return cache
