"""What a project's wheel is made from (``inputs``): the fingerprint the build keeps beside
the wheel, and a digest of each part, so that a change can be named (``rebuild.forecast``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rocm_build.common import proc, statefile
from rocm_build.common.errors import ToolMissing
from rocm_build.config.schema import output_settings

if TYPE_CHECKING:
    from rocm_build.building.plan import Plan, ProjectStep

__all__ = ["PART_WORDS", "git_out", "inputs"]

# Settings that change how fast a wheel is built, not what is in it.
_VOLATILE = re.compile(
    r"^(MAX_JOBS|CMAKE_BUILD_PARALLEL_LEVEL|CCACHE_\w+|SCCACHE_\w+|CMAKE_\w+_COMPILER_LAUNCHER)$"
)

#: Each part of the fingerprint, in the words a person reads.
PART_WORDS = {
    "checkout": "the checkout (its commits or uncommitted changes)",
    "env": "the build environment",
    "removed": "the variables removed from the environment",
    "command": "the build command",
    "targets": "the gfx targets",
    "rocm": "the ROCm tree",
    "depends": "a dependency's wheel",
    "settings": "the [build] settings that change the wheel",
}


def git_out(source: Path, env: Mapping[str, str], *args: str) -> str | None:
    """git's output in ``source``; None when git fails or is not installed."""
    try:
        result = proc.run(["git", *args], cwd=source, env=env, capture=True, check=False)
    except ToolMissing:
        return None
    return result.stdout if result.returncode == 0 else None


def inputs(plan: Plan, step: ProjectStep, deps: Mapping[str, str]) -> tuple[str, dict[str, str]]:
    """What the wheel is made from: the checkout (HEADs and the fingerprint of its uncommitted
    changes, as the survey read them), the build environment rocm-build sets, the
    command, the targets, the tree and the ``[build]`` settings the schema marks ``output``
    (:func:`.schema.output_settings`: a setting marked so is taken in with no other edit), as
    one digest and one per part. ("", {}) when that cannot be told (not a git checkout)."""
    if not step.worktree.head:
        return "", {}
    env = {k: step.env.get(k, "") for k in step.changed if not _VOLATILE.match(k)}
    data: dict[str, Any] = {
        "checkout": step.worktree.as_key(),  # its HEADs and uncommitted changes
        "env": env,
        "removed": list(step.removed),
        "command": list(step.command),
        "targets": list(plan.targets),
        "rocm": [str(plan.tree.root), plan.tree.version],
        "depends": dict(deps),  # a rebuilt torch means its dependents are rebuilt too
        "settings": output_settings(plan.settings),
    }
    parts = {k: statefile.settings_digest({k: v}) for k, v in data.items()}
    return statefile.settings_digest(data), parts
