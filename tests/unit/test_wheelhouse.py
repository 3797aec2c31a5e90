"""The wheelhouse's folder names: a family of the table when the targets are exactly it, one
target its own name, else the sorted targets joined by ``_``; thin and split wheels apart."""

from __future__ import annotations

from pathlib import Path

from rocm_build import config
from rocm_build.bundle.wheelhouse import Wheelhouse, set_name

FAMILIES = {"dcgpu-all": ("gfx908", "gfx90a", "gfx942"), "gfx110X-dgpu": ("gfx1100", "gfx1101")}


def test_a_set_is_named_by_its_family_its_one_target_or_its_sorted_targets() -> None:
    assert set_name(["gfx942", "gfx90a", "gfx908"], FAMILIES) == "dcgpu-all"
    assert set_name(["gfx1101", "gfx1100"], FAMILIES) == "gfx110X-dgpu"
    assert set_name(["gfx942"], FAMILIES) == "gfx942"  # not a one-target family's name
    assert set_name(["gfx942", "gfx90a"], FAMILIES) == "gfx90a_gfx942"
    # features stay (their code differs), and a set with features is named by no family
    assert set_name(["gfx90a:xnack+"], FAMILIES) == "gfx90a-xnack+"
    assert set_name(["gfx90a:xnack-"], FAMILIES) == "gfx90a-xnack-"
    assert set_name(["gfx942", "gfx90a:xnack+"], FAMILIES) == "gfx90a-xnack+_gfx942"
    assert (
        set_name(["gfx908", "gfx90a:xnack+", "gfx942"], FAMILIES) == "gfx908_gfx90a-xnack+_gfx942"
    )
    assert set_name([], FAMILIES) == "any"


def test_the_shipped_table_names_a_family_by_its_first_entry(tmp_path: Path) -> None:
    families = config.load(cwd=tmp_path, env={}).target_families
    assert set_name(["gfx1100", "gfx1101", "gfx1102"], families) == "gfx110X-dgpu"
    assert set_name(["gfx906", "gfx908", "gfx90a"], families) == "gfx90X-all"


def test_fat_thin_and_split_wheels_never_share_a_folder(tmp_path: Path) -> None:
    house = Wheelhouse(tmp_path / "wheelhouse", FAMILIES)
    fat = house.folder(["gfx942"])
    thin = house.folder(["gfx942"], thin="gfx94X-dcgpu")
    assert thin.name == "gfx942-thin"  # the targets asked for: its device packages
    assert house.folder([], thin="gfx94X-dcgpu").name == "gfx94X-dcgpu-thin"
    split = house.split_folder(["gfx942"])
    assert len({fat, thin, split}) == 3
    assert {fat.parent, thin.parent, split.parent} == {house.root}
    assert house.fat_folders() == ()  # no wheelhouse yet
    for folder in (fat, thin, split, house.folder(["gfx90a", "gfx942"])):
        folder.mkdir(parents=True)
    (house.root / "stray.whl").write_bytes(b"")
    assert [p.name for p in house.fat_folders()] == ["gfx90a_gfx942", "gfx942"]
