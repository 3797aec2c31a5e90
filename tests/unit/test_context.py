"""The run context: folders now; the ROCm tree and the gfx targets decided once, where asked for,
before any plan."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.common import arch
from rocm_build.common.errors import ConfigError, RocmTreeError
from rocm_build.run import context
from tests.support.trees import make_tree

PACKAGE = Path(__file__).resolve().parents[2] / "rocm_build"


def _ctx(tmp_path: Path, **flags: object) -> context.RunContext:
    return context.resolve(config.load(cwd=tmp_path, env={}, flags=flags))


def test_folders_are_absolute_against_the_working_directory(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, src_dir="s", output_dir=str(tmp_path / "out"))
    assert ctx.src_dir == tmp_path / "s"
    assert ctx.patches_dir == tmp_path / "patches"
    assert ctx.output_dir == tmp_path / "out"
    assert ctx.work_dir == tmp_path / ".rocm-build"


def test_nothing_is_decided_unless_asked_for(tmp_path: Path) -> None:
    # A checkout needs neither a ROCm tree nor valid targets.
    ctx = _ctx(tmp_path, rocm=str(tmp_path / "gone"), arch="gfx9000")
    with pytest.raises(RocmTreeError, match=re.escape(f"{tmp_path / 'gone'} does not exist")):
        ctx.decide(targets=False)
    with pytest.raises(ConfigError, match="'gfx9000' is not a known target"):
        _ = ctx.targets
    with pytest.raises(ConfigError, match="'gfx9000' is not a known target"):
        ctx.decide(tree=False)
    # what was not decided is never looked for later (a plan must not download a tree)
    with pytest.raises(RuntimeError, match="not decided"):
        _ = ctx.tree
    # and the targets not decided are the setting's alone, never this machine's GPUs
    assert _ctx(tmp_path).targets == arch.Targets((), "not given")


def test_a_relative_tree_is_found_against_the_working_directory(tmp_path: Path) -> None:
    make_tree(tmp_path / "rocm")
    ctx = _ctx(tmp_path, rocm="rocm").decide(targets=False)
    assert ctx.tree.root == tmp_path / "rocm"
    assert ctx.decide(targets=False).tree is ctx.tree  # opened once
    assert context.resolve(ctx.settings, tree=True).tree.root == ctx.tree.root


def test_targets_one_way_for_every_stage(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path, arch="gfx90a:xnack-;gfx94X, gfx90a").decide(tree=False)
    assert ctx.targets == arch.Targets(("gfx90a:xnack-", "gfx942", "gfx90a"), "arch setting")
    assert ctx.targets.bases == ("gfx90a", "gfx942")  # base names, as bundle and smoke compare
    # not decided: the same value from the setting alone (bundle, smoke)
    assert _ctx(tmp_path, arch="gfx90a:xnack-;gfx94X, gfx90a").targets == ctx.targets
    cfg = ctx.settings
    parse = arch.Targets.parse
    got = parse("gfx90a;gfx94X, gfx90a", known=cfg.known_targets, families=cfg.target_families)
    assert got.bases == ("gfx90a", "gfx942")
    assert _ctx(tmp_path).targets.bases == ()  # unset: bundle keeps the wheel's own targets
    with pytest.raises(ConfigError, match="gfx9000"):
        parse("gfx9000", known=cfg.known_targets, families=cfg.target_families)


def test_deciding_writes_the_tree_and_targets_into_the_settings(tmp_path: Path) -> None:
    make_tree(tmp_path / "rocm")
    undecided = _ctx(tmp_path, rocm="rocm", arch="gfx110X")
    ctx = undecided.decide()
    assert undecided.rocm_tree is None  # a new context: the first is as it was
    assert undecided.settings.general.rocm == "rocm"
    assert ctx.settings.general.rocm == str(tmp_path / "rocm")
    assert ctx.settings.general.arch == "gfx1100;gfx1101;gfx1102;gfx1103"
    assert ctx.settings.values["arch"] == ctx.settings.general.arch  # what the run report shows
    assert ctx.targets.origin == "arch setting"
    assert ctx.tree.root == tmp_path / "rocm"


def test_no_string_keyed_setting_outside_config() -> None:
    """Settings are attributes (``cfg.bundle.compression_level``): mypy checks the name and the
    type. A ``cfg["bundle.compression_level"]`` look-up would not be checked."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "config.py":
            continue
        text = path.read_text(encoding="utf-8")
        found = re.findall(r"\b(?:cfg|settings|config)\[\s*[\"']", text)
        assert not found, f"{path.name}: {found}"
