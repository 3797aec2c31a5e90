"""``checkout --manifest`` replays a shallow checkout shallow and a full one full: the manifest
records the depth each project was fetched with."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .conftest import Runner, git


def _shallow(repo: Path) -> bool:
    return git(repo, "rev-parse", "--is-shallow-repository") == "true"


def test_manifest_replays_the_recorded_depth(rb: Runner, work: Path) -> None:
    rb("checkout", "proj", "--depth", "1", "--no-hipify")
    manifest = json.loads((work / "src/rocm-build-sources.json").read_text())
    assert manifest["projects"]["proj"]["depth"] == 1
    shallow = work / "shallow.json"
    shutil.copy(work / "src/rocm-build-sources.json", shallow)
    rb("checkout", "--manifest", str(shallow), "--src-dir", "replay-shallow")
    replay = work / "replay-shallow/proj"
    assert _shallow(replay)
    assert git(replay, "rev-list", "--count", "HEAD") == "1"
    assert _shallow(replay / "libs/sub1")
    # A full checkout replays full, even where the environment asks for shallow ones.
    rb("checkout", "proj", "--depth", "0", "--no-hipify", "--src-dir", "full")
    full = work / "full.json"
    shutil.copy(work / "full/rocm-build-sources.json", full)
    assert json.loads(full.read_text())["projects"]["proj"]["depth"] == 0
    env = {"ROCM_BUILD_CHECKOUT_DEPTH": "1"}
    rb("checkout", "--manifest", str(full), "--src-dir", "replay-full", env=env)
    replay = work / "replay-full/proj"
    assert not _shallow(replay)
    assert int(git(replay, "rev-list", "--count", "HEAD")) > 1
    # --depth on the command line still wins.
    rb("checkout", "--manifest", str(full), "--src-dir", "replay-flag", "--depth", "1")
    assert _shallow(work / "replay-flag/proj")
