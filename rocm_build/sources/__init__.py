"""The checkout stage: fetch each project at its ref, apply its series, hipify, pin it in a
manifest (:mod:`.plan`, :mod:`.execute`, one project's checkout in :mod:`.project`, its steps in
:mod:`.steps`), resume a killed run (:mod:`.journal`, :mod:`.resume`), and save a developer's
commits back into the series (:mod:`.save`, :mod:`.patches`). Git's network side is
:mod:`.remote`; the manifest is ``repo.manifest``.

The face is the stage's ``plan``, ``execute``, ``Plan`` and ``Result``, and one extra pair:
``save-patches``' :func:`save_patches_plan` and :func:`save_patches` (:mod:`.save`)."""

from __future__ import annotations

from rocm_build.sources import save
from rocm_build.sources.execute import Result, execute
from rocm_build.sources.plan import Plan, plan

#: save-patches, a mode of the stage with its own plan and execute.
save_patches_plan = save.plan
save_patches = save.execute

__all__ = [
    "Plan",
    "Result",
    "execute",
    "plan",
    "save_patches",
    "save_patches_plan",
]
