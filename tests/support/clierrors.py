"""What a user's mistake must look like: one line ``rocm-build: error: ...``, no traceback."""

from __future__ import annotations


def one_line_error(stderr: str) -> str:
    """The error line; fails on a traceback or on an error spread over several lines."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("rocm-build: error:")]
    assert len(errors) == 1, stderr
    return errors[0]
