"""The smoke stage: install the wheels into a fresh venv with no ROCm in reach and run the
suite in ``suite/`` (package data, :mod:`.stage`); :mod:`.upstream` summarises PyTorch's own
tests."""

from __future__ import annotations

from rocm_build.smoke.stage import (
    check,
    execute,
    flash_expectation,
    import_names,
    parse_junit,
    plan,
    scrub_environment,
    suite_dir,
)

__all__ = [
    "check",
    "execute",
    "flash_expectation",
    "import_names",
    "parse_junit",
    "plan",
    "scrub_environment",
    "suite_dir",
]
