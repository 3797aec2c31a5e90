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
    from rocm_build import debtree

    return debtree.assemble(_test_cache() / "rocm-sid", release="sid")
