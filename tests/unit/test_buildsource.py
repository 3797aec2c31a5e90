"""Which source a checkout came from, named against the settings (build --dry-run)."""

from __future__ import annotations

from pathlib import Path

from rocm_build import config
from rocm_build.building import origin
from rocm_build.repo.manifest import MANIFEST_NAME


def test_origins_are_named_upstream_fork_or_other(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    kind = origin.origin_kind
    assert kind(cfg, "torch", "https://github.com/pytorch/pytorch.git") == "upstream"
    assert kind(cfg, "torch", "https://github.com/pytorch/pytorch") == "upstream"
    assert kind(cfg, "torch", "https://github.com/ROCm/pytorch.git") == "fork"
    assert kind(cfg, "torch", "https://mirror.example/pytorch.git") == "other"
    # torchvision has no fork: its own repository or another
    assert kind(cfg, "torchvision", "https://github.com/pytorch/vision.git") == "upstream"
    # Triton's repositories are the [triton] settings'.
    assert kind(cfg, "triton", "https://github.com/ROCm/triton.git") == "fork"
    assert kind(cfg, "triton", "https://github.com/triton-lang/triton.git") == "upstream"
    # With source = fork, torch's own repository is still its upstream.
    forked = config.load(cwd=tmp_path, env={"ROCM_BUILD_SOURCE": "fork"})
    assert forked.projects["torch"].origin == "https://github.com/ROCm/pytorch.git"
    assert kind(forked, "torch", "https://github.com/pytorch/pytorch.git") == "upstream"


def test_a_broken_manifest_is_named_not_hidden(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    (tmp_path / MANIFEST_NAME).write_text("{not json")
    (found,) = origin.read_sources(cfg, tmp_path, ["torch"]).values()
    assert found.kind == ""
    assert found.text.startswith("unknown: ")
    assert "is not a readable source manifest" in found.text
