"""A modern ROCm (6.4 from Debian sid) tree and a sid root to run its programs in.

The tree lands in the tests' cache (RB_TEST_CACHE, else ~/.cache/rocm-build-tests); the .debs it
is made from in the user's rocm-build cache, so a machine that keeps its caches downloads nothing
again.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import _test_cache


@pytest.fixture(scope="session")
def sid_tree() -> Path:
    from rocm_build.rocm import debtree

    return debtree.assemble(_test_cache() / "rocm-sid", release="sid")


@pytest.fixture(scope="session")
def sid_root() -> Path:
    """A Debian sid root (mmdebstrap, as root), cached between runs."""
    import os

    from rocm_build.rocm import sysroot

    if os.geteuid() != 0:
        pytest.skip("making and entering a root needs root (mmdebstrap, mount, chroot)")
    root, _ = sysroot.make_root(_test_cache() / "sid-root", release="sid")
    return root
