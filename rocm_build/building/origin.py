"""Which source a project's checkout came from, as ``build --dry-run`` says it.

The source manifest (``rocm-build-sources.json``) records the origin, ref, commit and patch series
each checkout used. Its origin is named against this run's settings: ``fork`` (a ``[forks.NAME]``
origin, or ``triton.fork_url``), ``upstream`` (the project's own repository: its configured origin
before ``source = "fork"``, or ``triton.upstream_url``), or ``other`` (neither, as an ``--origin``
given to ``checkout``). A checkout the manifest does not know was not made by rocm-build.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.common.errors import ConfigError
from rocm_build.common.masking import mask_url
from rocm_build.config.loader import Config
from rocm_build.repo.manifest import MANIFEST_NAME, read_manifest
from rocm_build.repo.tritonpin import TRITON

__all__ = ["Source", "origin_kind", "read_sources"]


@dataclass(frozen=True)
class Source:
    """Where one project's checkout came from (``kind`` "" = not recorded)."""

    kind: str  # "upstream", "fork", "other" or ""
    text: str  # one line for the plan

    def as_json(self) -> dict[str, str]:
        return {"kind": self.kind or "unknown", "text": self.text}


def _same(a: str, b: str) -> bool:
    def norm(url: str) -> str:
        return mask_url(url).strip().rstrip("/").removesuffix(".git").lower()

    return bool(a and b) and norm(a) == norm(b)


def origin_kind(cfg: Config, name: str, origin: str) -> str:
    """``fork``, ``upstream`` or ``other`` for a checkout of ``name`` from ``origin``."""
    if name == TRITON:
        forks, own = [cfg.triton.fork_url], [cfg.triton.upstream_url]
    else:
        table = cfg.forks.get(name)
        forks = [str(table.get("origin") or "")] if isinstance(table, Mapping) else []
        own = [cfg.own_origins.get(name, "")]
    if any(_same(origin, url) for url in forks):
        return "fork"
    if any(_same(origin, url) for url in own):
        return "upstream"
    return "other"


def _setting(cfg: Config, name: str) -> str:
    """The source this run's settings would check ``name`` out from ("" = no choice)."""
    if name == TRITON:
        return cfg.triton.repo
    return cfg.general.source if name in cfg.forks else ""


def _describe(cfg: Config, name: str, entry: Mapping[str, Any]) -> Source:
    origin = str(entry.get("origin") or "")
    kind = origin_kind(cfg, name, origin)
    ref, commit = str(entry.get("ref") or ""), str(entry.get("commit") or "")
    what = f"{entry.get('ref_kind') or 'ref'} {ref}" if ref else "a pinned commit"
    count = len(entry.get("patches") or [])
    series = f"series {entry.get('patchset') or '?'}"
    patched = f"{count} patch{'es' if count != 1 else ''} of {series}" if count else "no patches"
    text = f"{kind}: {origin}, {what} at {commit[:12] or '?'}, {patched}"
    wanted = _setting(cfg, name)
    if wanted and kind in ("upstream", "fork") and kind != wanted:
        key = "triton.repo" if name == TRITON else "source"
        text += f" (this run's {key} is {wanted}: run checkout again to switch)"
    return Source(kind, text)


def read_sources(cfg: Config, src_dir: Path, names: list[str]) -> dict[str, Source]:
    """Per project, where its checkout in ``src_dir`` came from (the source manifest)."""
    path = src_dir / MANIFEST_NAME
    try:
        entries = read_manifest(path)["projects"]
    except ConfigError as err:
        return {name: Source("", f"unknown: {err}") for name in names}
    out: dict[str, Source] = {}
    for name in names:
        entry = entries.get(name)
        if isinstance(entry, Mapping):
            out[name] = _describe(cfg, name, entry)
        else:
            text = f"not recorded: {path} has no entry (a checkout rocm-build did not make)"
            out[name] = Source("", text)
    return out
