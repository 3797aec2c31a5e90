"""The build stage: the plan (:mod:`.buildplan`: ``survey`` asks git and the compiler cache,
``plan`` decides the projects in order, versions, switches, features, floors), the build venv
and environment (:mod:`.buildvenv`, :mod:`.buildenv`), the compiler cache (:mod:`.cache`),
Triton (:mod:`.tritonbuild`), and the run with its wheel check (:mod:`.stage`)."""

from __future__ import annotations

from rocm_build.building.buildplan import BuildPlan, Survey, plan, survey
from rocm_build.building.stage import (
    GIB,
    check_wheel,
    default_jobs,
    execute,
    memory_available,
    pin_requirement,
    read_build_requirements,
    wheel_metadata,
)

__all__ = [
    "GIB",
    "BuildPlan",
    "Survey",
    "check_wheel",
    "default_jobs",
    "execute",
    "memory_available",
    "pin_requirement",
    "plan",
    "read_build_requirements",
    "survey",
    "wheel_metadata",
]
