"""Which version a project's build is told to use, taken the way release builds take it.

Upstream PyTorch keeps ``version.txt`` at ``X.Y.0a0`` on its release tags too; its official
builds take the version from the tag (``v2.9.1`` -> ``2.9.1``, a ``-rcN`` suffix dropped, as
PyTorch's ``tools/generate_torch_version.py`` does), and a build of a branch or a commit is a
development build, ``version.txt`` + ``+git<sha8>`` (as TheRock's dev builds are named). A project
with ``version_from_tag`` false keeps ``version.txt`` as it is (torchvision and torchaudio bump
theirs on their release branches).

What the checkout fetched (``rocm-build-sources.json``: ref, ref kind and upstream commit) is
asked first; a checkout rocm-build did not make is asked through git (the tags on its upstream
commit, ``ROCM_BUILD_UPSTREAM`` or ``HEAD``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from rocm_build.common.errors import ConfigError, DirtyCheckout, RocmBuildError
from rocm_build.config.loader import ProjectSpec
from rocm_build.repo import checkoutfile, git
from rocm_build.repo.manifest import MANIFEST_NAME, read_manifest
from rocm_build.repo.worktree import WorkTree

__all__ = [
    "DIRTY",
    "RELEASE_TAG",
    "Revision",
    "mark_dirty",
    "project_version",
    "read_revision",
    "refuse_dirty",
    "release_version",
]

#: A release tag: ``v2.9.1``, ``v2.10.0-rc3``.
RELEASE_TAG = re.compile(r"^v(\d+\.\d+(?:\.\d+)*)(?:-rc\d+)?$")
_UPSTREAM_TAG = "ROCM_BUILD_UPSTREAM"  # patches.UPSTREAM_TAG (not imported: a lower module)


@dataclass(frozen=True)
class Revision:
    """What a checkout was made from, as far as the version is concerned."""

    commit: str  # the upstream commit ("" when unknown: not a git checkout)
    tag: str = ""  # a release tag on that commit ("" = none: a development build)
    ref: str = ""  # the ref the checkout fetched, when rocm-build made it

    def describe(self) -> str:
        if self.tag:
            return f"release tag {self.tag}"
        if self.commit:
            what = f"{self.ref} at " if self.ref else ""
            return f"development build of {what}{self.commit[:8]}"
        return "version file (not a git checkout)"


def release_version(tag: str) -> str | None:
    match = RELEASE_TAG.match(tag)
    return match.group(1) if match else None


def _from_manifest(entry: Mapping[str, Any]) -> Revision | None:
    commit = str(entry.get("commit") or "")
    if not git.SHA_RE.match(commit):
        return None
    ref = str(entry.get("ref") or "")
    tag = ref if entry.get("ref_kind") == "tag" and release_version(ref) else ""
    return Revision(commit=commit, tag=tag, ref=ref)


def _from_git(source: Path) -> Revision:
    found = git.run(
        source, "rev-parse", "-q", "--verify", f"refs/tags/{_UPSTREAM_TAG}^{{commit}}", check=False
    )
    commit = found.stdout.strip() or git.head(source)
    tags = git.run(source, "tag", "--points-at", commit, check=False).stdout.split()
    releases = sorted((t for t in tags if release_version(t)), key=len)
    return Revision(commit=commit, tag=releases[0] if releases else "")


def read_revision(source: Path, name: str, src_dir: Path) -> Revision:
    """The revision of the checkout at ``source`` (project ``name``)."""
    if not (source / ".git").exists():  # not its own repository (git would find a parent's)
        return Revision(commit="")
    try:
        manifest = read_manifest(src_dir / MANIFEST_NAME)
    except ConfigError:
        manifest = {"projects": {}}
    entry = manifest["projects"].get(name)
    recorded = _from_manifest(entry) if isinstance(entry, dict) else None
    try:
        if recorded is not None and _has(source, recorded.commit):
            return recorded
        return _from_git(source)
    except RocmBuildError:  # git missing, no commit yet: the version file it is
        return Revision(commit="")


def _has(source: Path, commit: str) -> bool:
    res = git.run(source, "cat-file", "-e", f"{commit}^{{commit}}", check=False)
    return res.status == 0


def project_version(
    source: Path, spec: ProjectSpec, label: str, revision: Revision | None = None
) -> str:
    """The version the build is told to use: the version file (for a ``version_from_tag``
    project: the release tag's version, or the version file +git<sha8> for a development
    build) plus the local label; "" when the project has no version file (it versions itself)."""
    if not spec.version_file or not spec.version_env:
        return ""
    path = source / spec.version_file
    text = checkoutfile.read_text(source, spec.version_file, f"{spec.name}'s version file")
    if text is None:
        return ""
    base = text.strip()
    if spec.version_from_tag and revision is not None and revision.commit:
        tagged = release_version(revision.tag)
        dev = f"git{revision.commit[:8]}"
        base = tagged or (f"{base}.{dev}" if "+" in base else f"{base}+{dev}")
    local = label.lstrip("+")
    text = f"{base}.{local}" if "+" in base else f"{base}+{local}"
    try:
        Version(text)
    except InvalidVersion:
        msg = f"{spec.name}: '{text}' is not a valid version; fix --version-suffix or {path}"
        raise ConfigError(msg) from None
    return text


#: The local label's last segment on a wheel built from a checkout with uncommitted changes.
DIRTY = "dirty"


def mark_dirty(label: str) -> str:
    """The local label ``label`` (``+rocm7.14``, "" for none) of a build of uncommitted changes:
    ``+rocm7.14.dirty`` (PEP 440 joins local segments with ``.``; a wheel so named sorts above
    the clean one of the same commit, and pip never takes it for a release)."""
    body = label.lstrip("+")
    return f"+{body}.{DIRTY}" if body else f"+{DIRTY}"


def refuse_dirty(worktrees: Mapping[str, WorkTree], *, allow: bool) -> None:
    """Stop (``DirtyCheckout``, exit 6) at the first checkout with uncommitted changes, naming
    it, its first changed paths and the ways on; nothing when ``allow``."""
    if allow:
        return
    for name, state in worktrees.items():
        if not state.dirty:
            continue
        shown = ", ".join(state.paths[:3])
        more = f" and {len(state.paths) - 3} more" if len(state.paths) > 3 else ""
        msg = (
            f"{name}: its checkout has uncommitted changes ({shown}{more}); commit them, "
            f"`git stash` them, or pass --allow-dirty to build them into a wheel marked .{DIRTY}"
        )
        raise DirtyCheckout(msg)
