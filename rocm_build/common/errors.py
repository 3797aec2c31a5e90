"""Errors a user can cause, each with a documented exit code and a next step.

Anything that is not a ``RocmBuildError`` is a bug in rocm-build and keeps its traceback.
The exit codes are part of the interface: scripts and CI branch on them, so never renumber.
"""

from __future__ import annotations

from rocm_build.common.masking import mask_url

__all__ = [
    "EXIT_CODES",
    "BuildFailed",
    "BundleError",
    "CommandFailed",
    "ConfigError",
    "DirtyCheckout",
    "FetchError",
    "FileAccessError",
    "Interrupted",
    "Locked",
    "PatchConflict",
    "RequirementNotMet",
    "RocmBuildError",
    "RocmTreeError",
    "SmokeFailed",
    "ToolMissing",
    "UnsafeInput",
]


class RocmBuildError(Exception):
    """A failure the user can fix; ``str(err)`` is one line that says how. Credentials in
    URLs it quotes are masked, wherever the message ends up (terminal, reports, JSON)."""

    exit_code = 1

    def __str__(self) -> str:
        return mask_url(super().__str__())


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
    """A checkout holds work that a step would overwrite, or uncommitted changes a build would
    build (``build``/``all`` without ``--allow-dirty``)."""

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
    """``inspect --require-arch`` (or a similar check: ``bundle --arch``'s coverage check)
    found something missing."""

    exit_code = 11


class SmokeFailed(RocmBuildError):
    """The smoke tests ran and failed."""

    exit_code = 12


class Locked(RocmBuildError):
    """Another run holds the lock on a checkout, patch folder or wheel (``--no-wait``)."""

    exit_code = 13


class FileAccessError(RocmBuildError):
    """A file or folder cannot be read or written: permission, not a folder, or a full disk."""

    exit_code = 14


class UnsafeInput(RocmBuildError):
    """A wheel, archive or package is unsafe or malformed: member names, symlinks, RECORD."""

    exit_code = 15


class Interrupted(RocmBuildError):
    """Ctrl-C (SIGINT) or SIGTERM: the run stopped; running the same command again resumes it."""

    exit_code = 130


#: Exit code -> meaning, for ``--help``; the tables of the README and docs/exit-codes.md say the
#: same (a test checks).
EXIT_CODES: dict[int, str] = {
    0: 'success, including "nothing to do"',
    1: "other error a user can fix",
    ConfigError.exit_code: "bad flag, environment variable, config key, project or target name",
    ToolMissing.exit_code: "a program the step needs is not installed, or too old",
    CommandFailed.exit_code: "an external command failed (its log is named)",
    FetchError.exit_code: "a git fetch or download failed after its retries",
    DirtyCheckout.exit_code: (
        "a checkout holds work a step would overwrite (`save-patches` it, or `--force`), or "
        "uncommitted changes `build` would build (commit or stash them, or `--allow-dirty`)"
    ),
    PatchConflict.exit_code: "a saved patch does not apply (the repository was restored)",
    RocmTreeError.exit_code: (
        "the ROCm tree is missing, incomplete, or cannot target the requested GPUs"
    ),
    BuildFailed.exit_code: "a build failed, or made a wheel that would not run on the targets",
    BundleError.exit_code: "a wheel cannot be made self-contained",
    RequirementNotMet.exit_code: (
        "a requested target is missing: `inspect --require-arch`, or a library `bundle --arch` "
        "would write has no code for it"
    ),
    SmokeFailed.exit_code: (
        "smoke tests failed, or the wheels do not install into a fresh environment"
    ),
    Locked.exit_code: "another rocm-build run holds the lock it needs (`--no-wait`)",
    FileAccessError.exit_code: (
        "a file or folder cannot be read or written (permission, not a folder, disk full)"
    ),
    UnsafeInput.exit_code: (
        "an input wheel, archive or package is unsafe or malformed (member names, symlinks, RECORD)"
    ),
    70: "internal error: a bug in rocm-build, please report it with the traceback",
    Interrupted.exit_code: "interrupted (Ctrl-C or SIGTERM); run the same command again to resume",
}
