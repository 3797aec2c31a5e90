"""A password in the compiler cache URL is never printed or written by rocm-build: not by
`build --dry-run` (text or --json), not in the settings it shows, not in `config --json`, not in
the build report or the build log."""

from __future__ import annotations

import json

import pytest

from .conftest import Workspace

pytestmark = pytest.mark.slow

SECRET = "s3cret-Pw0rd"
# Nothing listens on port 9 of this machine: ccache tries the remote, fails, and compiles on.
URL = f"http://builder:{SECRET}@127.0.0.1:9/cache"


def _check(text: str) -> None:
    assert SECRET not in text


def test_dry_run_masks_the_cache_password(workspace: Workspace) -> None:
    flags = ("torch", "--dry-run", "--cache", "ccache", "--cache-url", URL)
    result = workspace.build(*flags)
    assert result.returncode == 0, result.stderr
    # The remote storage is in the plan (so the test would see a leak), masked.
    assert "CCACHE_REMOTE_STORAGE=http://builder:***@127.0.0.1:9/cache" in result.stdout
    assert "build.cache_url = 'http://builder:***@127.0.0.1:9/cache'" in result.stderr
    _check(result.stdout + result.stderr)

    result = workspace.build(*flags, as_json=True)
    assert result.returncode == 0, result.stderr
    env = json.loads(result.stdout)["projects"][0]["env"]
    assert env["CCACHE_REMOTE_STORAGE"] == "http://builder:***@127.0.0.1:9/cache"
    _check(result.stdout + result.stderr)


def test_config_json_masks_the_cache_password(workspace: Workspace) -> None:
    result = workspace.run_cli(
        ["--json", "config"],
        cwd=workspace.root,
        env={**workspace.env, "ROCM_BUILD_BUILD_CACHE_URL": URL},
    )
    assert result.returncode == 0, result.stderr
    settings = json.loads(result.stdout)["settings"]
    assert settings["build.cache_url"] == "http://builder:***@127.0.0.1:9/cache"
    _check(result.stdout + result.stderr)


def test_build_report_and_log_hold_no_password(workspace: Workspace) -> None:
    result = workspace.build("torch", "--cache", "ccache", "--cache-url", URL)
    assert result.returncode == 0, result.stderr
    _check(result.stdout + result.stderr)
    report = workspace.wheels / "build-report.json"
    assert report.is_file()
    _check(report.read_text())
    logs = list((workspace.root / ".rocm-build" / "logs").rglob("*"))
    assert logs
    for path in logs:
        if path.is_file():
            _check(path.read_text(errors="replace"))
