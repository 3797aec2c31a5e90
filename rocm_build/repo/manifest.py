"""The source manifest (``<src-dir>/rocm-build-sources.json``) and the checkout state it records.

Per project the manifest keeps what decided the checkout (origin, ref and commit, patch series,
hipify command) hashed into a ``stamp``, and the HEAD of every repository (the project and its
submodules) when rocm-build left it; comparing those with the state now tells an up-to-date
checkout from one with the user's work in it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.common import faults, locks, statefile, tempfiles
from rocm_build.common.errors import ConfigError
from rocm_build.common.masking import mask_url
from rocm_build.repo import git

__all__ = [
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "RELATED_COMMITS",
    "ManifestEntry",
    "RelatedCommit",
    "SubmoduleEntry",
    "all_repos",
    "entry_problem",
    "has_commit",
    "heads_now",
    "parse_related_commits",
    "read_entry",
    "read_manifest",
    "recorded_heads",
    "stamp",
    "state_heads",
    "uncommitted",
    "update_manifest",
    "write_manifest",
]

log = logging.getLogger(__name__)

MANIFEST_NAME = "rocm-build-sources.json"


MANIFEST_FORMAT = 1


RELATED_COMMITS = "related_commits"


@dataclass(frozen=True)
class RelatedCommit:
    project: str
    branch: str
    commit: str
    origin: str


def parse_related_commits(text: str) -> dict[str, RelatedCommit]:
    """``os|source|project|branch|commit|origin`` lines; the first line per project wins."""
    out: dict[str, RelatedCommit] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("|")]
        if len(fields) != 6 or not git.SHA_RE.match(fields[4]):
            log.warning("related_commits: ignoring malformed line %r", line)
            continue
        _os, _source, project, branch, commit, origin = fields
        out.setdefault(project, RelatedCommit(project, branch, commit, origin))
    return out


def stamp(
    *,
    origin: str,
    ref: str,
    commit: str,
    patchset: str,
    series: Sequence[tuple[str, str]],
    hipify: Sequence[str],
    apply_patches: bool,
) -> str:
    """A hash of everything that decides a checkout's content."""
    data = {
        "format": MANIFEST_FORMAT,
        "origin": mask_url(origin),
        "ref": ref,
        "commit": commit,
        "patchset": patchset,
        "series": [list(p) for p in series],
        "hipify": list(hipify),
        "apply_patches": apply_patches,
    }
    return statefile.settings_digest(data)


@dataclass(frozen=True)
class SubmoduleEntry:
    path: str
    commit: str  # the upstream commit its parent records
    head: str  # its HEAD when rocm-build left it

    def as_json(self) -> dict[str, Any]:
        return {"path": self.path, "commit": self.commit, "head": self.head}


@dataclass(frozen=True)
class ManifestEntry:
    """One project's entry in the manifest: what decided its checkout (hashed into ``stamp``)
    and the HEADs rocm-build left. ``as_json`` is the file's form (unchanged); ``from_json``
    reads an entry ``read_manifest`` checked (a missing key reads as its default)."""

    origin: str = ""  # masked: git's remote config keeps the real one
    ref: str = ""
    ref_kind: str = ""
    commit: str = ""
    head: str = ""
    submodules: tuple[SubmoduleEntry, ...] = ()
    patchset: str = ""
    patches_dir: str = ""
    patches: tuple[Mapping[str, str], ...] = ()  # {repo, stage, file, sha256}
    apply_patches: bool = True
    hipify: bool = False  # hipify ran
    hipify_command: tuple[str, ...] = ()
    depth: int | None = None
    stamp: str = ""
    complete: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "ref": self.ref,
            "ref_kind": self.ref_kind,
            "commit": self.commit,
            "head": self.head,
            "submodules": [s.as_json() for s in self.submodules],
            "patchset": self.patchset,
            "patches_dir": self.patches_dir,
            "patches": [dict(p) for p in self.patches],
            "apply_patches": self.apply_patches,
            "hipify": self.hipify,
            "hipify_command": list(self.hipify_command),
            "depth": self.depth,
            "stamp": self.stamp,
            "complete": self.complete,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ManifestEntry:
        return cls(
            origin=str(data.get("origin", "")),
            ref=str(data.get("ref", "")),
            ref_kind=str(data.get("ref_kind", "")),
            commit=str(data.get("commit", "")),
            head=str(data.get("head", "")),
            submodules=tuple(
                SubmoduleEntry(
                    str(s["path"]),
                    str(s.get("commit", "")),
                    str(s.get("head", s.get("commit", ""))),
                )
                for s in data.get("submodules", [])
            ),
            patchset=str(data.get("patchset", "")),
            patches_dir=str(data.get("patches_dir", "")),
            patches=tuple(dict(p) for p in data.get("patches", [])),
            apply_patches=bool(data.get("apply_patches", True)),
            hipify=bool(data.get("hipify", False)),
            hipify_command=tuple(data.get("hipify_command", [])),
            depth=data.get("depth"),
            stamp=str(data.get("stamp", "")),
            complete=bool(data.get("complete", False)),
        )

    @property
    def heads(self) -> dict[str, str]:
        """The HEAD of every repository (``.`` and each submodule) when rocm-build left it."""
        return {".": self.head, **{s.path: s.head for s in self.submodules}}


_WHAT = "source manifest"


