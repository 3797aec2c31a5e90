"""Shared helpers of the smoke suite (standard library only): configuration, probes, ELF facts."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import smoke_elf

HERE = Path(__file__).resolve().parent

# Libraries that belong to ROCm: once a wheel is self-contained, none may come from the system.
ROCM_LIBRARY = re.compile(
    r"^lib(amdhip64|hsa-runtime64|hsakmt|hsa-amd-aqlprofile64|amd_comgr|amd_smi|hiprtc|hip\w+"
    r"|roc\w+|rccl|MIOpen|magma|aotriton\w*|roctx64|roctracer64)[-.]",
)
HIP_ERROR_NO_DEVICE = 100


@dataclass
class SmokeConfig:
    packages: list[str]
    targets: list[str]
    forbidden: list[Path]
    site_dirs: list[Path]
    report_path: Path | None
    facts: dict[str, Any] = field(default_factory=dict)
    #: Whether torch was built with flash attention (None: not said, so not checked).
    flash_attention: bool | None = None

    def in_site(self, path: str | Path) -> bool:
        real = Path(os.path.realpath(path))
        return any(real.is_relative_to(site) for site in self.site_dirs)

    def forbidden_for(self, path: str | Path) -> Path | None:
        real = Path(os.path.realpath(path))
        for bad in self.forbidden:
            if Path(path).is_relative_to(bad) or real.is_relative_to(bad):
                return bad
        return None


def split_list(text: str | None, seps: str = ",;") -> list[str]:
    return [p for p in re.split(f"[{re.escape(seps)}\\s]+", text or "") if p]


def site_dirs() -> list[Path]:
    paths = sysconfig.get_paths()
    return sorted({Path(os.path.realpath(paths[k])) for k in ("purelib", "platlib")})


def make_config(
    packages: str | None,
    targets: str | None,
    forbidden: list[str],
    report: str | None,
    flash_attention: str | None = None,
) -> SmokeConfig:
    bad = [Path("/opt/rocm"), *(Path(p) for p in forbidden if p)]
    bad += [Path(os.path.realpath(p)) for p in bad if Path(os.path.realpath(p)) != p]
    cfg = SmokeConfig(
        packages=split_list(packages, ","),
        targets=split_list(targets),
        forbidden=bad,
        site_dirs=site_dirs(),
        report_path=Path(report) if report else None,
        flash_attention={"on": True, "off": False}.get((flash_attention or "").lower()),
    )
    cfg.facts = {
        "packages": cfg.packages,
        "targets": cfg.targets,
        "site_dirs": [str(p) for p in cfg.site_dirs],
        "probes": {},
        "found_targets": {},
        "devices": [],
        "flash_attention": cfg.flash_attention,
    }
    return cfg


#: The run's configuration, set by conftest.py before collection.
CONFIG: SmokeConfig | None = None


def current() -> SmokeConfig:
    assert CONFIG is not None, "smoke_support.CONFIG is set by conftest.py"
    return CONFIG


_PROBES: dict[tuple[str, ...], dict[str, Any]] = {}


def probe(smoke: SmokeConfig, *packages: str) -> dict[str, Any]:
    """Import ``packages`` in a fresh interpreter: what it mapped and what HIP said (cached)."""
    key = tuple(packages)
    if key not in _PROBES:
        _PROBES[key] = run_script(HERE / "smoke_probe.py", *packages, what="probe importing")
        shown = {k: v for k, v in _PROBES[key].items() if not k.startswith("maps")}
        smoke.facts["probes"][",".join(key)] = shown
    return _PROBES[key]


def run_script(
    script: Path, *args: str, what: str, env: dict[str, str] | None = None, timeout: float = 600
) -> dict[str, Any]:
    """Run a probe script in a fresh interpreter and return the JSON it wrote to its result file.

    The result travels in a file of its own, not on stdout: stdout and stderr belong to the
    packages under test, which may print on import. Fails the test, with the output's tail, when
    the script crashes or ends without a result."""
    with tempfile.TemporaryDirectory(prefix="smoke-probe-") as tmp:
        result = Path(tmp) / "result.json"
        proc = subprocess.run(
            [sys.executable, str(script), "--result", str(result), *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=timeout,
            env=env,
        )
        label = f"{what} {', '.join(args)}"
        output = f"{proc.stdout[-2000:]}{proc.stderr[-4000:]}"
        if proc.returncode != 0:
            pytest.fail(f"{label} crashed (exit {proc.returncode}):\n{output}", pytrace=False)
        if not result.is_file():
            pytest.fail(f"{label} ended without a result (exit 0):\n{output}", pytrace=False)
        data: dict[str, Any] = json.loads(result.read_text(encoding="utf-8"))
        return data


def imported(smoke: SmokeConfig, *packages: str) -> dict[str, Any]:
    """``probe`` that fails the test, with the traceback, when an import fails."""
    result = probe(smoke, *packages)
    err = result.get("import_error")
    if err:
        last = err["traceback"].strip().splitlines()[-1]
        pytest.fail(f"import {err['package']} failed: {last}\n{err['traceback']}", pytrace=False)
    return result


def distribution_files(package: str) -> list[Path]:
    """Every installed file of the distributions that provide import name ``package``."""
    dists = importlib.metadata.packages_distributions().get(package, [])
    files: list[Path] = []
    for dist_name in dict.fromkeys(dists):
        dist = importlib.metadata.distribution(dist_name)
        for entry in dist.files or []:
            path = Path(str(entry.locate()))
            if path.is_file():
                files.append(path)
    if not files:
        spec = importlib.util.find_spec(package)
        if spec and spec.submodule_search_locations:
            for root in spec.submodule_search_locations:
                files.extend(p for p in Path(root).rglob("*") if p.is_file())
    return files


_ELF_CACHE: dict[str, list[smoke_elf.ElfInfo]] = {}


def package_elves(package: str) -> list[smoke_elf.ElfInfo]:
    """ELF facts of every ELF file the package's distributions installed."""
    if package not in _ELF_CACHE:
        infos = []
        for path in distribution_files(package):
            if smoke_elf.is_elf(path):
                info = smoke_elf.read(path)
                if info is not None:
                    infos.append(info)
        _ELF_CACHE[package] = infos
    return _ELF_CACHE[package]


def is_rocm_library(path: str | Path) -> bool:
    return bool(ROCM_LIBRARY.match(Path(path).name))


def no_gpu_expected() -> bool:
    """No GPU driver interface on this machine, so HIP must answer hipErrorNoDevice."""
    return not Path("/dev/kfd").exists()


def visible_device_filter() -> tuple[str, list[str]] | None:
    """The device filter in force (HIP's variable wins over CUDA's), as (name, entries)."""
    for name in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(name)
        if value is not None:
            return name, [v.strip() for v in value.split(",") if v.strip()]
    return None
