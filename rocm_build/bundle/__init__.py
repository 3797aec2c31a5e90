"""bundle: make a wheel self-contained for a ROCm tree and a set of gfx targets.

The stage: :func:`plan` (``plan(ctx, wheels, ...)``: the wheels in order and their settings) and
:func:`execute` (``execute(plan, progress)``: :class:`BundleResults`); :func:`plan_lines`,
:func:`system_lines` and :func:`warning_lines` put results into words. Each wheel is bundled by
its platform (:mod:`.platforms`, the registry; :mod:`.linux`, :mod:`.windows`) from one
:class:`.job.BundleJob`. On Linux one pass reads it (:mod:`rocm_build.wheel.analyze`, shared
with the build's wheel check and ``inspect``), :func:`make_plan` decides everything from ELF
facts, a library index and settings (:mod:`.plan`, with :mod:`.libraries`, :mod:`.data`,
:mod:`.policy`), and :mod:`.apply` writes the output in one streaming pass, with the record of
:mod:`.provenance`. Windows wheels go through delvewheel (:mod:`.windows`).

``bundle --split-arch`` and ``rocm wheels`` have a pair of their own: :func:`split_arch_plan` and
:func:`split_arch` (:mod:`.split`), :func:`rocm_wheels_plan` and :func:`rocm_wheels`
(:mod:`.rocmwheels`). This module exports the stage, those pairs and the pure planner (what
tests and benchmarks call); the rest is imported from its module.

Rules (see docs/bundle.md):

* the NEEDED closure of every host ELF in the wheel is resolved in the ROCm tree first, then in
  the build machine's library folders; what the manylinux policy allows from the system stays
  out; anything else that cannot be found stops the bundle, naming what is missing and who
  needs it;
* libraries ROCm loads with ``dlopen`` are added by file-name pattern (``bundle.dlopen_libs``);
* a library opened by another name than its soname (a symlink name some ELF file in the wheel
  holds as a string) gets a stub library of that name that NEEDs it;
* data trees (``bundle.data_trees``) keep their relative layout beside the libraries, filtered
  to the requested gfx targets;
* libraries keep their names and sonames (no hashing) and go to the project's ``lib_dir``; every
  host ELF gets an ``$ORIGIN``-relative DT_RPATH (thin wheels: DT_RUNPATH into ROCm's package
  folders); nothing points outside the wheel;
* a wheel that depends on a torch fat wheel (torchvision, torchaudio) takes what torch carries
  from ``torch/lib`` and requires that exact torch.
"""

from __future__ import annotations

from rocm_build.bundle.data import (
    data_destination,
    data_target_gaps,
    gfx_tokens,
    looked_up_at,
    select_data,
)
from rocm_build.bundle.libraries import (
    Candidate,
    LibraryIndex,
    Resolver,
    system_lib_dirs,
    tree_lib_dirs,
)
from rocm_build.bundle.lines import system_lines, warning_lines
from rocm_build.bundle.model import (
    BundlePlan,
    BundleResult,
    DataFile,
    Library,
    RpathChange,
    ThinSource,
    TorchWheel,
)
from rocm_build.bundle.plan import PlanInput, PlanRules, inside, make_plan
from rocm_build.bundle.platforms import plan_lines
from rocm_build.bundle.policy import platform_tag, policy_whitelist
from rocm_build.bundle.rocmwheels import WheelsPlan, rocm_wheels, rocm_wheels_plan
from rocm_build.bundle.split import SplitPlan, split_arch, split_arch_plan
from rocm_build.bundle.stage import BundlePlans, BundleResults, bundle_many, execute, plan

__all__ = [
    "BundlePlan",
    "BundlePlans",
    "BundleResult",
    "BundleResults",
    "Candidate",
    "DataFile",
    "Library",
    "LibraryIndex",
    "PlanInput",
    "PlanRules",
    "Resolver",
    "RpathChange",
    "SplitPlan",
    "ThinSource",
    "TorchWheel",
    "WheelsPlan",
    "bundle_many",
    "data_destination",
    "data_target_gaps",
    "execute",
    "gfx_tokens",
    "inside",
    "looked_up_at",
    "make_plan",
    "plan",
    "plan_lines",
    "platform_tag",
    "policy_whitelist",
    "rocm_wheels",
    "rocm_wheels_plan",
    "select_data",
    "split_arch",
    "split_arch_plan",
    "system_lib_dirs",
    "system_lines",
    "tree_lib_dirs",
    "warning_lines",
]
