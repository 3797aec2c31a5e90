"""The names of ROCm's packages from a kpack-split tree (TheRock's ``rocm-sdk-libraries``,
``rocm-sdk-device-<target>``, the ``rocm`` extras) and what a thin wheel requires from them;
a tree that is not split keeps the per-family names."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build.bundle import rocmdevice, rocmwheels
from rocm_build.bundle.model import ThinSource
from rocm_build.common.errors import RocmTreeError
from rocm_build.common.treepath import TreeGuard


@pytest.mark.parametrize(
    ("target", "dist", "extra"),
    [
        ("gfx90a", "rocm-sdk-device-gfx90a", "device-gfx90a"),
        ("gfx90a:xnack-", "rocm-sdk-device-gfx90a", "device-gfx90a"),
        ("gfx90a:sramecc+:xnack+", "rocm-sdk-device-gfx90a", "device-gfx90a"),
        ("GFX1100", "rocm-sdk-device-gfx1100", "device-gfx1100"),
        ("gfx9-4-generic", "rocm-sdk-device-gfx9-4-generic", "device-gfx9-4-generic"),
    ],
)
def test_a_device_package_is_named_by_the_bare_processor(
    target: str, dist: str, extra: str
) -> None:
    assert rocmdevice.device_dist(target) == dist
    assert rocmdevice.device_extra(target) == extra


def test_a_name_that_is_no_target_is_refused() -> None:
    with pytest.raises(ValueError, match="no gfx target"):
        rocmdevice.device_dist("all")


def test_thin_requirement_is_pytorchs() -> None:
    assert rocmdevice.thin_requirement("7.14.0") == "rocm[device-all,libraries]==7.14.0"
    got = rocmdevice.thin_requirement("7.14.0", ["gfx942", "gfx90a:xnack-", "gfx90a:xnack+"])
    assert got == "rocm[device-gfx90a,device-gfx942,libraries]==7.14.0"


def test_meta_package_offers_libraries_each_target_and_all() -> None:
    targets = ["gfx90a:xnack+", "gfx90a:xnack-", "gfx1030"]
    assert rocmdevice.meta_extras(targets) == [
        "libraries",
        "device-gfx1030",
        "device-gfx90a",
        "device-all",
    ]
    assert rocmdevice.meta_requirements("rocm-sdk-core", "1.0", targets) == [
        "rocm-sdk-core==1.0",
        'rocm-sdk-libraries==1.0; extra == "libraries"',
        'rocm-sdk-device-gfx1030==1.0; extra == "device-gfx1030"',
        'rocm-sdk-device-gfx90a==1.0; extra == "device-gfx90a"',
        'rocm-sdk-device-gfx1030==1.0; extra == "device-all"',
        'rocm-sdk-device-gfx90a==1.0; extra == "device-all"',
    ]


def test_archive_target_from_its_name() -> None:
    assert rocmdevice.archive_target(Path("rand_lib_gfx90a:xnack-.kpack")) == "gfx90a:xnack-"
    assert rocmdevice.archive_target(Path("blas_lib_gfx942.kpack")) == "gfx942"
    for bad in ("gfx942.kpack", "blas_lib_all.kpack"):
        with pytest.raises(RocmTreeError, match=r"<group>_<target>\.kpack"):
            rocmdevice.archive_target(Path(bad))


def test_data_naming_one_target_goes_to_its_device_package() -> None:
    data = [
        (Path("a"), "lib/rocblas/library/TensileLibrary_gfx90a.dat"),
        (Path("b"), "lib/rocblas/library/Kernels_gfx90a_xnack-.co"),
        (Path("c"), "lib/rocblas/library/TensileManifest.txt"),
        (Path("d"), "lib/rocblas/library/fallback_gfx90a_gfx942.dat"),
    ]
    neutral, by_target = rocmdevice.split_data(data)
    assert [rel for _, rel in neutral] == [
        "lib/rocblas/library/TensileManifest.txt",
        "lib/rocblas/library/fallback_gfx90a_gfx942.dat",
    ]
    assert sorted(by_target) == ["gfx90a"]
    assert [p.name for p, _ in by_target["gfx90a"]] == ["a", "b"]


def _tree(root: Path, archives: list[str]) -> Path:
    (root / ".info").mkdir(parents=True)
    (root / ".info" / "version").write_text("7.14.0\n")
    (root / "lib").mkdir()
    for name in archives:
        (root / ".kpack").mkdir(exist_ok=True)
        (root / ".kpack" / name).write_bytes(b"archive")
    return root


def test_device_packages_group_a_processors_archives(tmp_path: Path) -> None:
    tree = _tree(
        tmp_path / "rocm",
        ["blas_lib_gfx90a:xnack+.kpack", "rand_lib_gfx90a:xnack-.kpack", "blas_lib_gfx942.kpack"],
    )
    guard = TreeGuard.of(tree, (), rocmwheels.WHEELS_HINT)
    plat = "manylinux_2_28_x86_64"
    wheels = rocmdevice.plan_devices(tree, "7.14.0", plat, {}, (), guard)
    assert [w.name for w in wheels] == [
        "rocm_sdk_device_gfx90a-7.14.0-py3-none-manylinux_2_28_x86_64.whl",
        "rocm_sdk_device_gfx942-7.14.0-py3-none-manylinux_2_28_x86_64.whl",
    ]
    assert [arc for _, arc in wheels[0].archives] == [
        "_rocm_sdk_libraries/.kpack/blas_lib_gfx90a:xnack+.kpack",
        "_rocm_sdk_libraries/.kpack/rand_lib_gfx90a:xnack-.kpack",
    ]
    assert wheels[0].requires == ("rocm-sdk-libraries==7.14.0",)
    only = rocmdevice.plan_devices(tree, "7.14.0", plat, {}, ("gfx90a:xnack-",), guard)
    assert [(w.target, [a for _, a in w.archives]) for w in only] == [
        ("gfx90a", ["_rocm_sdk_libraries/.kpack/rand_lib_gfx90a:xnack-.kpack"])
    ]


def test_split_tree_names_and_thin_requirement(tmp_path: Path) -> None:
    split = _tree(tmp_path / "split", ["rand_lib_gfx90a:xnack-.kpack"])
    assert rocmwheels.tree_libraries_dist(split, "gfx94X-dcgpu") == "rocm-sdk-libraries"
    thin = rocmwheels.thin_source(split, "all", ("gfx90a",))
    assert thin.meta == "rocm[device-gfx90a,libraries]==7.14.0"
    assert thin.requirements(["rocm-sdk-core", "rocm-sdk-libraries"]) == [thin.meta]
    # a wheel that needs only core's libraries requires core alone
    assert thin.requirements(["rocm-sdk-core"]) == ["rocm-sdk-core==7.14.0"]

    plain = _tree(tmp_path / "plain", [])
    assert (
        rocmwheels.tree_libraries_dist(plain, "gfx94X-dcgpu") == "rocm-sdk-libraries-gfx94X-dcgpu"
    )
    thin = rocmwheels.thin_source(plain, "gfx94X-dcgpu", ("gfx942",))
    assert thin.meta == ""
    assert thin.requirements(["rocm-sdk-libraries-gfx94X-dcgpu", "rocm-sdk-core"]) == [
        "rocm-sdk-core==7.14.0",
        "rocm-sdk-libraries-gfx94X-dcgpu==7.14.0",
    ]


def test_thin_source_of_old_callers_keeps_per_family_requirements() -> None:
    thin = ThinSource("6.4.0", "all", {})
    assert thin.requirements(["rocm-sdk-libraries-all"]) == ["rocm-sdk-libraries-all==6.4.0"]
