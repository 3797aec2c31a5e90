"""``rocm debian`` killed while it unpacks (a staging folder of hundreds of MB) is cleaned up by
the next run, which then makes the tree: real Debian packages from the test cache, a real
SIGKILL at the fault point."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from tests.conftest import CliRunner


def _cache() -> Path:
    return Path(os.environ.get("RB_TEST_CACHE") or Path.home() / ".cache" / "rocm-build-tests")


@pytest.mark.slow
def test_a_kill_while_debian_unpacks_is_cleaned_by_the_next_run(
    rocm_tree: Path, tmp_path: Path, run_cli: CliRunner
) -> None:
    del rocm_tree  # only so that the cached packages are there (downloaded once per cache)
    dest = tmp_path / "rocm"
    argv = ["rocm", "debian", str(dest), "--cache", str(_cache())]
    killed = run_cli(argv, cwd=tmp_path, env={"RB_FAULT_POINT": "debtree.unpacked"})
    assert killed.returncode == -9, killed.stderr
    (staging,) = tmp_path.glob(".rocm.rocm-build-*.tmp")
    assert any(staging.iterdir())
    other = tmp_path / ".rocm.rocm-build-1-foreign.tmp"  # another run's, still being written
    other.mkdir()
    (other / "keep").write_text("x")
    held = os.open(other, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # its writer holds its lock, as every writer does
        again = run_cli(argv, cwd=tmp_path)
    finally:
        os.close(held)
    assert again.returncode == 0, again.stderr
    assert not staging.exists()
    assert (other / "keep").exists()  # its lock is held: provably not a killed run's
    assert (dest / "lib/libamdhip64.so.5").exists()
