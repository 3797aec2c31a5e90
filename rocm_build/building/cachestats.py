"""A compiler cache's counters: read after a build (``statistics``: ``CacheStats``, what
``rocm-build build`` prints and ``--json`` gives), reset before it (``zero_stats``) so that they
show that build alone, and the two tools' own statistics formats parsed
(``parse_ccache_stats``, ``parse_sccache_stats``). Which cache a build uses is
:mod:`.compilercache`'s."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rocm_build.building.compilercache import CompilerCache
from rocm_build.common import proc
from rocm_build.common.errors import ToolMissing

__all__ = [
    "CacheStats",
    "cache_stats",
    "parse_ccache_stats",
    "parse_sccache_stats",
    "statistics",
    "zero_stats",
]


def parse_ccache_stats(text: str) -> dict[str, int]:
    """``ccache --print-stats`` (tab-separated counter id and value) -> hits, misses, remote."""
    raw: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition("\t")
        if value.strip().isdigit():
            raw[name.strip()] = int(value)
    # ccache 4.4-4.6 named the remote counters secondary_storage_*.
    remote = (
        "remote_storage"
        if any(k.startswith("remote_storage") for k in raw)
        else "secondary_storage"
    )
    return {
        "hits": raw.get("direct_cache_hit", 0) + raw.get("preprocessed_cache_hit", 0),
        "misses": raw.get("cache_miss", 0),
        "direct_hits": raw.get("direct_cache_hit", 0),
        "preprocessed_hits": raw.get("preprocessed_cache_hit", 0),
        "local_hits": raw.get("local_storage_hit", 0),
        "local_misses": raw.get("local_storage_miss", 0),
        "remote_hits": raw.get(f"{remote}_hit", 0),
        "remote_misses": raw.get(f"{remote}_miss", 0),
        "remote_errors": raw.get(f"{remote}_error", 0) + raw.get(f"{remote}_timeout", 0),
        "uncacheable": sum(
            v
            for k, v in raw.items()
            if k
            in (
                "called_for_link",
                "called_for_preprocessing",
                "multiple_source_files",
                "no_input_file",
                "unsupported_code_directive",
                "unsupported_compiler_option",
                "unsupported_source_language",
                "compiler_produced_stdout",
                "output_to_stdout",
                "autoconf_test",
            )
        ),
    }


def _count(entry: Any) -> int:
    """sccache counters are ``{"counts": {"C/C++": 3, ...}}`` or plain integers."""
    if isinstance(entry, int):
        return entry
    if isinstance(entry, Mapping):
        counts = entry.get("counts", {})
        if isinstance(counts, Mapping):
            return sum(int(v) for v in counts.values())
    return 0


def _language(entry: Any, language: str) -> int:
    counts = entry.get("counts", {}) if isinstance(entry, Mapping) else {}
    return int(counts.get(language, 0)) if isinstance(counts, Mapping) else 0


def parse_sccache_stats(text: str) -> dict[str, int]:
    """``sccache --show-stats --stats-format json`` -> hits, misses (one storage: all remote
    when a URL is configured); ``hip_hits``/``hip_misses``: the HIP compiles among them (host
    and device code of a ``-x hip`` compile, which sccache counts as language HIP)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        msg = "sccache printed statistics that are not JSON; is it sccache 0.3 or newer?"
        raise ToolMissing(msg) from None
    stats = data.get("stats", data)
    return {
        "hits": _count(stats.get("cache_hits")),
        "misses": _count(stats.get("cache_misses")),
        "errors": _count(stats.get("cache_errors")),
        "requests": int(stats.get("compile_requests", 0) or 0),
        "uncacheable": int(stats.get("requests_not_cacheable", 0) or 0),
        "hip_hits": _language(stats.get("cache_hits"), "HIP"),
        "hip_misses": _language(stats.get("cache_misses"), "HIP"),
    }


def _tool_env(cache: CompilerCache, env: Mapping[str, str]) -> dict[str, str]:
    return {**env, **cache.env}


def cache_stats(cache: CompilerCache, env: Mapping[str, str]) -> dict[str, int]:
    """The cache's own statistics (since the last ``zero_stats``); ``{}`` for none."""
    if not cache.enabled or cache.program is None:
        return {}
    full = _tool_env(cache, env)
    if cache.kind == "ccache":
        result = proc.run([cache.program, "--print-stats"], env=full, capture=True)
        return parse_ccache_stats(result.stdout)
    result = proc.run(
        [cache.program, "--show-stats", "--stats-format", "json"], env=full, capture=True
    )
    return parse_sccache_stats(result.stdout)


@dataclass(frozen=True)
class CacheStats:
    """A build's compiler cache and its counters (:func:`cache_stats`: ``hits``, ``misses`` and
    the tool's own, by name; none when there is no cache)."""

    kind: str
    enabled: bool = False
    counters: Mapping[str, int] = field(default_factory=dict)

    @property
    def hits(self) -> int:
        return self.counters.get("hits", 0)

    @property
    def misses(self) -> int:
        return self.counters.get("misses", 0)

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.counters}


def statistics(cache: CompilerCache, env: Mapping[str, str]) -> CacheStats:
    """The cache and its counters since the last ``zero_stats``."""
    return CacheStats(cache.kind, cache.enabled, cache_stats(cache, env))


def zero_stats(cache: CompilerCache, env: Mapping[str, str]) -> None:
    """Reset the counters, so ``cache_stats`` after a build shows that build alone."""
    if not cache.enabled or cache.program is None:
        return
    proc.run([cache.program, "--zero-stats"], env=_tool_env(cache, env), capture=True)
