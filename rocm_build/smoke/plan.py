"""The smoke stage's plan: which wheels, which import names, which targets, the scrubbed
environment, decided up front (no processes)."""

from __future__ import annotations

import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocm_build.common import arch
from rocm_build.common.errors import ConfigError, UnsafeInput
from rocm_build.common.statefile import file_kind
from rocm_build.config.schema import SmokeSettings
from rocm_build.run.context import RunContext
from rocm_build.smoke.environment import SCRUBBED_VARIABLES, scrub_environment
from rocm_build.smoke.wheels import import_names

__all__ = ["Plan", "flash_expectation", "plan"]


@dataclass(frozen=True)
class Plan:
    """The ``[smoke]`` section whole (``settings``), and what this run decided beside it."""

    wheels: tuple[Path, ...]
    packages: tuple[str, ...]
    targets: tuple[str, ...]
    python: str  # settings.python, else this interpreter
    run_dir: Path
    settings: SmokeSettings
    find_links: tuple[Path, ...]
    forbidden: tuple[Path, ...]
    env: Mapping[str, str]
    junit: Path | None = None
    #: the torch checkout's tests that ``settings.upstream_tests`` matches in (None: not run)
    upstream_dir: Path | None = None
    #: Whether torch was built with flash attention, checked beside Triton (None: not checked).
    flash_attention: bool | None = None

    @property
    def venv(self) -> Path:
        return self.run_dir / "venv"

    @property
    def venv_python(self) -> Path:
        return self.venv / "bin" / "python"

    def as_json(self) -> dict[str, Any]:
        return {
            "wheels": [str(w) for w in self.wheels],
            "packages": list(self.packages),
            "targets": list(self.targets),
            "python": self.python,
            "venv": str(self.venv),
            "offline": self.settings.offline,
            "find_links": [str(p) for p in self.find_links],
            "forbidden": [str(p) for p in self.forbidden],
            "scrubbed": [v for v in SCRUBBED_VARIABLES if v not in self.env],
            "flash_attention": self.flash_attention,
        }


def flash_expectation(ctx: RunContext, packages: Sequence[str]) -> bool | None:
    """Whether the torch under test was built with flash attention, as far as the settings say.

    Checked only with torch and triton both under test (auto needs Triton in the run). ``auto``
    with ``build.aotriton = auto`` is decided by the build from the aotriton it finds, so the
    settings alone do not know: None, not checked."""
    if "torch" not in packages or "triton" not in packages:
        return None
    cfg = ctx.settings
    setting = cfg.features.flash_attention
    if setting != "auto":
        return setting == "on"
    if cfg.build.aotriton == "off":
        return False
    if not arch.flash_targets(ctx.targets.bases):
        return False
    return None if cfg.build.aotriton == "auto" else True


def plan(
    ctx: RunContext,
    wheels: Sequence[Path],
    *,
    junit: Path | None = None,
    run_dir: Path | None = None,
) -> Plan:
    """Everything the smoke run will do, decided up front (no processes)."""
    if not wheels:
        msg = "no wheels to test; pass WHEEL... (e.g. wheels/*.whl)"
        raise ConfigError(msg)
    missing = [str(w) for w in wheels if not Path(w).exists()]
    if missing:
        msg = (
            f"wheel not found: {', '.join(missing)}; check the path (rocm-build bundle writes them)"
        )
        raise ConfigError(msg)
    for w in wheels:  # a FIFO or device at the name is refused unopened, as bundle does
        mode = Path(w).stat().st_mode
        if not stat.S_ISREG(mode):
            msg = f"{Path(w).name}: {file_kind(mode)}, not a wheel file; pass the .whl file itself"
            raise UnsafeInput(msg)
    resolved = tuple(Path(w).resolve() for w in wheels)
    cfg = ctx.settings
    packages = list(cfg.smoke.packages)
    if not packages:
        for wheel in resolved:
            packages.extend(import_names(wheel))
    # torch first: the extensions' checks lean on it
    packages = sorted(dict.fromkeys(packages), key=lambda n: (n != "torch", packages.index(n)))
    forbidden = [ctx.src_dir]
    if cfg.general.rocm:
        forbidden.append(cfg.absolute(cfg.general.rocm))
    for name in ("ROCM_PATH", "ROCM_HOME", "HIP_PATH"):
        if cfg.env.get(name):
            forbidden.append(Path(cfg.env[name]))
    find_links = tuple(
        dict.fromkeys(
            (cfg.cwd / p).resolve() for p in [*cfg.smoke.find_links, *cfg.build.find_links]
        )
    )
    if cfg.smoke.offline and not find_links:
        msg = "--offline needs --find-links DIR: a folder with pytest and the wheels' dependencies"
        raise ConfigError(msg)
    pattern = cfg.smoke.upstream_tests
    upstream_dir = None
    if pattern:
        upstream_dir = ctx.src_dir / "torch" / "test"
        if not upstream_dir.is_dir():
            msg = (
                f"--upstream-tests needs the torch checkout's tests in {upstream_dir}; "
                "run rocm-build checkout torch"
            )
            raise ConfigError(msg)
        if not any(upstream_dir.glob(pattern)):
            msg = (
                f"--upstream-tests '{pattern}' matches no file in {upstream_dir}; try 'test_nn.py'"
            )
            raise ConfigError(msg)
    return Plan(
        wheels=resolved,
        packages=tuple(packages),
        targets=ctx.targets.bases,
        python=cfg.smoke.python or sys.executable,
        run_dir=run_dir or ctx.work_dir / "smoke",
        settings=cfg.smoke,
        find_links=find_links,
        forbidden=tuple(dict.fromkeys(forbidden)),
        env=scrub_environment(cfg.env, forbidden),
        junit=junit,
        upstream_dir=upstream_dir,
        flash_attention=flash_expectation(ctx, packages),
    )
