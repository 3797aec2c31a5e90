"""Pure parts of bundle --split-arch: device wheel names, the host's extras, data ownership."""

from __future__ import annotations

import pytest

from rocm_build.bundle import split as splitarch
from rocm_build.errors import ConfigError
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
