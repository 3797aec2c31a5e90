"""The build stage: :mod:`.plan` (``survey`` asks git and the compiler cache, ``plan`` decides
the projects in order, versions, switches, features, floors: the ``Plan``) and :mod:`.execute`
(the run with its wheel check: the ``Result``). The modules beside them are named for their
subject: the build venv (:mod:`.venv`), the commands it runs (:mod:`.commands`), the compiler
cache (:mod:`.compilercache`), Triton (:mod:`.tritonbuild`), the wheel check
(:mod:`.wheelcheck`) and the others; tests import them directly.

The face is the stage's ``plan``, ``execute``, ``Plan`` and ``Result``, and one extra pair:
``survey`` and its ``Survey`` (what only a program can tell, asked just before ``plan``)."""

from __future__ import annotations

from rocm_build.building.execute import Result, execute
from rocm_build.building.plan import Plan, Survey, plan, survey

__all__ = ["Plan", "Result", "Survey", "execute", "plan", "survey"]
