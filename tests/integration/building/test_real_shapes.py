"""Builds of fixture projects shaped like the real ones where the real ones differ from torch: a
torchaudio with no device code (as torchaudio >= 2.9 on ROCm), against the real ROCm 5.2.3 tree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocm_build import elf

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
