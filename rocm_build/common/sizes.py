"""The one way a byte count is shown to a user: decimal units (1 MB = 1,000,000 bytes), as pip
and PyPI's per-file limit count them. Memory (RAM, GPU memory) stays in GiB, as it is sold."""

from __future__ import annotations

from rich import filesize

__all__ = ["human_size"]


def human_size(n: int) -> str:
    """``n`` bytes as "999 bytes", "12.3 kB", "86.1 MB" or "4.7 GB"."""
    return filesize.decimal(n)
