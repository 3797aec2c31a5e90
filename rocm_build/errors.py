"""Errors a user can cause, each with a documented exit code and a next step.

Anything that is not a ``RocmBuildError`` is a bug in rocm-build and keeps its traceback.
The exit codes are part of the interface: scripts and CI branch on them, so never renumber.
"""

from __future__ import annotations

__all__ = [
    "EXIT_CODES",
    "BuildFailed",
    "BundleError",
    "CommandFailed",
    "ConfigError",
    "DirtyCheckout",
    "FetchError",
    "PatchConflict",
    "RequirementNotMet",
    "RocmBuildError",
    "RocmTreeError",
    "SmokeFailed",
    "ToolMissing",
]


class RocmBuildError(Exception):
    """A failure the user can fix; ``str(err)`` is one line that says how."""

    exit_code = 1


class ConfigError(RocmBuildError):
    """Bad flag, environment variable, config key, project or target name."""

    exit_code = 2


class ToolMissing(RocmBuildError):
    """A program the step needs (git, cmake, patchelf, ccache, ...) is not installed."""

    exit_code = 3


class CommandFailed(RocmBuildError):
    """An external command exited non-zero; the message names its log."""

    exit_code = 4

    def __init__(
        self, message: str, *, returncode: int | None = None, tail: tuple[str, ...] = ()
    ) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.tail = tail


class FetchError(RocmBuildError):
    """A git fetch or a download failed after its retries."""

    exit_code = 5


class DirtyCheckout(RocmBuildError):
    """A checkout holds work that a step would overwrite."""

    exit_code = 6


class PatchConflict(RocmBuildError):
    """A saved patch does not apply; the repository was restored."""

    exit_code = 7


class RocmTreeError(RocmBuildError):
    """The ROCm tree is missing, incomplete, or cannot target the requested GPUs."""

    exit_code = 8


class BuildFailed(RocmBuildError):
    """A project's build failed, or produced a wheel that would not run on the targets."""

    exit_code = 9


class BundleError(RocmBuildError):
    """A wheel cannot be made self-contained (unresolvable library, bad wheel)."""

    exit_code = 10


class RequirementNotMet(RocmBuildError):
    """``inspect --require-arch`` (or a similar check) found something missing."""

    exit_code = 11


class SmokeFailed(RocmBuildError):
    """The smoke tests ran and failed."""

    exit_code = 12


#: Exit code -> meaning, for ``--help`` and the README.
EXIT_CODES: dict[int, str] = {
    0: "success (including 'nothing to do')",
    1: "other error a user can fix",
    **{
        cls.exit_code: (cls.__doc__ or "").strip().splitlines()[0]
        for cls in (
            ConfigError,
            ToolMissing,
            CommandFailed,
            FetchError,
            DirtyCheckout,
            PatchConflict,
            RocmTreeError,
            BuildFailed,
            BundleError,
            RequirementNotMet,
            SmokeFailed,
        )
    },
    70: "internal error (a bug in rocm-build: please report it with the traceback)",
}
