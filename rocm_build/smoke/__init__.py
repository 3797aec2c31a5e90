"""The smoke stage: install the wheels into a fresh venv with no ROCm in reach and run the
suite in ``suite/`` (package data).

:mod:`.plan` decides (``plan`` -> ``Plan``: which wheels, import names, targets, the scrubbed
environment), :mod:`.execute` runs (``execute`` -> ``Result``). Documented extras: ``check``
(raise ``SmokeFailed`` for a failed run, beside ``execute``) and ``suite_dir`` (where the suite
is, for the run report's key). The subjects have their own modules: :mod:`.environment` (the
scrubbed variables), :mod:`.wheels` (import names), :mod:`.junit` (per-test outcomes),
:mod:`.suitefiles` (the suite's files), :mod:`.upstream` (the summary of PyTorch's own tests).
"""

from __future__ import annotations

from rocm_build.smoke.execute import Result, check, execute
from rocm_build.smoke.plan import Plan, plan
from rocm_build.smoke.suitefiles import suite_dir

__all__ = ["Plan", "Result", "check", "execute", "plan", "suite_dir"]
