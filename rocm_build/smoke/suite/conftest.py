"""What the smoke suite tests, and its summary.

This suite runs inside the environment where the wheels are installed. It imports only the
standard library, pytest, and the packages under test. What is under test comes from options or
the environment (options win):

  --packages / SMOKE_PACKAGES          import names, comma separated (e.g. torch,torchvision)
  --rocm-arch / SMOKE_ARCH             the gfx targets the wheels were built for (';' or ',')
  --forbidden-path / SMOKE_FORBIDDEN_PATHS
                                       folders no loaded library may come from (the ROCm tree, the
                                       build tree; os.pathsep separated); /opt/rocm always
  --smoke-report / SMOKE_REPORT        write the collected facts here as JSON
  --flash-attention / SMOKE_FLASH_ATTENTION
                                       on or off: whether torch was built with flash attention
                                       (checked when given)

triton gets its own checks (test_triton.py), not the ROCm-extension ones of test_generic.py: its
wheel carries no HIP code and loads HIP only when a kernel runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import smoke_support

CONFIG: smoke_support.SmokeConfig | None = None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("smoke", "what the smoke suite tests")
    group.addoption("--packages", default=None, help="import names under test, comma separated")
    group.addoption("--rocm-arch", default=None, help="requested gfx targets, ';' or ','")
    group.addoption(
        "--forbidden-path", action="append", default=[], help="no library may load from here"
    )
    group.addoption("--smoke-report", default=None, help="write the collected facts here (JSON)")
    group.addoption(
        "--flash-attention", default=None, choices=("on", "off"), help="torch's flash attention"
    )


def pytest_configure(config: pytest.Config) -> None:
    global CONFIG
    env = os.environ
    CONFIG = smoke_support.make_config(
        packages=config.getoption("--packages") or env.get("SMOKE_PACKAGES"),
        targets=config.getoption("--rocm-arch") or env.get("SMOKE_ARCH"),
        forbidden=[
            *config.getoption("--forbidden-path"),
            *env.get("SMOKE_FORBIDDEN_PATHS", "").split(os.pathsep),
        ],
        report=config.getoption("--smoke-report") or env.get("SMOKE_REPORT"),
        flash_attention=config.getoption("--flash-attention") or env.get("SMOKE_FLASH_ATTENTION"),
    )
    smoke_support.CONFIG = CONFIG


@pytest.fixture(scope="session")
def smoke() -> smoke_support.SmokeConfig:
    assert CONFIG is not None
    return CONFIG


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "package" in metafunc.fixturenames:
        assert CONFIG is not None
        others: list[str | None] = [p for p in CONFIG.packages if p != "triton"]
        names = others or ([] if "triton" in CONFIG.packages else [None])
        metafunc.parametrize("package", names, ids=[n or "none" for n in names], indirect=True)


@pytest.fixture
def package(request: pytest.FixtureRequest) -> str:
    if request.param is None:
        pytest.fail("no package under test: pass --packages or set SMOKE_PACKAGES")
    return str(request.param)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if CONFIG is None:
        return
    facts = CONFIG.facts
    tr = terminalreporter
    tr.section("ROCm smoke summary")
    tr.write_line(f"packages: {', '.join(CONFIG.packages) or '(none)'}")
    tr.write_line(f"requested targets: {';'.join(CONFIG.targets) or '(not given)'}")
    for key, result in facts["probes"].items():
        hip = result.get("hip", {})
        if result.get("import_error"):
            tr.write_line(f"import {key}: FAILED in {result['import_error']['package']}")
        elif hip.get("loaded"):
            tr.write_line(
                f"import {key}: HIP runtime {hip.get('path')}: hipGetDeviceCount "
                f"-> {hip.get('rc')}, {hip.get('count')} devices"
            )
    for pkg, found in facts["found_targets"].items():
        tr.write_line(f"code objects in {pkg}: {';'.join(found) or '(none)'}")
    for dev in facts["devices"]:
        tr.write_line(
            f"device {dev['index']}: {dev['name']}, {dev['gfx']}, "
            f"{dev['memory_gib']:.1f} GiB, {dev['compute_units']} CUs"
        )
    if not facts["devices"]:
        tr.write_line("devices: none visible (GPU tests skipped)")
    if CONFIG.report_path is not None:
        tmp = CONFIG.report_path.with_name(CONFIG.report_path.name + ".tmp")
        tmp.write_text(json.dumps(facts, indent=2, default=str), encoding="utf-8")
        tmp.replace(CONFIG.report_path)
