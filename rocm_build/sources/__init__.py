"""The checkout stage: fetch each project at its ref, apply its series, hipify, pin it in a
manifest (:mod:`.stage`, :mod:`.sourceplan`, :mod:`.checkoutsteps`), resume a killed run
(:mod:`.journal`, :mod:`.resumecheck`), and save a developer's commits back into the series
(:mod:`.savepatches`, :mod:`.patches`). Git itself is :mod:`.git` and :mod:`.gitremote`."""

from __future__ import annotations

from rocm_build.sources import savepatches
from rocm_build.sources.savepatches import SavedProject, SavePlan
from rocm_build.sources.sourceplan import plan
from rocm_build.sources.stage import (
    MANIFEST_NAME,
    CheckoutResult,
    ProjectPlan,
    execute,
    parse_related_commits,
    read_manifest,
    stamp,
    write_manifest,
)

#: save-patches, a mode of the stage with its own plan and execute.
save_patches_plan = savepatches.plan
save_patches = savepatches.execute

__all__ = [
    "MANIFEST_NAME",
    "CheckoutResult",
    "ProjectPlan",
    "SavePlan",
    "SavedProject",
    "execute",
    "parse_related_commits",
    "plan",
    "read_manifest",
    "save_patches",
    "save_patches_plan",
    "stamp",
    "write_manifest",
]
