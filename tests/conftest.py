"""Shared test fixtures: a git identity for every test, and the rocm-build CLI as a process."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# fixtures for tests that run rocm-build as another user (nobody_python)
pytest_plugins = ["tests.support.otheruser"]

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "rocm-build tests",
    "GIT_AUTHOR_EMAIL": "tests@rocm-build.invalid",
    "GIT_COMMITTER_NAME": "rocm-build tests",
    "GIT_COMMITTER_EMAIL": "tests@rocm-build.invalid",
}


@pytest.fixture(autouse=True)
def _clean_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Tests see none of the user's rocm-build or ROCm settings; bundles keep their deflate
    cache in the test session's temporary folder, not the user's."""
    for name in list(os.environ):
        if name.startswith("ROCM_BUILD_") or name in (
            "PYTORCH_ROCM_ARCH",
            "ROCM_PATH",
            "ROCM_HOME",
        ):
            monkeypatch.delenv(name)
    monkeypatch.setenv(DEFLATE_CACHE_ENV, str(_deflate_cache(tmp_path_factory)))


DEFLATE_CACHE_ENV = "ROCM_BUILD_BUNDLE_DEFLATE_CACHE"


def _deflate_cache(factory: pytest.TempPathFactory) -> Path:
    return factory.getbasetemp() / "deflate-cache"


CliRunner = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def run_cli() -> CliRunner:
    """Run ``rocm-build ARGS`` as a real process (``python -m rocm_build``) in ``cwd``."""

    def run(
        args: Sequence[str],
        *,
        cwd: Path,
        env: dict[str, str] | None = None,
        check: bool = False,
        timeout: float = 600,
    ) -> subprocess.CompletedProcess[str]:
        full_env = {
            k: v
            for k, v in os.environ.items()
            if not (
                k.startswith("ROCM_BUILD_") or k in ("PYTORCH_ROCM_ARCH", "ROCM_PATH", "ROCM_HOME")
            )
        }
        full_env.update(GIT_IDENTITY)
        full_env[DEFLATE_CACHE_ENV] = os.environ.get(DEFLATE_CACHE_ENV, "none")
        full_env["PYTHONPATH"] = str(REPO)
        full_env.update(env or {})
        result = subprocess.run(
            [sys.executable, "-m", "rocm_build", *args],
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"rocm-build {' '.join(args)} exited {result.returncode}\n"
                f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
            )
        return result

    return run


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the rocm-build processes the tests start, as it does from a terminal. A
    suite started in the background of a non-interactive shell (``cmd &``) inherits SIGINT
    ignored, and every process it starts would too: rocm-build rightly keeps an inherited
    ignore (``nohup rocm-build all &``), so the Ctrl-C tests would wait on it. A handler here is
    not inherited across exec: the processes start with SIGINT at its default."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Say how much disk is free where the suite writes (also with -q, unlike a header): a run
    that fills it fails in many places at once."""
    cache = _test_cache()
    where = next(p for p in (cache, *cache.parents) if p.exists())
    free = {w: shutil.disk_usage(w).free / 1e9 for w in (Path(tempfile.gettempdir()), where)}
    shown = ", ".join(f"{gb:.1f} GB free in {w}" for w, gb in free.items())
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"disk: {shown} (the whole suite needs about {SUITE_DISK_GB} GB)")


#: About the most disk the whole suite uses at once from a fresh clone (ROCm trees and root
#: included), measured with ``df`` during ``.ci/run``; see docs/development.md.
SUITE_DISK_GB = 30


def _test_cache() -> Path:
    return Path(os.environ.get("RB_TEST_CACHE") or Path.home() / ".cache" / "rocm-build-tests")


@pytest.fixture(scope="session")
def rocm_tree() -> Path:
    """A real ROCm 5.2.3 tree (TheRock layout) from Debian's packages, cached between runs."""
    from rocm_build.rocm import debtree

    cache = _test_cache()
    return debtree.assemble(cache / "rocm-debian", cache=cache)


@pytest.fixture(scope="session")
def kpack_tree(rocm_tree: Path) -> Path:
    """``rocm_tree`` kpack-split as TheRock's trees are since 2026
    (``tests/support/kpackwriter.py``: host libraries with a ``.rocm_kpack_ref`` marker, device code
    in ``.kpack/<group>_<target>`` archives, groups as TheRock's artifacts: ``rand_lib`` for
    rocRAND), cached beside it. The cache key digests the writer's source
    (``rocm_build.binary.kpacksplit`` and ``kpackwrite`` too) and the tree's stamp, so a changed
    writer or tree makes a new one; it is made under a temporary name and renamed into place."""
    from rocm_build.binary import kpacksplit, kpackwrite
    from rocm_build.rocm import debtree
    from tests.support import kpackwriter

    digest = hashlib.sha256()
    for module in (kpackwriter, kpacksplit, kpackwrite):
        digest.update(Path(module.__file__ or "").read_bytes())
    stamp = rocm_tree / debtree._STAMP
    digest.update(stamp.read_bytes() if stamp.is_file() else b"")
    dest = _test_cache() / f"rocm-debian-kpack-{digest.hexdigest()[:16]}"
    if dest.is_dir():
        return dest
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        kpackwriter.split_tree(rocm_tree, work / "tree", kpackwriter.THEROCK_GROUPS)
        try:
            (work / "tree").rename(dest)
        except OSError:
            if not dest.is_dir():  # another session renamed its copy into place first
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


@pytest.fixture(scope="session")
def clang19_bin() -> Path:
    """Debian's clang 19 ``bin`` folder: gfx942/gfx1100 targets and compressed offload bundles."""
    from rocm_build.rocm import debtree

    return debtree.assemble_clang19(cache=_test_cache())


def shared_dir() -> Path:
    """The project's shared folder: ``RB_SHARED_DIR`` (``.ci/run`` sets it: its clone is not
    beside it), else ``../shared`` beside the checkout."""
    return Path(os.environ.get("RB_SHARED_DIR") or Path(__file__).resolve().parents[2] / "shared")


#: ``shared/kpack-reference`` (see :func:`kpack_reference`)
KPACK_REFERENCE = shared_dir() / "kpack-reference"
#: tests that read it are skipped without it, except in CI, where it must be there
NO_KPACK_REFERENCE = not (KPACK_REFERENCE / "lib").is_dir() and not os.environ.get("CI")


@pytest.fixture(scope="session")
def kpack_reference() -> Path:
    """``shared/kpack-reference``: one ROCm library split by ROCm's own kpack tool (its README
    says how). Missing outside the project's machines: skipped there, an error in CI."""
    ref = shared_dir() / "kpack-reference"
    if not (ref / "lib").is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{ref} is missing: CI lays shared/ beside the checkout")
        pytest.skip("needs the project's shared/kpack-reference beside the checkout")
    return ref
