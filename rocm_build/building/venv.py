"""The build venv: made so that a kill at any moment never leaves one that every later build
trusts and fails in ("No module named pip").

A venv's scripts and ``pyvenv.cfg`` name its own folder, so it cannot be made under another name
and renamed into place. Instead it is made in place with a state file written first
(``making``) and replaced last (``complete``, after pip is in): a venv whose state file says
``making`` is rocm-build's own half-made one and is made again. A folder with no state file is a
venv the user made (``build.venv``): used as it is when it has pip, never deleted; in the default
place (``<work-dir>/venv``, rocm-build's own) one without a working pip is made again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from rocm_build.building.plan import Plan
from rocm_build.common import faults, locks, proc, statefile
from rocm_build.common.errors import ConfigError, FileAccessError

__all__ = ["STATE_FILE", "ensure_venv", "held"]

log = logging.getLogger(__name__)

STATE_FILE = ".rocm-build-venv"
_WHAT = "build venv's state file"
_MAKING, _COMPLETE = "making", "complete"


def _state(venv: Path) -> str | None:
    """What the state file says (``making``/``complete``, anything else counts as ``making``),
    or None when there is none. A link, a FIFO, a folder or another user's file in its place is
    refused (``statefile``, exit 14): never followed, never waited on, never taken as a word
    that the venv is rocm-build's to remove."""
    try:
        text = statefile.read_bytes(venv / STATE_FILE, _WHAT, limit=64)
    except FileNotFoundError:
        return None
    except ValueError:
        return _MAKING
    state = text.decode("ascii", "replace").strip()
    return state if state in (_MAKING, _COMPLETE) else _MAKING


def _write_state(venv: Path, state: str) -> None:
    statefile.write_bytes(venv / STATE_FILE, (state + "\n").encode("ascii"), _WHAT)


def _has_pip(python: Path) -> bool:
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('pip') is None)"
    try:
        return proc.run([str(python), "-c", probe], capture=True, check=False).returncode == 0
    except OSError:
        return False


def _remove(venv: Path) -> None:
    """Remove a half-made venv of ours: a real folder this user owns, never a link's target."""
    st = venv.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        msg = (
            f"the build venv {venv} is a half-made one but is a link, not a folder, or belongs to "
            "another user; remove it yourself or set build.venv to another folder"
        )
        raise FileAccessError(msg)
    shutil.rmtree(venv)


@contextlib.contextmanager
def held(plan: Plan) -> Iterator[None]:
    """The locks a build holds while it runs: its work folder's build outputs (``dist/``,
    ``logs/``), then its venv (made, checked, installed into): a second build in the same work
    folder, or with the same ``build.venv``, waits, or with ``--no-wait`` stops (exit 13)
    before it looks at the venv. Always taken in this order, so two builds never deadlock."""
    with contextlib.ExitStack() as stack:
        outputs = plan.work_dir / "dist"
        stack.enter_context(
            locks.hold(outputs, f"the build folder {plan.work_dir}", no_wait=plan.no_wait)
        )
        if plan.venv is not None:
            what = f"the build venv {plan.venv}"
            stack.enter_context(locks.hold(plan.venv, what, no_wait=plan.no_wait))
        yield


def ensure_venv(plan: Plan) -> None:
    """Make the build venv if it is missing or half made; keep a whole one."""
    venv = plan.venv
    if venv is None:
        return
    own = venv == plan.work_dir / "venv"
    if os.path.lexists(venv):
        if not venv.is_dir() or (own and venv.is_symlink()):
            msg = f"the build venv {venv} is a link or a file, not a folder; remove it"
            raise FileAccessError(msg)
        state = _state(venv)
        if state == _COMPLETE and plan.python.exists():
            return
        if state is None and plan.python.exists() and _has_pip(plan.python):
            return  # a venv the user made: used as it is
        if state is None and not own:
            msg = (
                f"build.venv {venv} is not a working Python environment (no python or no pip in "
                "it) and rocm-build did not make it; remove it (rocm-build makes it again) or "
                "name another folder"
            )
            raise ConfigError(msg)
        log.warning("the build venv %s was left half made (a killed run?): making it again", venv)
        _remove(venv)
    _make(plan, venv)


def _make(plan: Plan, venv: Path) -> None:
    log.info("creating the build environment %s", venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    venv.mkdir(mode=0o700)
    _write_state(venv, _MAKING)
    cmd = [str(plan.base_python), "-m", "venv", "--without-pip", "--", str(venv)]
    proc.run(cmd, what="creating the build venv")
    faults.point("venv.without-pip")
    # What `python -m venv` itself runs to put pip in, as a step of its own so that a kill
    # between the two is a state the next run recognises.
    ensurepip = [str(plan.python), "-m", "ensurepip", "--upgrade", "--default-pip"]
    proc.run(ensurepip, capture=True, what="installing pip into the build venv")
    _write_state(venv, _COMPLETE)
    faults.point("venv.complete")
