"""Progress of a real checkout: objects fetched (git's own meter) and files hipified."""

from __future__ import annotations

import os
from pathlib import Path

from rocm_build import config, sources
from rocm_build.run import context
from tests.support.progress_recording import RecordingProgress

from .conftest import Upstream, commit_files, git


def _checkout(work: Path, ref: str, progress: RecordingProgress) -> sources.Result:
    cfg = config.load(cwd=work, env=dict(os.environ), flags={"projects.proj.ref": ref})
    plan = sources.plan(context.resolve(cfg), ["proj"], builtin_origins={})
    return sources.execute(plan, progress)


def test_checkout_reports_objects_fetched_and_files_hipified(
    work: Path, upstream: Upstream
) -> None:
    # Over git's unpack limit (100 objects), so the fetch streams "Receiving objects" lines.
    many = {f"data/file{i:03}.txt": f"content {i}\n" for i in range(150)}
    commit_files(upstream.proj, many, "proj: many files")
    git(upstream.proj, "tag", "v2.0")
    rec = RecordingProgress()
    result = _checkout(work, "v2.0", rec)
    assert result.projects[0].action == "checked out"

    fetched = rec.completed("proj: objects fetched")
    assert fetched.total is not None
    assert fetched.total > 150
    assert len(fetched.counts) > 1  # reported while receiving, not only at the end

    # The fixture hipify writes src/kernel.hip and libs/sub1/sub1.hip and edits src/config.h.
    hipified = rec.completed("proj: files hipified")
    assert hipified.total == 3
    assert set(rec.tasks) == {"proj: objects fetched", "proj: files hipified"}


def test_small_fetch_reports_the_remote_count(work: Path, upstream: Upstream) -> None:
    rec = RecordingProgress()
    _checkout(work, "v1.1", rec)
    # Under the unpack limit git shows no local meter: the count the remote sent is reported.
    fetched = rec.completed("proj: objects fetched")
    assert fetched.total is not None
    assert 0 < fetched.total < 100
    # An up-to-date checkout fetches nothing and reports nothing.
    again = RecordingProgress()
    _checkout(work, "v1.1", again)
    assert again.tasks == {}
