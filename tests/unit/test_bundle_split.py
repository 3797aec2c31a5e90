"""Pure parts of bundle --split-arch: device wheel names, the host's extras, data ownership."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocm_build.bundle import kpackown
from rocm_build.bundle import split as splitarch
from rocm_build.common.errors import ConfigError
from rocm_build.wheel import wheelmeta


def test_device_name_from_the_pattern() -> None:
    assert splitarch.device_name(splitarch.DEFAULT_DEVICE_NAME, "Torch", "gfx942") == (
        "amd-torch-device-gfx942"
    )
    assert splitarch.device_name("{project}-kernels-{target}", "torch", "gfx1100") == (
        "torch-kernels-gfx1100"
    )


@pytest.mark.parametrize(
    "pattern",
    ["{project}-device", "{project} {target}", "{nope}-{target}", "x" * 300 + "-{target}"],
)
def test_device_name_that_is_no_distribution_name_is_refused(pattern: str) -> None:
    with pytest.raises(ConfigError, match=r"bundle\.device_name"):
        splitarch.device_name(pattern, "torch", "gfx942")


def test_extras_go_into_the_headers_and_read_back() -> None:
    meta = "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0\nRequires-Dist: filelock\n\nBody\n"
    extras = {"device-gfx942": "amd-torch-device-gfx942==2.9.0"}
    out = wheelmeta.add_extras(meta, extras)
    head, _, body = out.partition("\n\n")
    assert body == "Body\n"
    assert head.endswith(
        "Provides-Extra: device-gfx942\n"
        'Requires-Dist: amd-torch-device-gfx942==2.9.0; extra == "device-gfx942"'
    )
    assert wheelmeta.add_extras(out, extras) == out  # again: the same, not twice
    assert splitarch.device_requirements(out) == {"gfx942": "amd-torch-device-gfx942==2.9.0"}
    assert splitarch.device_requirements(meta) == {}


def test_member_targets_only_inside_data_trees() -> None:
    prefixes = ["torch/lib/rocblas/library", "torch/share/miopen/db"]
    targets = ["gfx942", "gfx1100"]
    own = splitarch.member_targets
    assert own("torch/lib/rocblas/library/TensileLibrary_gfx942.dat", prefixes, targets) == {
        "gfx942"
    }
    assert own("torch/lib/rocblas/library/TensileManifest.txt", prefixes, targets) == set()
    assert own("torch/share/miopen/db/gfx1100_48.kdb", prefixes, targets) == {"gfx1100"}
    assert own("torch/lib/libgfx942_helper.so", prefixes, targets) == set()  # not data


def test_the_plan_names_the_device_wheels_and_refuses_thin_mode(tmp_path: Path) -> None:
    from rocm_build import bundle
    from tests.support.planworkspace import plan_workspace

    ws = plan_workspace(tmp_path)  # --arch gfx90a
    plan = bundle.split_arch_plan(ws.ctx, ws.built)
    assert plan.devices == {
        "torch-2.9.0+rocm6.4.1-cp311-cp311-linux_x86_64.whl": {"gfx90a": "amd-torch-device-gfx90a"},
        "torchvision-0.24.0+rocm6.4.1-cp311-cp311-linux_x86_64.whl": {
            "gfx90a": "amd-torchvision-device-gfx90a"
        },
    }
    assert [w.name for w in plan.fat.wheels] == [w.name for w in ws.built]  # torch first
    assert set(plan.fingerprints) == set(ws.built)
    # the conflict is the plan's (it was the command's)
    with pytest.raises(
        ConfigError, match=r"^--split-arch makes fat wheels: leave out --mode thin$"
    ):
        bundle.split_arch_plan(ws.ctx, ws.built, mode="thin")


def test_the_projects_own_archives_go_with_the_targets_they_serve() -> None:
    targets = ["gfx90a", "gfx1030"]
    assert splitarch.member_targets("torch/.kpack/torch_gfx90a:xnack-.kpack", [], targets) == {
        "gfx90a"
    }
    assert splitarch.member_targets("hipext/.kpack/hipext_gfx1030.kpack", [], targets) == {
        "gfx1030"
    }


def test_only_members_inside_a_package_are_kpack_split() -> None:
    assert kpackown.splittable("torch/lib/libtorch_hip.so") == ""
    assert kpackown.splittable("hipext/_kern.so") == ""
    assert "not inside a package" in kpackown.splittable("_kern.so")
    assert "installed elsewhere" in kpackown.splittable("torch-2.9.0.data/purelib/x/_k.so")


def test_the_output_says_where_the_device_code_went() -> None:
    split = kpackown.OwnSummary(
        loader=True,
        libraries=("torch/lib/libtorch_hip.so",),
        archives=("torch/.kpack/torch_gfx942.kpack",),
        kept={"torch/_odd.so": "machine 183 is not x86-64 (62)"},
    )
    lines = list(
        kpackown.device_code_lines(["gfx942"], ["torch/.kpack/blas_lib_gfx942.kpack"], split)
    )
    assert lines[0].endswith(
        "own libraries' device code (1 libraries, 1 kpack archives) went to the device wheels "
        "(kpack-split: the tree's runtime loads kpack)"
    )
    assert "torch/_odd.so keeps its device code in the host wheel" in lines[1]
    assert (
        lines[2] == "  the ROCm libraries' device code (1 kpack archives) went to the device wheels"
    )
    no_loader = kpackown.OwnSummary(loader=False)
    (line,) = kpackown.device_code_lines(["gfx942"], ["a.kpack"], no_loader)
    assert "stays in the host wheel (the tree's runtime cannot load kpack" in line
    (line,) = kpackown.device_code_lines(["gfx942"], [], no_loader)
    assert "keep the device code of every requested target (gfx942)" in line
    assert list(kpackown.device_code_lines(["gfx942"], [], None)) == [line]  # not told


def test_the_own_summary_json_is_the_split_record() -> None:
    own = kpackown.OwnSplit(
        loader=True,
        hosts={"b.so": Path("b"), "a.so": Path("a")},
        archives={"x.kpack": Path("x")},
        kept={"z.so": "why", "c.so": "because"},
    )
    assert json.dumps(own.summary().as_json()) == json.dumps(
        {
            "loader": True,
            "libraries": ["a.so", "b.so"],
            "archives": ["x.kpack"],
            "kept": {"c.so": "because", "z.so": "why"},
        }
    )
    result = splitarch.SplitResult("in.whl", "host.whl", {}, "up-to-date", 1.0)
    assert result.as_json()["kpack_own"] == {}
    keys = list(result.as_json())
    assert keys == ["input", "host", "devices", "status", "seconds", "moved", "bundle", "kpack_own"]
