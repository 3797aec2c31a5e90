"""Release trains' floors ([floors."<train>"]): every train has one, known or unknown with a
reason, and a malformed table is a one-line configuration error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.building import trainfloors
from rocm_build.common.errors import ConfigError
from rocm_build.rocm import dist
from tests.support.trees import make_tree


def test_every_train_has_a_floor_or_says_why_not(tmp_path: Path) -> None:
    cfg = config.load(cwd=tmp_path, env={})
    assert cfg.trains
    for train in cfg.trains:
        assert train in cfg.floors, f"train {train} has no [floors] entry"
        floor = trainfloors.floor_of(train, cfg.floors)
        # Either a floor to check or the reason none is recorded (a source that says so).
        assert floor.rocm or floor.packages or "LoadHIP.cmake" in floor.unknown, train


def test_2_14_requires_hipfile_from_rocm_7_14_and_records_no_rocm_floor(tmp_path: Path) -> None:
    # pytorch/pytorch#191069 (in 2.14's branch): hipfile is required from ROCm 7.14 on.
    floor = trainfloors.floor_of("2.14", config.load(cwd=tmp_path, env={}).floors)
    assert (floor.rocm, dict(floor.packages)) == ("", {"torch": ("hipfile>=7.14",)})
    assert floor.describe() == "2.14: ROCm floor not recorded; torch needs hipfile (from ROCm 7.14)"


@pytest.mark.parametrize(
    ("train", "source"),
    [
        ("2.9", "pytorch/pytorch#166111"),
        ("2.10", "pytorch/pytorch#166111"),
        ("2.11", "ROCm/pytorch#3440; #3529"),
        ("2.12", "ROCm/pytorch#3441; #3530"),
        ("2.13", "ROCm/pytorch#3442; #3531"),
    ],
)
def test_2_9_to_2_13_record_no_floor_and_name_the_source(
    tmp_path: Path, train: str, source: str
) -> None:
    # No LoadHIP.cmake of these releases is in the references; pytorch/pytorch#166111 (2025-10):
    # no hard ROCm version limit on main. ROCm's fork finds libhipcxx optionally on release/2.11-
    # 2.13 (#3440-3442); the PRs requiring it from ROCm 10 (#3529-3531) were closed unmerged.
    floor = trainfloors.floor_of(train, config.load(cwd=tmp_path, env={}).floors)
    assert (floor.rocm, dict(floor.packages)) == ("", {}), train
    assert source in floor.unknown
    if train in ("2.11", "2.12", "2.13"):
        assert "closed unmerged" in floor.unknown
    # Nothing is checked: a ROCm 10 tree without libhipcxx is not refused.
    root = make_tree(tmp_path / "rocm")
    (root / ".info" / "version").write_text("10.0.0\n")
    assert trainfloors.unmet(floor, dist.open_tree(root), ["torch"]) == []


def test_a_package_gated_on_a_rocm_version_counts_only_from_it(tmp_path: Path) -> None:
    # 2.14's hipfile>=7.14: required of a 7.14 tree, not of a 7.12 one.
    floor = trainfloors.floor_of("2.14", config.load(cwd=tmp_path, env={}).floors)
    root = make_tree(tmp_path / "rocm")
    (root / ".info" / "version").write_text("7.14.0\n")
    assert trainfloors.unmet(floor, dist.open_tree(root), ["torch"]) == [
        "release train 2.14's torch needs CMake packages missing from lib/cmake: "
        'hipfile (from ROCm 7.14) ([floors."2.14"])'
    ]
    assert trainfloors.unmet(floor, dist.open_tree(root), ["torchvision"]) == []
    (root / "lib" / "cmake" / "hipfile").mkdir(parents=True)
    (root / "lib" / "cmake" / "hipfile" / "hipfile-config.cmake").write_bytes(b"")
    assert trainfloors.unmet(floor, dist.open_tree(root), ["torch"]) == []
    shutil.rmtree(root / "lib" / "cmake" / "hipfile")
    (root / ".info" / "version").write_text("7.12.0\n")  # below 7.14: not required
    assert trainfloors.unmet(floor, dist.open_tree(root), ["torch"]) == []


def test_nightly_records_no_floor(tmp_path: Path) -> None:
    floor = trainfloors.floor_of("nightly", config.load(cwd=tmp_path, env={}).floors)
    assert (floor.rocm, dict(floor.packages)) == ("", {})
    assert "moves daily" in floor.unknown
    assert "below 7.14, later below 10.0" in floor.unknown


def test_a_floor_of_your_own_replaces_the_trains(tmp_path: Path) -> None:
    (tmp_path / "rocm-build.toml").write_text(
        '[floors."2.14"]\nrocm = "7.14"\ntorch = ["hipfile"]\n'
    )
    floor = trainfloors.floor_of("2.14", config.load(cwd=tmp_path, env={}).floors)
    assert (floor.rocm, dict(floor.packages), floor.unknown) == (
        "7.14",
        {"torch": ("hipfile",)},
        "",
    )
    assert floor.describe() == "2.14: ROCm 7.14 or newer; torch needs hipfile"


def test_a_train_without_a_table_is_unknown() -> None:
    floor = trainfloors.floor_of("9.9", {})
    assert floor.unknown == 'no [floors."9.9"] table'
    assert "no ROCm floor known" in floor.describe()


@pytest.mark.parametrize(
    ("table", "says"),
    [
        ({"unknown": "why", "rocm": "7.14"}, "not both"),
        ({}, "is empty"),
        ({"rocm": "seven"}, "is not a version"),
        ({"torch": "hipfile"}, "must be a list"),
        ({"rocm": 7.14}, "are strings"),
        ({"torch": ["hipfile>=seven"]}, "is not NAME or NAME>=X.Y"),
    ],
)
def test_a_malformed_floor_is_a_configuration_error(table: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        trainfloors.floor_of("2.14", {"2.14": table})
