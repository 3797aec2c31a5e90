"""A commit, branch or tag that the origin does not have is a wrong --ref, not a network error:
one clear line at once, no retries (with the default retry settings, which would wait 2 + 4 s)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from .conftest import Runner, Upstream

RETRY = re.compile(r"; retry \d+/\d+ in")
MISSING_SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def default_retries(work: Path) -> Path:
    config = work / "rocm-build.toml"
    text = config.read_text()
    config.write_text(text.replace("retry_delay = 0.0\n", "").replace("retries = 2\n", ""))
    return work


def _error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("rocm-build: error:")]
    return line


def test_sha_not_on_the_origin_fails_at_once(
    rb: Runner, default_retries: Path, upstream: Upstream
) -> None:
    start = time.monotonic()
    res = rb("-v", "checkout", "proj", "--ref", f"proj={MISSING_SHA}", ok=False)
    seconds = time.monotonic() - start
    assert res.returncode == 2, res.stderr
    line = _error_line(res.stderr)
    assert f"commit {MISSING_SHA} is not on {upstream.proj_url}" in line, line
    assert "check --ref" in line
    assert not RETRY.search(res.stderr), res.stderr
    fetches = [ln for ln in res.stderr.splitlines() if ln.startswith("+ git fetch")]
    assert len(fetches) == 1, res.stderr
    assert seconds < 6, seconds  # the default back-off alone would be 2 + 4 s
    assert not (default_retries / "src/proj").exists()


@pytest.mark.parametrize("ref", ["no-such-branch", "v9.9.9", "refs/heads/gone"])
def test_branch_or_tag_not_on_the_origin_fails_at_once(
    rb: Runner, default_retries: Path, ref: str
) -> None:
    res = rb("-v", "checkout", "proj", "--ref", f"proj={ref}", ok=False)
    assert res.returncode == 2, res.stderr
    line = _error_line(res.stderr)
    assert f"ref '{ref}' is not a branch, tag or full commit SHA" in line, line
    assert not RETRY.search(res.stderr), res.stderr
    assert len([ln for ln in res.stderr.splitlines() if ln.startswith("+ git ls-remote")]) == 1
