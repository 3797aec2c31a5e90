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

from rocm_build.errors import ConfigError, RocmBuildError
from rocm_build.repo import git
from rocm_build.repo.manifest import MANIFEST_NAME, read_manifest

__all__ = ["RELEASE_TAG", "Revision", "read_revision", "release_version"]

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
