"""gfx target parsing, families, validation and GPU detection from KFD topology text."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build import config
from rocm_build.common import arch
from rocm_build.common.errors import ConfigError
from tests.support.therock import THEROCK_FAMILIES

CFG = config.load(cwd=Path("/nonexistent-cwd"), env={})
KNOWN = CFG.known_targets
FAMILIES = CFG.target_families

# A KFD topology node of an MI210 (gfx90a), as the amdgpu driver writes it (trimmed).
MI210_PROPERTIES = """\
cpu_cores_count 0
simd_count 416
mem_banks_count 1
caches_count 235
io_links_count 1
p2p_links_count 0
cpu_core_id_base 0
simd_id_base 2147487744
max_waves_per_simd 8
lds_size_in_kb 64
gds_size_in_kb 0
num_gws 64
wave_front_size 64
array_count 8
simd_arrays_per_engine 1
cu_per_simd_array 13
simd_per_cu 4
max_slots_scratch_cu 32
gfx_target_version 90010
vendor_id 4098
device_id 29711
location_id 768
domain 0
drm_render_minor 128
hive_id 0
num_sdma_engines 2
num_sdma_xgmi_engines 3
num_sdma_queues_per_engine 8
num_cp_queues 24
max_engine_clk_fcompute 1700
local_mem_size 0
fw_version 78
capability 671588992
debug_prop 1495
sdma_fw_version 8
unique_id 1234567890
num_xcc 1
max_engine_clk_ccompute 2200
"""
CPU_PROPERTIES = """\
cpu_cores_count 32
simd_count 0
mem_banks_count 1
gfx_target_version 0
vendor_id 0
device_id 0
"""


def expand(text: str) -> tuple[str, ...]:
    return arch.expand(arch.split_arch(text), known=KNOWN, families=FAMILIES)


def test_semicolons_commas_and_spaces_separate_targets() -> None:
    assert expand("gfx90a;gfx1030") == ("gfx90a", "gfx1030")
    assert expand("gfx90a, gfx1030") == ("gfx90a", "gfx1030")
    assert expand(" gfx1100 ") == ("gfx1100",)


def test_families_expand_and_duplicates_drop() -> None:
    assert expand("gfx110X") == ("gfx1100", "gfx1101", "gfx1102", "gfx1103")
    assert expand("gfx1100;gfx110X-all") == ("gfx1100", "gfx1101", "gfx1102", "gfx1103")
    assert expand("GFX94x") == ("gfx942",)


def test_features_are_kept_for_the_compiler() -> None:
    assert expand("gfx90a:xnack-;gfx942:sramecc+:xnack-") == (
        "gfx90a:xnack-",
        "gfx942:sramecc+:xnack-",
    )
    assert arch.base_name("gfx942:sramecc+:xnack-") == "gfx942"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("gfx1300", "not a known target"),
        ("gfx90b", "did you mean .*gfx90a"),
        ("gfx11000", "not a gfx target name"),
        ("mi300", "not a gfx target name"),
        ("gfx90a:xnack", "unknown feature 'xnack'"),
        ("gfx90a:foo+", r"unknown feature 'foo\+'"),
        ("gfx90a:xnack-:xnack+", "twice"),
        ("gfx110X:xnack-", "not to the family"),
    ],
)
def test_bad_names_are_errors_with_a_hint(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        expand(text)


def test_close_matches_include_families() -> None:
    with pytest.raises(ConfigError, match="gfx110X"):
        expand("gfx110x-everything")


@pytest.mark.parametrize(
    ("version", "name"),
    [
        (90010, "gfx90a"),
        (90402, "gfx942"),
        (100300, "gfx1030"),
        (110000, "gfx1100"),
        (110501, "gfx1151"),
        (90012, "gfx90c"),
        (0, None),
    ],
)
def test_target_from_kfd_version(version: int, name: str | None) -> None:
    assert arch.target_from_version(version) == name


def test_parse_recorded_properties() -> None:
    assert arch.parse_topology_properties(MI210_PROPERTIES) == "gfx90a"
    assert arch.parse_topology_properties(CPU_PROPERTIES) is None
    assert arch.parse_topology_properties("simd_count 0\n") is None


def _topology(tmp_path: Path, nodes: list[str]) -> Path:
    for i, text in enumerate(nodes):
        node = tmp_path / "nodes" / str(i)
        node.mkdir(parents=True)
        (node / "properties").write_text(text)
    return tmp_path / "nodes"


def test_detect_gpus_reads_every_node(tmp_path: Path) -> None:
    gfx1100 = MI210_PROPERTIES.replace("90010", "110000")
    topo = _topology(tmp_path, [CPU_PROPERTIES, MI210_PROPERTIES, gfx1100, MI210_PROPERTIES])
    assert arch.detect_gpus({}, topo) == ("gfx90a", "gfx1100")


def test_no_driver_means_no_gpus(tmp_path: Path) -> None:
    assert arch.detect_gpus({}, tmp_path / "missing") == ()
    assert arch.detect_gpus({}, _topology(tmp_path, [CPU_PROPERTIES])) == ()


def test_hsa_override_decides_the_target(tmp_path: Path) -> None:
    gfx1032 = MI210_PROPERTIES.replace("90010", "100302")
    topo = _topology(tmp_path, [gfx1032])
    assert arch.detect_gpus({"HSA_OVERRIDE_GFX_VERSION": "10.3.0"}, topo) == ("gfx1030",)


def test_resolve_prefers_the_setting_then_gpus_then_asks(tmp_path: Path) -> None:
    topo = _topology(tmp_path, [MI210_PROPERTIES])
    kwargs = {"known": KNOWN, "families": FAMILIES, "env": {}, "topology": topo}
    setting = arch.Targets(("gfx1030",), "arch setting")
    assert arch.resolve_targets("gfx1030", **kwargs) == setting  # type: ignore[arg-type]
    gpus = arch.Targets(("gfx90a",), "GPUs of this machine")
    assert arch.resolve_targets("", **kwargs) == gpus  # type: ignore[arg-type]
    kwargs["topology"] = tmp_path / "none"
    with pytest.raises(ConfigError, match="pass --arch"):
        arch.resolve_targets("", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("family", "members"), sorted(THEROCK_FAMILIES.items()))
def test_therock_family_strings_have_their_exact_members(
    family: str, members: tuple[str, ...]
) -> None:
    assert expand(family) == members


def test_therock_families_are_the_configured_ones() -> None:
    ours = {k: v for k, v in FAMILIES.items() if "-" in k}
    assert ours == THEROCK_FAMILIES


def test_a_variant_suffix_no_longer_widens_a_family() -> None:
    assert "gfx1103" not in expand("gfx110X-dgpu")
    assert "gfx1251" not in expand("gfx125X-dcgpu")
    with pytest.raises(ConfigError, match="did you mean"):
        expand("gfx110X-dcgpu")


def test_every_target_is_one_rocm_bootstrap_knows_or_listed_as_extra() -> None:
    import rocm_bootstrap

    bootstrap = {t.name for t in rocm_bootstrap.ALL_TARGETS}
    assert set(arch.BOOTSTRAP_TARGETS) <= set(KNOWN)
    assert set(KNOWN) - bootstrap == {"gfx803", "gfx940", "gfx941"}
    for family, members in FAMILIES.items():
        assert set(members) <= set(KNOWN), family


@pytest.mark.parametrize(
    ("group", "members"),
    [
        ("gfx110x", ("gfx1100", "gfx1101", "gfx1102", "gfx1103")),
        ("gfx12_5", ("gfx1250", "gfx1251")),
        ("gfx9_4", ("gfx942",)),
        ("gfx11", ("gfx1100", "gfx1101", "gfx1102", "gfx1103",
                   "gfx1150", "gfx1151", "gfx1152", "gfx1153")),
    ],
)  # fmt: skip
def test_rocm_bootstrap_groups_are_families(group: str, members: tuple[str, ...]) -> None:
    assert expand(group) == members


def test_suggestions_include_rocm_bootstrap_groups() -> None:
    with pytest.raises(ConfigError, match="gfx12_5"):
        expand("gfx12_6")


def test_kfd_versions_decode_through_rocm_bootstrap_and_beyond_it() -> None:
    assert arch.target_from_version(120500) == "gfx1250"
    assert arch.target_from_version(130000) == "gfx1300"  # not in rocm-bootstrap 0.3 yet


def test_rocm_bootstrap_detection_variables(tmp_path: Path) -> None:
    topo = _topology(tmp_path, [MI210_PROPERTIES])
    assert arch.detect_gpus({"ROCM_BOOTSTRAP_DISABLE_DETECTION": "1"}, topo) == ()
    forced = {"ROCM_BOOTSTRAP_FORCE_GFX_ARCH": "gfx942, gfx942,gfx1100"}
    assert arch.detect_gpus(forced, topo) == ("gfx942", "gfx1100")


def test_device_package_names_come_from_rocm_bootstrap() -> None:
    assert arch.package_key("gfx942") == "gfx942"
    assert arch.package_key("gfx90a:xnack-") == "gfx90a"
    assert arch.package_key("gfx803") == "gfx803"  # not in rocm-bootstrap: its own name
