"""The checkout plan, related_commits, stamps and the manifest file (no processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rocm_build import config, sources
from rocm_build.common.errors import ConfigError
from rocm_build.repo import git
from rocm_build.repo import manifest as manifest_file
from rocm_build.repo.manifest import ManifestEntry
from rocm_build.run import context
from rocm_build.sources import patches
from rocm_build.sources import project as project_checkout
from rocm_build.sources.plan import ProjectPlan

SHA1 = "1" * 40
SHA2 = "2" * 40


def _cfg(tmp_path: Path, toml: str = "", **flags: Any) -> config.Config:
    (tmp_path / "rocm-build.toml").write_text(toml)
    return config.load(cwd=tmp_path, env={}, flags=flags)


def _builtin() -> dict[str, str]:
    return {n: str(p["origin"]) for n, p in config.load_defaults()["projects"].items()}


def test_plan_takes_refs_from_the_train(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, train="2.10")
    plan = sources.plan(context.resolve(cfg), builtin_origins=_builtin())
    assert [p.name for p in plan.projects] == ["torch", "torchvision", "torchaudio"]
    torch = plan.projects[0]
    assert torch.ref == "v2.10.0"
    assert not torch.ref_given
    assert not torch.origin_given
    assert torch.src == tmp_path / "src" / "torch"
    assert torch.patches_root == tmp_path / "patches" / "2.10" / "torch"
    assert torch.hipify == ("{python}", "tools/amd_build/build_amd.py")
    assert plan.projects[1].hipify == ()
    assert plan.manifest_path == tmp_path / "src" / manifest_file.MANIFEST_NAME
    assert plan.log_dir == tmp_path / ".rocm-build" / "logs"


def test_plan_takes_the_shipped_series_where_the_user_has_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The shipped folder stands in for rocm-build's own (shipped_patches/: no series yet).
    shipped = tmp_path / "shipped"
    for project in ("torch", "torchvision"):
        (shipped / "2.10" / project / "base").mkdir(parents=True)
    monkeypatch.setattr(patches, "shipped_dir", lambda: shipped)
    (tmp_path / "patches" / "2.10" / "torchvision").mkdir(parents=True)  # the user's own
    cfg = _cfg(tmp_path, train="2.10")
    torch, vision, audio = sources.plan(context.resolve(cfg), builtin_origins=_builtin()).projects
    assert torch.patches_root == shipped / "2.10" / "torch"
    assert vision.patches_root == tmp_path / "patches" / "2.10" / "torchvision"
    assert audio.patches_root == tmp_path / "patches" / "2.10" / "torchaudio"
    entry = {"origin": "file:///x/torch", "ref": "v2.10.0", "commit": SHA1, "patchset": "2.10"}
    manifest = {"projects": {"torch": {**entry, "hipify": False}}}
    (replayed,) = sources.plan(context.resolve(cfg), manifest=manifest).projects
    assert replayed.patches_root == shipped / "2.10" / "torch"


def test_plan_flags_and_user_refs(tmp_path: Path) -> None:
    cfg = _cfg(
        tmp_path,
        '[projects.torchvision]\norigin = "file:///elsewhere/vision"\n',
        **{
            "projects.torch.ref": "main",
            "checkout.hipify": False,
            "checkout.patches": False,
            "checkout.depth": 1,
            "checkout.force": True,
            "patchset": "mine",
        },
    )
    plan = sources.plan(context.resolve(cfg), ["torch", "torchvision"], builtin_origins=_builtin())
    torch, vision = plan.projects
    assert torch.ref == "main"
    assert torch.ref_given
    assert torch.hipify == ()
    assert not torch.apply_patches
    assert torch.patches_root == tmp_path / "patches" / "mine" / "torch"
    assert vision.origin_given
    assert (plan.depth, plan.force) == (1, True)


def test_plan_with_no_ref_anywhere_is_allowed_until_execution(tmp_path: Path) -> None:
    # A train without torchaudio: related_commits may still pin it at run time.
    cfg = _cfg(tmp_path, '[trains."mine"]\ntorch = "v2.12.1"\n', train="mine")
    plan = sources.plan(context.resolve(cfg), ["torchaudio"])
    assert plan.projects[-1].ref == ""


def test_plan_replays_a_manifest(tmp_path: Path) -> None:
    manifest = {
        "projects": {
            "torch": {
                "origin": "file:///x/torch",
                "ref": "release/2.9",
                "commit": SHA1,
                "patchset": "p",
                "patches": [{"file": "base/0001-a.patch", "sha256": "ab"}],
                "hipify": True,
                "hipify_command": ["{python}", "hip.py"],
                "apply_patches": True,
            }
        }
    }
    cfg = _cfg(tmp_path)
    plan = sources.plan(context.resolve(cfg), manifest=manifest)
    (torch,) = plan.projects
    assert torch.pin_commit == SHA1
    assert torch.origin == "file:///x/torch"
    assert torch.hipify == ("{python}", "hip.py")
    assert torch.expect_patches == (("base/0001-a.patch", "ab"),)
    assert torch.patches_root == tmp_path / "patches" / "p" / "torch"
    with pytest.raises(ConfigError, match="unknown project in the manifest 'torchvision'"):
        sources.plan(context.resolve(cfg), ["torchvision"], manifest=manifest)


def test_related_commits_parsing() -> None:
    text = (
        "# comment\n"
        f"ubuntu|pytorch|torchvision|release/0.24|{SHA1}|https://github.com/pytorch/vision\n"
        f"centos|pytorch|torchvision|release/0.24|{SHA2}|https://github.com/pytorch/vision\n"
        "ubuntu|pytorch|apex|master|not-a-sha|https://github.com/ROCm/apex\n"
        "garbage line\n"
        f"ubuntu|pytorch|torchaudio|release/2.9|{SHA2}|https://github.com/pytorch/audio\n"
    )
    pins = manifest_file.parse_related_commits(text)
    assert set(pins) == {"torchvision", "torchaudio"}
    assert pins["torchvision"].commit == SHA1  # the first line wins
    assert pins["torchaudio"].origin == "https://github.com/pytorch/audio"
    assert pins["torchvision"].branch == "release/0.24"


def test_stamp_changes_with_every_input() -> None:
    base: dict[str, Any] = {
        "origin": "o",
        "ref": "r",
        "commit": SHA1,
        "patchset": "p",
        "series": [("base/0001-a.patch", "h")],
        "hipify": ["{python}", "x.py"],
        "apply_patches": True,
    }
    first = manifest_file.stamp(**base)
    assert manifest_file.stamp(**base) == first
    changes: dict[str, Any] = {
        "origin": "o2",
        "ref": "r2",
        "commit": SHA2,
        "patchset": "p2",
        "series": [("base/0001-a.patch", "h2")],
        "hipify": [],
        "apply_patches": False,
    }
    for key, value in changes.items():
        assert manifest_file.stamp(**{**base, key: value}) != first, key


def test_tag_and_sha_refs_resolve_without_network(tmp_path: Path) -> None:
    plan = sources.plan(context.resolve(_cfg(tmp_path)), ["torch"])
    p = plan.projects[0]
    entry = {"origin": p.origin, "ref": p.ref, "ref_kind": "tag", "commit": SHA1}
    ref = project_checkout._resolve(p, ManifestEntry.from_json(entry), plan, p.origin, p.ref)
    assert (ref.kind, ref.commit) == ("tag", SHA1)
    pinned = ProjectPlan(**{**p.__dict__, "ref": SHA2})
    assert project_checkout._resolve(pinned, None, plan, pinned.origin, pinned.ref) == git.Ref(
        SHA2, "commit", SHA2, SHA2
    )


def test_manifest_is_written_atomically_and_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "src" / manifest_file.MANIFEST_NAME
    assert manifest_file.read_manifest(path) == {"format": 1, "projects": {}}
    data = {"format": 1, "projects": {"torch": {"commit": SHA1}}}
    manifest_file.write_manifest(path, data)
    assert json.loads(path.read_text()) == data
    mtime = path.stat().st_mtime_ns
    manifest_file.write_manifest(path, data)
    assert path.stat().st_mtime_ns == mtime
    assert [p.name for p in path.parent.iterdir()] == [manifest_file.MANIFEST_NAME]


@pytest.mark.parametrize("text", ["not json", "[]", '{"projects": 3}'])
def test_bad_manifest_is_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "m.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match="manifest"):
        manifest_file.read_manifest(path)
