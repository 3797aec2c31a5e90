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


@pytest.mark.parametrize(("train", "pr"), [("2.11", 3529), ("2.12", 3530), ("2.13", 3531)])
def test_rocm_10_needs_libhipcxx_for_2_11_to_2_13(tmp_path: Path, train: str, pr: int) -> None:
    # ROCm/pytorch#3529-3531: LoadHIP.cmake requires libhipcxx from ROCm 10.0 on.
    floor = trainfloors.floor_of(train, config.load(cwd=tmp_path, env={}).floors)
    assert (floor.rocm, dict(floor.packages)) == ("", {"torch": ("libhipcxx>=10.0",)}), pr
    root = make_tree(tmp_path / "rocm")
    (root / ".info" / "version").write_text("10.0.0\n")
    ten = dist.open_tree(root)
    assert trainfloors.unmet(floor, ten, ["torch"]) == [
        f"release train {train}'s torch needs CMake packages missing from lib/cmake: "
        f'libhipcxx (from ROCm 10.0) ([floors."{train}"])'
    ]
    (root / "lib" / "cmake" / "libhipcxx").mkdir(parents=True)
    (root / "lib" / "cmake" / "libhipcxx" / "libhipcxx-config.cmake").write_bytes(b"")
    assert trainfloors.unmet(floor, dist.open_tree(root), ["torch"]) == []
    shutil.rmtree(root / "lib" / "cmake" / "libhipcxx")
    (root / ".info" / "version").write_text("7.14.0\n")  # below ROCm 10: not required
    assert trainfloors.unmet(floor, dist.open_tree(root), ["torch"]) == []


def test_nightly_records_no_floor(tmp_path: Path) -> None:
    floor = trainfloors.floor_of("nightly", config.load(cwd=tmp_path, env={}).floors)
    assert "moves daily" in floor.unknown


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