def _load(path: Path, replay: bool) -> Any:
    """The JSON in the manifest ``path``, None when there is none. The src-dir's manifest is a
    state file (``statefile``: a link, a FIFO, a folder or another user's file in its place is
    refused, exit 14); a ``--manifest`` to replay is an input like any file the user names."""
    try:
        if not replay:
            return statefile.read_json(path, _WHAT)
        if not path.is_file():
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, RecursionError) as exc:
        reason = str(exc) if not isinstance(exc, RecursionError) else "nested too deep"
        msg = f"{path} is not a readable source manifest ({reason}); fix or remove it"
        raise ConfigError(msg) from None


def read_manifest(path: Path, *, replay: bool = False) -> dict[str, Any]:
    """The manifest at ``path`` (an empty one when there is none), checked to have the types
    rocm-build writes (``ConfigError``, exit 2, naming what does not). ``replay``: a manifest
    the user named (``checkout --manifest``), not the src-dir's own."""
    data = _load(path, replay)
    if data is None:
        return {"format": MANIFEST_FORMAT, "projects": {}}
    if not isinstance(data, dict) or not isinstance(data.get("projects"), dict):
        msg = f"{path} is not a rocm-build source manifest; fix or remove it"
        raise ConfigError(msg)
    for name, entry in data["projects"].items():
        problem = entry_problem(entry)
        if problem:
            msg = f"{path}: project '{name}': {problem}; fix the file or remove it"
            raise ConfigError(msg)
    return data


def read_entry(path: Path, name: str) -> ManifestEntry | None:
    """Project ``name``'s entry in the src-dir's manifest at ``path`` (None when it has none)."""
    entry = read_manifest(path)["projects"].get(name)
    return None if entry is None else ManifestEntry.from_json(entry)


_STRINGS = ("origin", "ref", "ref_kind", "commit", "head", "patchset", "patches_dir", "stamp")
_FLAGS = ("apply_patches", "hipify", "complete")


def _str_list(value: Any, keys: Sequence[str]) -> bool:
    """``value`` is a list of objects whose ``keys`` (those present) are strings."""
    return isinstance(value, list) and all(
        isinstance(item, dict) and all(isinstance(item.get(k, ""), str) for k in keys)
        for item in value
    )


def entry_problem(entry: Any) -> str:
    """What makes ``entry`` not a project entry of a source manifest ("" when nothing does):
    every value a run reads back has the type rocm-build writes."""
    if not isinstance(entry, dict):
        return "not an object"
    for key in _STRINGS:
        if not isinstance(entry.get(key, ""), str):
            return f"'{key}' is not a string"
    for key in _FLAGS:
        if not isinstance(entry.get(key, False), bool):
            return f"'{key}' is not true or false"
    depth = entry.get("depth")
    if depth is not None and (isinstance(depth, bool) or not isinstance(depth, int) or depth < 0):
        return "'depth' is not a whole number"
    command = entry.get("hipify_command", [])
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        return "'hipify_command' is not a list of strings"
    if not _str_list(entry.get("submodules", []), ("path", "commit", "head")):
        return "'submodules' is not a list of {path, commit, head}"
    if not _str_list(entry.get("patches", []), ("repo", "stage", "file", "sha256")):
        return "'patches' is not a list of {file, sha256}"
    if any("path" not in sub for sub in entry.get("submodules", [])):
        return "'submodules': one has no path"
    if any("file" not in p or "sha256" not in p for p in entry.get("patches", [])):
        return "'patches': one has no file or sha256"
    return ""


def write_manifest(path: Path, data: Mapping[str, Any]) -> None:
    text = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")
    try:
        if statefile.read_bytes(path, _WHAT) == text:
            return
    except (FileNotFoundError, ValueError):
        pass
    statefile.write_bytes(path, text, _WHAT)


def update_manifest(path: Path, name: str, entry: Mapping[str, Any]) -> None:
    """Set one project's entry under the manifest's own lock, re-reading the file first, so
    runs on other projects of the same src-dir keep theirs. Temp files that killed runs left
    are removed here (the lock makes them nobody's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with locks.hold(path, f"the source manifest {path}"):
        tempfiles.remove_stale(path.parent, f".{path.name}.")
        data = read_manifest(path)
        data["format"] = MANIFEST_FORMAT
        data["projects"][name] = dict(entry)
        faults.point("manifest.before-write")
        write_manifest(path, data)


def all_repos(src: Path) -> list[tuple[str, Path]]:
    return [(".", src), *((s.path, src / s.path) for s in git.submodules(src))]


def state_heads(src: Path) -> dict[str, str]:
    return {".": git.head(src), **{s.path: s.commit for s in git.submodules(src)}}


def recorded_heads(entry: Mapping[str, Any]) -> dict[str, str]:
    heads = {".": str(entry.get("head", ""))}
    for sub in entry.get("submodules", []):
        heads[str(sub["path"])] = str(sub.get("head", sub.get("commit", "")))
    return heads


def uncommitted(src: Path, repos: Sequence[str] | None = None) -> list[str]:
    rels = list(repos) if repos is not None else [r for r, _ in all_repos(src)]

    def one(rel: str) -> list[str]:
        prefix = "" if rel == "." else rel + "/"
        return [prefix + p for p in git.changed_paths(src if rel == "." else src / rel)]

    # Independent read-only questions: ask them in parallel (most of a re-run's time).
    with ThreadPoolExecutor(max_workers=4) as pool:
        return [path for paths in pool.map(one, rels) for path in paths]


def has_commit(src: Path) -> bool:
    return git.run(src, "rev-parse", "-q", "--verify", "HEAD", check=False).status == 0


def heads_now(src: Path) -> dict[str, str]:
    """HEAD of every repo that has one (an interrupted first checkout may have none yet)."""
    if not git.is_repo(src) or not has_commit(src):
        return {}
    return state_heads(src)
