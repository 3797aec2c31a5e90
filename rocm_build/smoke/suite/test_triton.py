"""Triton beside torch, no GPU needed: both import in either order, each in its own process;
Triton's HIP lookup resolves into the installed wheels and loads one runtime; a small kernel
compiles ahead of time for each requested target; torch's flash attention matches the build's
setting. Skipped as a whole, with the reason, when triton is not among the packages under test.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import smoke_support as sup
from smoke_support import SmokeConfig

if "triton" not in sup.current().packages:
    pytest.skip(
        f"triton is not under test (packages: {', '.join(sup.current().packages) or 'none'})",
        allow_module_level=True,
    )

SCRIPT = Path(__file__).resolve().parent / "smoke_triton.py"
ORDERS = (
    [("torch", "triton"), ("triton", "torch")]
    if "torch" in sup.current().packages
    else [("triton",)]
)


@pytest.mark.parametrize("order", ORDERS, ids=["-".join(o) for o in ORDERS])
def test_imports_and_finds_hip_in_the_wheels(smoke: SmokeConfig, order: tuple[str, ...]) -> None:
    got = sup.run_script(SCRIPT, "imports", *order, what="import")
    smoke.facts.setdefault("triton", {})["-".join(order)] = got
    err = got["import_error"]
    assert err is None, f"import {err and err['package']} failed:\n{err and err['traceback']}"
    assert "lookup_error" not in got, f"Triton's HIP lookup failed: {got.get('lookup_error')}"
    found = got["found"]
    assert Path(found).name.startswith("libamdhip64.so"), f"Triton found {found}"
    assert smoke.in_site(found), f"Triton's HIP lookup found {found}, outside the environment"
    assert smoke.forbidden_for(found) is None, f"Triton found HIP in a forbidden folder: {found}"
    # The unversioned name may be an alias stub of the runtime: count the runtimes, not the names.
    runtimes = sorted({p for p in got["maps"] if Path(p).name != "libamdhip64.so"})
    assert len(runtimes) <= 1, f"more than one HIP runtime in the process: {runtimes}"
    assert all(smoke.in_site(p) for p in got["maps"]), f"HIP mapped from outside: {got['maps']}"
    if sup.no_gpu_expected():
        assert got["rc"] == sup.HIP_ERROR_NO_DEVICE, f"hipGetDeviceCount -> {got['rc']}"


def test_compiles_ahead_of_time_for_each_target(smoke: SmokeConfig) -> None:
    """Each requested target Triton generates code for compiles; one this Triton refuses as
    unsupported (its own verdict, read from the installed Triton) is reported, not failed:
    torch and ROCm may support a target that Triton's AMD backend does not."""
    if not smoke.targets:
        pytest.skip("no requested targets given (--rocm-arch / SMOKE_ARCH)")
    got = sup.run_script(SCRIPT, "compile", *smoke.targets, what="triton.compile for")
    sizes, unsupported = got["hsaco"], got["unsupported"]
    facts = smoke.facts.setdefault("triton", {})
    facts["hsaco_bytes"] = sizes
    facts["unsupported_targets"] = sorted(unsupported)
    failed = {t: v for t, v in sizes.items() if not isinstance(v, int) or v <= 0}
    assert not failed, "triton.compile failed for:\n" + "\n".join(
        f"{t}: {str(v).strip().splitlines()[-1] if str(v).strip() else v}"
        for t, v in failed.items()
    )
    assert sorted([*sizes, *unsupported]) == sorted(smoke.targets)
    if unsupported:
        note = ", ".join(sorted(unsupported))
        if not sizes:
            pytest.skip(f"this Triton supports none of the targets ({note}): nothing to compile")
        warnings.warn(f"this Triton does not support {note}: not compiled", stacklevel=1)


def test_flash_attention_matches_the_setting(smoke: SmokeConfig) -> None:
    if "torch" not in smoke.packages:
        pytest.skip("torch is not under test")
    if smoke.flash_attention is None:
        pytest.skip("flash attention not given (--flash-attention / SMOKE_FLASH_ATTENTION)")
    got = sup.run_script(SCRIPT, "flash", what="flash attention")
    if got["available"] is None:
        pytest.skip("this torch has no torch.backends.cuda.is_flash_attention_available")
    want = "on" if smoke.flash_attention else "off"
    assert got["available"] == smoke.flash_attention, (
        f"torch.backends.cuda.is_flash_attention_available() is {got['available']}, "
        f"but the build's flash attention is {want}"
    )
