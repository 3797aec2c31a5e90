"""Builds of fixture projects shaped like the real ones where the real ones differ from torch: a
torchaudio with no device code (as torchaudio >= 2.9 on ROCm), against the real ROCm 5.2.3 tree."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rocm_build import elf
from tests.conftest import GIT_IDENTITY

from .conftest import Workspace, extract_member, read_member
from .test_build import requires_dist

pytestmark = pytest.mark.slow


def test_torchaudio_without_device_code_is_built_and_pinned(
    workspace: Workspace, tmp_path: Path
) -> None:
    result = workspace.build("torch", "torchaudio")
    assert result.returncode == 0, result.stderr
    audio_whl = workspace.wheel("torchaudio")
    ext = extract_member(audio_whl, "torchaudio/lib/_torchaudio.so", tmp_path)
    assert elf.offload_targets(ext) == set()  # host code only, like the real one
    assert "libamdhip64.so.5" not in elf.read_elf(ext).needed
    torch_version = workspace.report()["projects"]["torch"]["version"]  # type: ignore[index]
    assert f"torch=={torch_version}" in requires_dist(audio_whl)
    seen = json.loads(read_member(audio_whl, "torchaudio/_build_env.json"))
    assert seen["torch_version"] == torch_version
    entry = workspace.report()["projects"]["torchaudio"]  # type: ignore[index]
    assert entry["gfx_targets"] == []
    assert entry["device_code"] is False


def test_a_project_expected_to_carry_device_code_is_still_refused_without_it(
    workspace: Workspace,
) -> None:
    workspace.configure(torchaudio="device_code = true")
    result = workspace.build("torch", "torchaudio")
    assert result.returncode == 9, result.stderr
    assert "torchaudio was built without ROCm" in result.stderr
    assert not list(workspace.wheels.glob("torchaudio-*.whl"))


def _dry_run_version(workspace: Workspace) -> tuple[str, str]:
    result = workspace.build("torch", "--dry-run", as_json=True)
    assert result.returncode == 0, result.stderr
    (torch,) = json.loads(result.stdout)["projects"]
    return torch["version"], torch["version_from"]


def test_torch_version_is_the_release_tag_or_a_dev_build(workspace: Workspace) -> None:
    src = workspace.root / "src" / "torch"
    assert (src / "version.txt").read_text().strip() == "2.9.0a0"  # as upstream's v2.9.1 has
    assert _dry_run_version(workspace) == ("2.9.1+rocm5.2.3", "release tag v2.9.1")
    shown = workspace.build("torch", "--dry-run")
    assert "version: 2.9.1+rocm5.2.3 (release tag v2.9.1)" in shown.stdout

    # A commit past the tag (a branch): a development build named after its commit.
    (src / "NOTES.md").write_text("a change\n")
    env = {**os.environ, **GIT_IDENTITY}
    subprocess.run(["git", "add", "-A"], cwd=src, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "notes"], cwd=src, check=True, env=env)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True, check=True
    ).stdout.strip()
    version, origin = _dry_run_version(workspace)
    assert version == f"2.9.0a0+git{sha[:8]}.rocm5.2.3"
    assert origin == f"development build of {sha[:8]}"

    result = workspace.build("torch", "torchaudio")
    assert result.returncode == 0, result.stderr
    projects = workspace.report()["projects"]
    assert projects["torch"]["version"] == version  # type: ignore[index]
    assert projects["torch"]["version_from"] == origin  # type: ignore[index]
    assert f"torch=={version}" in requires_dist(workspace.wheel("torchaudio"))
