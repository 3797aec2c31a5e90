"""Pure parts of wheelfile: version consistency between file name and METADATA."""

from __future__ import annotations

from rocm_build.wheel import wheelfile


def test_metadata_version_wins_over_file_name() -> None:
    meta = "Metadata-Version: 2.1\nName: torch\nVersion: 2.9.0+rocm5.2.3\n"
    assert wheelfile.consistent_version("2.9.0", meta) == "2.9.0+rocm5.2.3"
    assert wheelfile.consistent_version("2.9.0+rocm5.2.3", meta) == "2.9.0+rocm5.2.3"
    assert wheelfile.consistent_version("1.0", "Name: x\n") == "1.0"
