"""Where bundled wheels go, on a real HIP wheel and the real ROCm 5.2.3 tree: unbundled wheels
stay in ``wheels/``, each fat wheel goes to ``wheelhouse/<its target set>/``, so bundles for
other targets never replace each other; ``-w DIR`` writes into DIR as it is, and says so when it
replaces a wheel made for other targets (``test_packaging_options``)."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

from .runs import SMALL

pytestmark = pytest.mark.slow


def _targets(fat: Path) -> list[str]:
    with zipfile.ZipFile(fat) as zf:
        return list(json.loads(zf.read("hipext/.rocm-build-bundle.json"))["targets"])


def test_bundles_for_other_targets_go_to_folders_of_their_own(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    built = tmp_path / "wheels"  # the build's folder, as `rocm-build build` leaves it
    built.mkdir()
    wheel = Path(shutil.copy2(hip_ext_wheel, built))
    base = ["bundle", str(wheel), "--rocm", str(tree_copy), "-z", "1"]
    runs = {}
    for arch in ("gfx90a", "gfx1030"):
        res = run_cli([*base, "--arch", arch], cwd=tmp_path, env=SMALL)
        assert res.returncode == 0, res.stderr
        assert "warning: replaces" not in res.stderr
        runs[arch] = res
    house = tmp_path / "wheelhouse"
    fats = sorted(house.glob("*/*.whl"))
    assert [f.parent.name for f in fats] == ["gfx1030", "gfx90a"]
    assert fats[0].name == fats[1].name  # the same name: only the folder tells them apart
    assert [_targets(f) for f in fats] == [["gfx1030"], ["gfx90a"]]
    for fat in fats:
        assert f"bundled: {fat}" in runs[fat.parent.name].stdout
    # the unbundled wheel is alone where it was; no fat wheel beside it
    assert [p.name for p in built.iterdir()] == [wheel.name]
    # again for gfx90a: into its own folder (up to date, or bundled again where another run's
    # hard-link copy of the shared test tree changed a library's ctime), the other kept
    kept = fats[0].read_bytes()
    again = run_cli([*base, "--arch", "gfx90a"], cwd=tmp_path, env=SMALL)
    assert again.returncode == 0, again.stderr
    assert f": {fats[1]}  (" in again.stdout
    assert "warning: replaces" not in again.stderr
    assert sorted(house.glob("*/*.whl")) == fats
    assert fats[0].read_bytes() == kept
    # a set of targets that is a family of the table is named by it
    fam = [*base, "--arch", "gfx1030;gfx1031;gfx1032;gfx1034", "--allow-missing-arch"]
    res = run_cli(fam, cwd=tmp_path, env=SMALL)
    assert res.returncode == 0, res.stderr
    assert (house / "gfx103X-dgpu" / fats[0].name).is_file()


def test_without_arch_the_wheels_own_targets_name_the_folder(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    house = tmp_path / "house"
    env = {**SMALL, "ROCM_BUILD_WHEELHOUSE": str(house)}
    args = ["--json", "bundle", str(hip_ext_wheel), "--rocm", str(tree_copy), "-z", "1"]
    first = run_cli(args, cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    (result,) = json.loads(first.stdout)
    (fat,) = house.glob("*/*.whl")
    assert result["output"] == str(fat)
    assert fat.parent == house / "gfx1030_gfx90a"
    assert result["status"] == "bundled"
    assert _targets(fat) == ["gfx1030", "gfx90a"]
    # found up to date before the wheel's targets are read again
    (again,) = json.loads(run_cli(args, cwd=tmp_path, env=env).stdout)
    assert (again["status"], again["output"]) == ("up-to-date", str(fat))
    assert not (tmp_path / "wheels").exists()
    assert not (tmp_path / "wheelhouse").exists()  # the setting's folder, not the default


def test_split_arch_goes_to_a_folder_apart_from_the_fat_wheels(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    base = ["bundle", str(hip_ext_wheel), "--rocm", str(tree_copy), "-z", "1", "--arch", "gfx90a"]
    fat = run_cli(base, cwd=tmp_path, env=SMALL)
    assert fat.returncode == 0, fat.stderr
    split = run_cli([*base, "--split-arch"], cwd=tmp_path, env=SMALL)
    assert split.returncode == 0, split.stderr
    house = tmp_path / "wheelhouse"
    (fat_wheel,) = (house / "gfx90a").iterdir()
    names = sorted(p.name for p in (house / "gfx90a-split").glob("*.whl"))
    assert fat_wheel.name in names  # the host wheel: the fat wheel's name, in a folder apart
    assert f"split: {house / 'gfx90a-split' / fat_wheel.name}  (" in split.stdout
    # the fat wheel is still the fat one: up to date
    again = run_cli(base, cwd=tmp_path, env=SMALL)
    assert "up to date: " in again.stdout, again.stdout
    # without --arch: the folder of the wheel's own targets, the dry run naming it already
    own = ["bundle", str(hip_ext_wheel), "--rocm", str(tree_copy), "-z", "1", "--split-arch"]
    dry = run_cli(["--json", *own, "--dry-run"], cwd=tmp_path, env=SMALL)
    assert dry.returncode == 0, dry.stderr
    folder = house / "gfx1030_gfx90a-split"
    assert [r["host"] for r in json.loads(dry.stdout)] == [str(folder / fat_wheel.name)]
    assert not folder.exists()
    res = run_cli(own, cwd=tmp_path, env=SMALL)
    assert res.returncode == 0, res.stderr
    assert (folder / fat_wheel.name).is_file()


def test_targets_that_differ_only_in_features_get_folders_of_their_own(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """gfx90a:xnack+ and gfx90a:xnack- keep other code objects: two folders in the wheelhouse,
    and with -w one replaces the other only with a warning."""
    base = ["bundle", str(hip_ext_wheel), "--rocm", str(tree_copy), "-z", "1"]
    for arch in ("gfx90a:xnack+", "gfx90a:xnack-"):
        res = run_cli([*base, "--arch", arch], cwd=tmp_path, env=SMALL)
        assert res.returncode == 0, res.stderr
    fats = sorted((tmp_path / "wheelhouse").glob("*/*.whl"))
    assert [f.parent.name for f in fats] == ["gfx90a-xnack+", "gfx90a-xnack-"]
    out = tmp_path / "out"
    for arch in ("gfx90a:xnack+", "gfx90a:xnack-"):
        res = run_cli([*base, "-w", str(out), "--arch", arch], cwd=tmp_path, env=SMALL)
        assert res.returncode == 0, res.stderr
    (fat,) = out.glob("*.whl")
    line = f"warning: replaces {fat.name}, bundled for gfx90a:xnack+ (now gfx90a:xnack-)"
    assert line in res.stderr
