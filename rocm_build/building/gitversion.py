"""``torch.version.git_version``: the upstream commit, not the local hipify commit.

PyTorch's ``setup.py`` writes ``torch/version.py`` through ``tools/generate_torch_version.py``,
whose ``get_sha`` is ``git rev-parse HEAD`` in the source folder (no variable overrides it). A
checkout rocm-build made holds the hipify result as a commit of its own on the fetched one
(``ROCM_BUILD_HIPIFY`` on ``ROCM_BUILD_UPSTREAM``: save-patches splits a developer's commits by
them), so HEAD is a commit that exists nowhere else. TheRock's CI checks out with
``--no-commit-hipify`` for that reason, leaving the hipify result uncommitted. rocm-build keeps
its commit and names the upstream commit in the wheel instead, where the source is that commit
and its hipify only: no patch, no commit of the user's, no uncommitted change. A checkout with
more than that keeps HEAD: its source is not upstream's.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from rocm_build.common.errors import RocmBuildError
from rocm_build.repo import git
from rocm_build.wheel.wheelfile import WheelReader, WheelWriter

__all__ = ["VERSION_MEMBERS", "name_upstream", "note_upstream", "upstream_commit"]

# sources.patches.UPSTREAM_TAG / HIPIFY_TAG (not imported: checkout is another stage)
_UPSTREAM_TAG = "ROCM_BUILD_UPSTREAM"
_HIPIFY_TAG = "ROCM_BUILD_HIPIFY"
#: The member holding ``git_version``, per project hipified at checkout.
log = logging.getLogger(__name__)

VERSION_MEMBERS = {"torch": "torch/version.py"}
_LINE = re.compile(r"""^git_version\s*=\s*(['"])([^'"\n]*)\1[ \t]*$""", re.MULTILINE)


def _rev(source: Path, rev: str) -> str:
    res = git.run(source, "rev-parse", "-q", "--verify", f"{rev}^{{commit}}", check=False)
    return res.stdout.strip() if res.status == 0 else ""


def upstream_commit(source: Path) -> str | None:
    """The fetched upstream commit when the checkout at ``source`` is that commit and its
    hipify commit only (or the commit itself), with no uncommitted change to a tracked file;
    else None."""
    if not git.is_repo(source):
        return None
    try:
        upstream = _rev(source, f"refs/tags/{_UPSTREAM_TAG}")
        if not upstream:
            return None
        head = _rev(source, "HEAD")
        if head != upstream:
            hipify = _rev(source, f"refs/tags/{_HIPIFY_TAG}")
            if head != hipify or _rev(source, f"{hipify}^") != upstream:
                return None  # patches before or after hipify, or commits of the user's
        # a change to a tracked file (the build's own outputs are untracked, and a real torch's
        # .gitignore ignores them)
        changed = git.run(
            source, "status", "--porcelain", "--ignore-submodules=all", "--untracked-files=no"
        )
        if changed.stdout.strip():
            return None
    except RocmBuildError:
        return None
    return upstream


def name_upstream(wheel: Path, member: str, commit: str) -> str | None:
    """Make ``git_version`` in the wheel's ``member`` name ``commit``; returns the value it
    replaced, None when the member or its line is missing or already names it. Every other
    member is copied raw (checked against RECORD on the way), RECORD is written anew and the
    result replaces ``wheel`` atomically."""
    with WheelReader(wheel) as reader:
        if member not in {m.name for m in reader.members}:
            return None
        text = reader.read_text(member)
        match = _LINE.search(text)
        if match is None or match.group(2) == commit:
            return None
        new = text[: match.start()] + f"git_version = {commit!r}" + text[match.end() :]
        record_name = f"{reader.dist_info}/RECORD"
        with WheelWriter(wheel, reader.dist_info) as writer:
            for m in reader.members:
                if m.is_dir or m.name == record_name:
                    continue
                if m.name == member:
                    writer.add_bytes(member, new.encode())
                else:
                    writer.copy_member(reader, m.name)
            writer.commit()
    return match.group(2)


def note_upstream(project: str, source: Path, wheel: Path) -> list[str]:
    """Name the upstream commit in ``project``'s wheel's ``git_version`` when its checkout at
    ``source`` is upstream plus its hipify commit; what to note (nothing when not)."""
    member = VERSION_MEMBERS.get(project)
    upstream = upstream_commit(source) if member else None
    if member is None or upstream is None:
        return []
    was = name_upstream(wheel, member, upstream)
    if not was:
        return []
    note = f"git_version: {upstream}, the upstream commit (the build saw {was}, the hipify commit)"
    log.info("%s: %s", project, note)
    return [note]
