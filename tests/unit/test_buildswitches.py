"""The reference and tree switches of a project's build (pure: files only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.building import switches
from rocm_build.common.errors import ConfigError
from rocm_build.rocm import dist
from tests.support.trees import make_tree


def _torch() -> config.ProjectSpec:
    return config.load(cwd=Path("/"), env={}).project("torch")


def test_aotriton_choices(tmp_path: Path) -> None:
    tree = dist.open_tree(make_tree(tmp_path / "rocm"))
    cache = tmp_path / "cache"

    def env(given: dict[str, str], setting: str = "auto") -> switches.Switches:
        return switches.switches(
            _torch(), tree, given=given, aotriton=setting, aotriton_cache=cache
        )

    off = env({})
    assert (off.env["USE_FLASH_ATTENTION"], off.env["USE_MEM_EFF_ATTENTION"]) == ("0", "0")
    assert any("no pre-fetched aotriton" in n for n in off.notes)
    mine = env({"USE_FLASH_ATTENTION": "OFF", "USE_MEM_EFF_ATTENTION": "0"})
    assert "USE_FLASH_ATTENTION" not in mine.env
    assert not any("aotriton" in n for n in mine.notes)
    asked = env({"USE_FLASH_ATTENTION": "1"})
    assert "USE_FLASH_ATTENTION" not in asked.env
    assert any("downloads aotriton during the build" in n for n in asked.notes)
    assert env({}, "off").env["USE_MEM_EFF_ATTENTION"] == "0"
    with pytest.raises(ConfigError, match="not an aotriton install"):
        env({}, str(tmp_path / "empty"))
    prefix = cache / f"rocm{tree.version}" / "lib"
    prefix.mkdir(parents=True)
    (prefix / "libaotriton_v2.so.0").write_bytes(b"")
    found = env({})
    assert found.env["AOTRITON_INSTALLED_PREFIX"] == str(prefix.parent)
    assert "USE_FLASH_ATTENTION" not in found.env


def test_flags_from_several_layers_add_up() -> None:
    merged = switches.merge_env(
        {"CXXFLAGS": "-Wno-error=restrict", "USE_NUMA": "0", "PKG_CONFIG_PATH": "/tree/pc"},
        {"CXXFLAGS": "-O3", "USE_NUMA": "1", "PKG_CONFIG_PATH": "/mine"},
    )
    assert merged == {
        "CXXFLAGS": "-Wno-error=restrict -O3",
        "USE_NUMA": "1",
        "PKG_CONFIG_PATH": "/mine:/tree/pc",
    }


def test_unknown_tree_env_is_refused(tmp_path: Path) -> None:
    tree = dist.open_tree(make_tree(tmp_path / "rocm"))
    spec = config.ProjectSpec(name="x", origin="o", tree_env=("host-blass",))
    with pytest.raises(ConfigError, match="unknown host-blass"):
        switches.switches(spec, tree, given={}, aotriton_cache=tmp_path)
