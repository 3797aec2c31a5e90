"""Builds of fixture projects shaped like the real ones where the real ones differ from torch: a
torchaudio with no device code (as torchaudio >= 2.9 on ROCm), against the real ROCm 5.2.3 tree."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rocm_build.binary import elf
from tests.conftest import GIT_IDENTITY

from .conftest import Workspace, extract_member, read_member, requires_dist, shared_lib

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
    assert _dry_run_version(workspace) == ("2.9.1+rocm5.2", "release tag v2.9.1")
    shown = workspace.build("torch", "--dry-run")
    assert "version: 2.9.1+rocm5.2 (release tag v2.9.1)" in shown.stdout

    # A commit past the tag (a branch): a development build named after its commit.
    (src / "NOTES.md").write_text("a change\n")
    env = {**os.environ, **GIT_IDENTITY}
    subprocess.run(["git", "add", "-A"], cwd=src, check=True, env=env)
    subprocess.run(["git", "commit", "-qm", "notes"], cwd=src, check=True, env=env)
    sha = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True, check=True
    ).stdout.strip()
    version, origin = _dry_run_version(workspace)
    assert version == f"2.9.0a0+git{sha[:8]}.rocm5.2"
    assert origin == f"development build of {sha[:8]}"

    result = workspace.build("torch", "torchaudio")
    assert result.returncode == 0, result.stderr
    projects = workspace.report()["projects"]
    assert projects["torch"]["version"] == version  # type: ignore[index]
    assert projects["torch"]["version_from"] == origin  # type: ignore[index]
    assert f"torch=={version}" in requires_dist(workspace.wheel("torchaudio"))


def _tree_with_host_math(base: Path, dest: Path) -> Path:
    """The test tree plus a lib/host-math OpenBLAS, as TheRock's trees have: every other part is
    a link into the shared (read-only) tree."""
    for entry in base.iterdir():
        if entry.name != "lib":
            (dest / entry.name).parent.mkdir(parents=True, exist_ok=True)
            (dest / entry.name).symlink_to(entry)
    for entry in (base / "lib").iterdir():
        (dest / "lib").mkdir(parents=True, exist_ok=True)
        (dest / "lib" / entry.name).symlink_to(entry)
    host = dest / "lib" / "host-math"
    (host / "include").mkdir(parents=True)
    (host / "include" / "cblas.h").write_text("/* fixture */\n")
    shared_lib(host / "lib" / "librocm-openblas.so", "librocm-openblas.so")
    return dest


def test_torch_build_sets_the_switches_the_reference_sets(workspace: Workspace) -> None:
    result = workspace.build("torch")
    assert result.returncode == 0, result.stderr
    assert "no pre-fetched aotriton" in result.stderr
    assert "the tree has no lib/host-math" in result.stderr
    seen = json.loads(read_member(workspace.wheel("torch"), "torch/_build_env.json"))
    tree = str(workspace.tree.resolve())
    assert seen["ROCM_SOURCE_DIR"] == tree
    assert seen["USE_NUMA"] == "0"
    # torch's features are left to its own defaults (CK on, MSLK for gfx942/gfx950 only)
    assert not [k for k in ("USE_MSLK", "USE_FBGEMM_GENAI", "USE_ROCM_CK_SDPA") if k in seen]
    assert "-Wno-error=maybe-uninitialized" in seen["CXXFLAGS"]
    assert "-Wno-error=restrict" in seen["CPPFLAGS"]
    assert (seen["USE_FLASH_ATTENTION"], seen["USE_MEM_EFF_ATTENTION"]) == ("0", "0")
    assert "AOTRITON_INSTALLED_PREFIX" not in seen
    assert "BLAS" not in seen
    entry = workspace.report()["projects"]["torch"]  # type: ignore[index]
    assert entry["environment"]["ROCM_SOURCE_DIR"] == tree
    assert any("no pre-fetched aotriton" in n for n in entry["notes"])


def test_tree_openblas_and_a_prefetched_aotriton_are_used(
    workspace: Workspace, tmp_path: Path
) -> None:
    tree = _tree_with_host_math(workspace.tree.resolve(), tmp_path / "tree")
    cache = tmp_path / "xdg-cache"
    prefix = cache / "rocm-build" / "aotriton" / "rocm5.2.3"
    shared_lib(prefix / "lib" / "libaotriton_v2.so.0.9", "libaotriton_v2.so.0")
    workspace.tree = tree
    dry = workspace.build("torch", "--dry-run", env={"XDG_CACHE_HOME": str(cache)})
    assert f"AOTRITON_INSTALLED_PREFIX={prefix}" in dry.stdout
    assert f"OpenBLAS_HOME={tree / 'lib' / 'host-math'}" in dry.stdout
    result = workspace.build("torch", env={"XDG_CACHE_HOME": str(cache)})
    assert result.returncode == 0, result.stderr
    seen = json.loads(read_member(workspace.wheel("torch"), "torch/_build_env.json"))
    assert seen["BLAS"] == "OpenBLAS"
    assert seen["OpenBLAS_HOME"] == str(tree / "lib" / "host-math")
    assert seen["OpenBLAS_LIB_NAME"] == "rocm-openblas"
    assert seen["AOTRITON_INSTALLED_PREFIX"] == str(prefix)
    # features.flash_attention = auto writes nothing: torch's default (on) builds attention with
    # the pre-fetched aotriton, Triton in the run or not
    assert "USE_FLASH_ATTENTION" not in seen
    flash = next(
        f
        for f in workspace.report()["projects"]["torch"]["features"]
        if f["name"] == "flash_attention"
    )  # type: ignore[index]
    assert (flash["on"], flash["why"]) == (True, "the train's default for these targets")


def test_a_build_that_would_download_aotriton_is_announced_and_fails_loudly(
    workspace: Workspace,
) -> None:
    # The user turns flash attention on with no aotriton at hand; the network is denied (the
    # fixture's download URL is a refused local port).
    result = workspace.build("torch", env={"USE_FLASH_ATTENTION": "1"})
    assert "torch's CMake downloads aotriton during the build" in result.stderr  # announced
    assert result.returncode == 4, result.stderr
    assert "aotriton: download of" in result.stderr
    assert "network denied" in result.stderr


def test_a_train_whose_floor_the_tree_misses_fails_at_the_tree_check(
    workspace: Workspace,
) -> None:
    # A floor of your own (the built-in 2.14 one records no ROCm floor and needs hipFile only
    # from ROCm 7.14); the tree is ROCm 5.2.3.
    with (workspace.root / "rocm-build.toml").open("a") as f:
        f.write('[floors."2.14"]\nrocm = "7.14"\ntorch = ["hipfile"]\n')
    result = workspace.build("torch", "--train", "2.14", "--dry-run")
    assert result.returncode == 8, result.stderr
    assert "release train 2.14 needs ROCm 7.14 or newer" in result.stderr
    assert "missing from lib/cmake: hipfile" in result.stderr
    assert workspace.build("torch", "--train", "2.11", "--dry-run").returncode == 0
