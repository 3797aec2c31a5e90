"""Downloading a ROCm tree from a real HTTP server on loopback: resume, sha256, safe unpacking,
and ``--rocm URL`` / ``rocm-build rocm fetch``."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from rocm_build.common.errors import FetchError, UnsafeInput
from rocm_build.rocm import dist
from tests.conftest import CliRunner
from tests.support.httpserver import PADDING, Server, server, small_tree_tarball

__all__ = ["server"]  # the fixture


def test_fetch_unpacks_the_tree_and_reuses_it(server: Server, tmp_path: Path) -> None:
    data = small_tree_tarball()
    server.files["/rocm.tar.gz"] = data
    seen: list[tuple[int, int | None]] = []
    sha = hashlib.sha256(data).hexdigest()
    tree = dist.fetch(
        server.url("/rocm.tar.gz"),
        cache_dir=tmp_path / "cache",
        sha256=sha,
        progress=lambda d, t: seen.append((d, t)),
    )
    assert (tree / ".info" / "version").read_text() == "6.4.1\n"
    assert dist.open_tree(tree).version == "6.4.1"
    assert seen[-1] == (len(data), len(data))
    again = dist.fetch(server.url("/rocm.tar.gz"), cache_dir=tmp_path / "cache", sha256=sha)
    assert again == tree
    assert len(server.requests) == 1  # not downloaded again
    assert not list((tmp_path / "cache").rglob("*.part"))


def test_interrupted_download_resumes_with_range(server: Server, tmp_path: Path) -> None:
    data = small_tree_tarball()
    server.files["/rocm.tar.gz"] = data
    server.cut_after = len(data) // 3
    with pytest.raises(FetchError, match="run again to resume"):
        dist.fetch(server.url("/rocm.tar.gz"), cache_dir=tmp_path / "cache")
    (part,) = (tmp_path / "cache").rglob("*.part")
    kept = part.stat().st_size
    assert 0 < kept <= len(data) // 3
    server.cut_after = None
    tree = dist.fetch(
        server.url("/rocm.tar.gz"),
        cache_dir=tmp_path / "cache",
        sha256=hashlib.sha256(data).hexdigest(),
    )
    assert server.requests[-1] == ("/rocm.tar.gz", f"bytes={kept}-")
    assert (tree / "share" / "padding.bin").read_bytes() == PADDING


def test_sha256_mismatch_is_refused_and_the_download_dropped(
    server: Server, tmp_path: Path
) -> None:
    server.files["/rocm.tar.gz"] = small_tree_tarball()
    with pytest.raises(FetchError, match="expected " + "0" * 64):
        dist.fetch(server.url("/rocm.tar.gz"), cache_dir=tmp_path / "cache", sha256="0" * 64)
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_member_escaping_the_target_is_refused(server: Server, tmp_path: Path) -> None:
    server.files["/evil.tar.gz"] = small_tree_tarball(extra={"../../escaped.txt": b"gotcha"})
    cache = tmp_path / "a" / "b" / "cache"
    with pytest.raises(UnsafeInput, match="unsafe"):
        dist.fetch(server.url("/evil.tar.gz"), cache_dir=cache)
    assert not list(tmp_path.rglob("escaped.txt"))
    assert not list(cache.rglob("tree"))


def test_a_busy_server_is_asked_again_with_back_off(server: Server, tmp_path: Path) -> None:
    data = small_tree_tarball()
    server.files["/rocm.tar.gz"] = data
    server.fail_next = 2
    tree = dist.fetch(
        server.url("/rocm.tar.gz"),
        cache_dir=tmp_path / "cache",
        sha256=hashlib.sha256(data).hexdigest(),
    )
    assert (tree / ".info" / "version").read_text() == "6.4.1\n"
    assert [path for path, _ in server.requests] == ["/rocm.tar.gz"] * 3


def test_a_server_that_stays_busy_fails_after_the_retries(server: Server, tmp_path: Path) -> None:
    server.files["/rocm.tar.gz"] = small_tree_tarball()
    server.fail_next = 100
    with pytest.raises(FetchError, match=r"HTTP 503 after 5 attempts.*run again later"):
        dist.fetch(server.url("/rocm.tar.gz"), cache_dir=tmp_path / "cache")
    assert len(server.requests) == dist.DOWNLOAD_RETRIES + 1


def test_missing_url_is_a_fetch_error(server: Server, tmp_path: Path) -> None:
    with pytest.raises(FetchError, match="HTTP 404"):
        dist.fetch(server.url("/nothing.tar.gz"), cache_dir=tmp_path / "cache")


def test_cli_fetch_and_build_from_url(server: Server, tmp_path: Path, run_cli: CliRunner) -> None:
    data = small_tree_tarball()
    server.files["/rocm.tar.gz"] = data
    sha = hashlib.sha256(data).hexdigest()
    env = {"ROCM_BUILD_BUILD_ROCM_CACHE": str(tmp_path / "cache"), "COLUMNS": "300"}
    (tmp_path / "src" / "torchvision").mkdir(parents=True)
    (tmp_path / "src" / "torchvision" / "version.txt").write_text("0.24.0\n")
    (tmp_path / "src" / "torchvision" / "setup.py").write_text("")  # a setup.py project
    url = server.url("/rocm.tar.gz")
    (tmp_path / "some-1.0-py3-none-any.whl").write_bytes(b"")  # the tree is decided first
    # A dry run downloads nothing: not fetched yet, build, bundle and all say how to get it.
    for args in (
        ["build", "torchvision", "--arch", "gfx90a"],
        ["bundle", str(tmp_path / "some-1.0-py3-none-any.whl")],
        ["all", "torchvision", "--arch", "gfx90a"],
    ):
        dry = run_cli([*args, "--dry-run", "--rocm", url], cwd=tmp_path, env=env)
        assert dry.returncode == 8, (args, dry.stderr)
        assert f"run `rocm-build rocm fetch {url}` first, or drop --dry-run" in dry.stderr
        assert server.requests == [], args
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("tree"))
    fetched = run_cli(
        ["rocm", "fetch", server.url("/rocm.tar.gz"), "--sha256", sha], cwd=tmp_path, env=env
    )
    assert fetched.returncode == 0, fetched.stderr
    tree = Path(fetched.stdout.strip())
    assert (tree / "lib" / "libamdhip64.so.6").is_file()

    bad = run_cli(
        ["rocm", "fetch", server.url("/rocm.tar.gz"), "--sha256", "1" * 64], cwd=tmp_path, env=env
    )
    assert bad.returncode == 5
    assert "expected " + "1" * 64 in bad.stderr

    planned = run_cli(
        [
            "build",
            "torchvision",
            "--dry-run",
            "--arch",
            "gfx90a",
            "--rocm",
            server.url("/rocm.tar.gz") + f"#sha256={sha}",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert planned.returncode == 0, planned.stderr
    assert f"ROCM_PATH={tree}" in planned.stdout
    assert "BUILD_VERSION=0.24.0+rocm6.4" in planned.stdout
