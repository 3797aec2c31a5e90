"""rocm-build smoke with the real ``triton`` 3.9.0 wheel beside a fat torch fixture (bundled
against the Debian ROCm tree, which the run keeps out of reach): triton gets its own checks
(imports in both orders, HIP found in torch/lib, ahead-of-time compiles for each requested
target, flash attention against the setting) and not the ROCm-extension ones. No GPU is used (none
exists here). The fixture torch is not a real torch, so torch's own checks fail; the test reads
the Triton checks' outcomes one by one."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.integration.smoke.conftest import offline_wheels

from .torchwheels import bundled_torch, triton_wheel

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the cached triton wheel is cp311"),
]
__all__ = ["offline_wheels"]  # a fixture, used by name

# gfx1030: ROCm and torch support it, this Triton's AMD backend does not (it says so itself).
TARGETS = "gfx942;gfx90a;gfx1100;gfx1030"
# The fixture torch says it has no flash attention, as a torch built without it does.
FLASH = b"def is_flash_attention_available():\n    return False\n"


@pytest.fixture
def fat_torch_with_flash_query(hip_ext_so: Path, tree_copy: Path, tmp_path: Path, run_cli) -> Path:  # type: ignore[no-untyped-def]
    flash = {"torch/backends/__init__.py": b"", "torch/backends/cuda/__init__.py": FLASH}
    return bundled_torch(run_cli, hip_ext_so, tree_copy, tmp_path, flash)


def _outcomes(stdout: str) -> dict[str, tuple[str, str]]:
    data = json.loads(stdout)
    out = {f["test"].rsplit("::", 1)[-1]: ("failed", f["message"]) for f in data["failures"]}
    out |= {s["test"].rsplit("::", 1)[-1]: ("skipped", s["reason"]) for s in data["skips"]}
    return out


def test_smoke_checks_real_triton_beside_fat_torch(  # type: ignore[no-untyped-def]
    fat_torch_with_flash_query: Path,
    tree_copy: Path,
    tmp_path: Path,
    offline_wheels: Path,
    run_cli,
) -> None:
    def smoke(flash: str) -> tuple[dict[str, object], dict[str, tuple[str, str]]]:
        res = run_cli(
            ["--json", "smoke", str(fat_torch_with_flash_query), str(triton_wheel(tmp_path)),
             "--arch", TARGETS, "--rocm", str(tree_copy), "--offline",
             "--find-links", str(offline_wheels)],
            cwd=tmp_path,
            env={"ROCM_BUILD_FEATURES_FLASH_ATTENTION": flash},
        )  # fmt: skip
        data = json.loads(res.stdout)
        return data, _outcomes(res.stdout)

    data, outcomes = smoke("off")
    assert data["plan"]["packages"] == ["torch", "triton"], data["plan"]
    assert data["plan"]["flash_attention"] is False
    triton = {k: v for k, v in outcomes.items() if "triton" in k}
    # Not a ROCm extension: none of test_generic's checks runs on it.
    assert not [k for k in triton if not k.startswith(("test_imports_and", "test_compiles"))], (
        triton
    )
    for name in (
        "test_imports_and_finds_hip_in_the_wheels[torch-triton]",
        "test_imports_and_finds_hip_in_the_wheels[triton-torch]",
        "test_compiles_ahead_of_time_for_each_target",
        "test_flash_attention_matches_the_setting",
    ):
        assert name not in outcomes, (name, outcomes.get(name))  # passed
    facts = data["facts"]
    assert isinstance(facts, dict)
    sizes = facts["triton"]["hsaco_bytes"]
    assert sorted(sizes) == ["gfx1100", "gfx90a", "gfx942"]
    assert facts["triton"]["unsupported_targets"] == ["gfx1030"]  # reported, not failed
    assert min(sizes.values()) > 0
    for order in ("torch-triton", "triton-torch"):
        found = Path(facts["triton"][order]["found"])
        assert found.parent.parts[-2:] == ("torch", "lib"), facts["triton"][order]
        assert facts["triton"][order]["rc"] == 100  # hipErrorNoDevice: no GPU here

    data, outcomes = smoke("on")
    assert data["plan"]["flash_attention"] is True
    outcome, message = outcomes["test_flash_attention_matches_the_setting"]
    assert outcome == "failed", message
    assert "flash attention is on" in message, message
