"""bundle: make a wheel self-contained for a ROCm tree and a set of gfx targets.

The stage: :mod:`.plan` (``plan(ctx, wheels, ...)`` -> ``Plan``: the wheels in order, their
settings and each wheel's :class:`.job.WheelTask`) and :mod:`.execute` (``execute(plan,
progress)`` -> ``Result``). Each wheel is bundled by its platform (:mod:`.platforms`, the
registry; :mod:`.linux`, :mod:`.windows`) from one :class:`.job.BundleJob`. On Linux one pass
reads it (:mod:`rocm_build.wheel.analyze`, shared with the build's wheel check and ``inspect``),
:func:`.closure.resolve_closure` decides everything from ELF facts, a library index and settings
(the :class:`.model.Closure`, with :mod:`.libraries`, :mod:`.data`, :mod:`.policy`), and
:mod:`.apply` writes the output in one streaming pass, with the record of :mod:`.provenance`.
Windows wheels go through delvewheel (:mod:`.windows`). :mod:`.lines` and
:func:`.platforms.plan_lines` put results into words.

The face is the stage's ``plan``, ``execute``, ``Plan`` and ``Result``, and two documented extra
pairs: ``bundle --split-arch``'s :func:`split_arch_plan` and :func:`split_arch` (:mod:`.split`),
``rocm wheels``' :func:`rocm_wheels_plan` and :func:`rocm_wheels` (:mod:`.rocmwheels`). The rest
is imported from its module (tests and benchmarks too).

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

from rocm_build.bundle.execute import Result, execute
from rocm_build.bundle.plan import Plan, plan
from rocm_build.bundle.rocmwheels import rocm_wheels, rocm_wheels_plan
from rocm_build.bundle.split import split_arch, split_arch_plan

__all__ = [
    "Plan",
    "Result",
    "execute",
    "plan",
    "rocm_wheels",
    "rocm_wheels_plan",
    "split_arch",
    "split_arch_plan",
]
