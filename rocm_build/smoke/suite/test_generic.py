"""Checks for any bundled ROCm extension package: it imports, every ROCm library it loads comes
from inside this environment, its search paths stay inside the environment, its code objects
cover exactly the requested gfx targets, and the bundled HIP runtime answers (no GPU needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import smoke_support as sup
from smoke_support import SmokeConfig


def test_imports(smoke: SmokeConfig, package: str) -> None:
    result = sup.imported(smoke, package)
    where = result["imported"][package]
    assert where, f"{package} has no __file__: a namespace package, not the wheel's?"
    assert smoke.in_site(where), f"{package} imported from {where}, not site-packages"


def test_rocm_libraries_come_from_the_environment(smoke: SmokeConfig, package: str) -> None:
    maps = sup.imported(smoke, package)["maps"]
    rocm = [p for p in maps if sup.is_rocm_library(p)]
    assert rocm, f"import {package} loaded no ROCm library: was it built without ROCm?"
    outside = [p for p in rocm if not smoke.in_site(p)]
    assert not outside, "ROCm libraries loaded from outside site-packages:\n" + "\n".join(outside)
    # Libraries the wheels carry (libnuma, libelf, libdrm, ...) must be used from the wheel too.
    carried = {
        Path(info.path).name
        for pkg in smoke.packages
        for info in sup.package_elves(pkg)
        if not info.is_device_code
    }
    shadowed = [p for p in maps if Path(p).name in carried and not smoke.in_site(p)]
    assert not shadowed, "copies outside the environment won over bundled ones:\n" + "\n".join(
        shadowed
    )
    forbidden = [(p, bad) for p in maps if (bad := smoke.forbidden_for(p)) is not None]
    assert not forbidden, "files mapped from forbidden folders:\n" + "\n".join(
        f"{p} (under {bad})" for p, bad in forbidden
    )


def _escapes(origin_dir: Path, entry: str, smoke: SmokeConfig) -> str | None:
    """Why a search-path entry is unacceptable, or None."""
    if not entry.startswith(("$ORIGIN", "${ORIGIN}")):
        return "not $ORIGIN-relative"
    rest = entry.removeprefix("${ORIGIN}").removeprefix("$ORIGIN")
    resolved = Path(os.path.normpath(str(origin_dir) + rest))
    if not smoke.in_site(resolved):
        return f"leads outside site-packages ({resolved})"
    return None


def test_search_paths_stay_inside(smoke: SmokeConfig, package: str) -> None:
    elves = [e for e in sup.package_elves(package) if not e.is_device_code]
    assert elves, f"{package} installed no ELF files: not a binary extension package?"
    problems = []
    for info in elves:
        for kind, entries in (("RPATH", info.rpath), ("RUNPATH", info.runpath)):
            for entry in entries:
                why = _escapes(Path(info.path).parent, entry, smoke)
                if why:
                    problems.append(f"{info.path}: {kind} {entry!r} {why}")
    assert not problems, "search paths that escape the environment:\n" + "\n".join(problems)


def test_code_object_targets(smoke: SmokeConfig, package: str) -> None:
    if not smoke.targets:
        pytest.skip("no requested targets given (--rocm-arch / SMOKE_ARCH)")
    wanted = set(smoke.targets)
    with_code = [e for e in sup.package_elves(package) if e.has_fatbin]
    unreadable = [e for e in with_code if e.unreadable_bundles and not e.targets]
    readable = [e for e in with_code if e not in unreadable]
    if with_code and not readable:
        pytest.skip(
            f"{len(unreadable)} libraries hold compressed code objects and this Python has no "
            "zstd module (Python 3.14's compression.zstd or 'zstandard')"
        )
    assert with_code, f"{package} has no HIP code objects (.hip_fatbin): built without ROCm?"
    found: set[str] = set()
    problems = []
    for info in readable:
        found |= info.targets
        if sup.is_rocm_library(info.path):
            # A bundled ROCm library may carry more targets than asked for, never fewer.
            missing = wanted - info.targets
            if missing:
                problems.append(f"{info.path}: missing {';'.join(sorted(missing))}")
        elif info.targets != wanted:
            extra, missing = info.targets - wanted, wanted - info.targets
            problems.append(
                f"{info.path}: has {';'.join(sorted(info.targets))}"
                + (f", missing {';'.join(sorted(missing))}" if missing else "")
                + (f", not requested {';'.join(sorted(extra))}" if extra else "")
            )
    smoke.facts["found_targets"][package] = sorted(found)
    assert not problems, (
        f"code objects differ from the requested targets {';'.join(sorted(wanted))}:\n"
        + "\n".join(problems)
    )


def test_hip_runtime_from_wheel_answers(smoke: SmokeConfig, package: str) -> None:
    hip = sup.imported(smoke, package)["hip"]
    if not hip.get("loaded"):
        pytest.skip(f"import {package} does not load the HIP runtime (libamdhip64)")
    assert "error" not in hip, f"calling the HIP runtime failed: {hip['error']}"
    assert smoke.in_site(hip["path"]), f"libamdhip64 loaded from {hip['path']}, not the wheel"
    if sup.no_gpu_expected():
        assert hip["rc"] == sup.HIP_ERROR_NO_DEVICE, (
            f"no GPU here (/dev/kfd missing): hipGetDeviceCount should return "
            f"hipErrorNoDevice (100), got {hip['rc']}"
        )
        assert hip["count"] == 0
    else:
        assert hip["rc"] in (0, sup.HIP_ERROR_NO_DEVICE), f"hipGetDeviceCount -> {hip['rc']}"
