"""Named fault points, so tests can kill a run at an exact step and check that it resumes.

A step calls ``faults.point("checkout.after-fetch")`` just before or after something that a kill
there could leave half done. In a normal run this is one dictionary look-up. The fault suite sets:

- ``RB_FAULT_POINT=NAME`` (or ``NAME@N``, the N-th time NAME is reached): the process sends
  itself SIGKILL there, as an OOM kill or a power cut would (no clean-up, no ``finally``);
- ``RB_FAULT_LOG=FILE``: each point's name is appended to FILE as it is reached, so a test can
  list the points an uninterrupted run passes and then kill the run at each of them.

The variables are not ``ROCM_BUILD_*`` settings on purpose: they are for tests, not users.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

__all__ = ["point"]

_hits: dict[str, int] = {}


def point(name: str) -> None:
    """Mark a fault point; kill the process here if the fault suite asks for it."""
    target = os.environ.get("RB_FAULT_POINT")
    log = os.environ.get("RB_FAULT_LOG")
    if not target and not log:
        return
    _hits[name] = count = _hits.get(name, 0) + 1
    if log:
        with Path(log).open("a", encoding="utf-8") as f:
            f.write(name + "\n")
    if target:
        want, _, nth = target.partition("@")
        if want == name and count == (int(nth) if nth else 1):
            os.kill(os.getpid(), signal.SIGKILL)
