"""Results stay typed up to the CLI; ``as_json()`` is where they become JSON, the same JSON as
when the CLI read them by key."""

from __future__ import annotations

import json

import pytest

from rocm_build.building import cachestats
from rocm_build.building.cachestats import CacheStats
from rocm_build.building.compilercache import CompilerCache
from rocm_build.smoke.execute import Device, HipRuntime, SuiteFacts

#: facts.json as the smoke suite writes it (smoke_support, test_gpu, test_generic, test_triton)
FACTS = {
    "probes": {
        "torch": {"hip": {"loaded": False}},
        "torch,triton": {"hip": {"loaded": True, "path": "/opt/rocm/lib/libamdhip64.so", "rc": 0}},
    },
    "found_targets": {"torch": ["gfx90a", "gfx942"]},
    "triton": {"unsupported_targets": ["gfx1010"]},
    "devices": [
        {
            "index": 0,
            "name": "AMD Instinct MI300X",
            "gfx": "gfx942:sramecc+:xnack-",
            "memory_gib": 191.984375,
            "compute_units": 304,
        }
    ],
}


def test_the_suite_facts_read_as_the_cli_shows_them() -> None:
    facts = SuiteFacts.from_json(FACTS)
    assert facts.hip == HipRuntime("/opt/rocm/lib/libamdhip64.so", 0)  # the first that loaded
    assert facts.found_targets == {"torch": ("gfx90a", "gfx942")}
    assert facts.triton_refused == ("gfx1010",)
    assert facts.devices == (
        Device(0, "AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 191.984375, 304),
    )
    assert SuiteFacts.from_json({}) == SuiteFacts()  # a suite that wrote nothing


def test_a_device_without_its_facts_is_refused() -> None:
    with pytest.raises(KeyError, match="compute_units"):
        Device.from_json({"index": 0, "name": "x", "gfx": "gfx90a", "memory_gib": 1})


def test_the_cache_statistics_json_is_the_kind_then_the_counters() -> None:
    counters = {"hits": 3, "misses": 2, "remote_hits": 1}
    stats = CacheStats("ccache", True, counters)
    assert json.dumps(stats.as_json()) == json.dumps({"kind": "ccache", **counters})
    assert (stats.hits, stats.misses) == (3, 2)
    none = cachestats.statistics(CompilerCache("none"), {})
    assert (none.enabled, none.hits, none.misses, none.as_json()) == (
        False,
        0,
        0,
        {"kind": "none"},
    )
