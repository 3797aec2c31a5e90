"""Trees rocm-build unpacks (``rocm fetch``, ``--rocm URL``, ``rocm debian``): a kill mid-way
leaves a staging folder that the next run removes (only its own), and a symlink that leads out
of the tree is refused the same way for a tarball and for a Debian package (exit 15).

Real tarballs served over loopback HTTP, real .deb files made with dpkg-deb, real SIGKILLs at
the fault points."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from rocm_build.common.errors import UnsafeInput
from rocm_build.rocm import debtree
from tests.conftest import CliRunner
from tests.support.httpserver import Server, server, small_tree_tarball

__all__ = ["server"]  # the fixture, shared with test_fetch (tests.support.httpserver)


def _with_link(name: str, target: str) -> bytes:
    """The small tree tarball plus one symlink member."""
    data = small_tree_tarball()
    raw = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as src,
        tarfile.open(fileobj=raw, mode="w:gz", compresslevel=1) as out,
    ):
        for member in src.getmembers():
            out.addfile(member, src.extractfile(member))
        link = tarfile.TarInfo(f"rocm-6.4.1/{name}")
        link.type = tarfile.SYMTYPE
        link.linkname = target
        out.addfile(link)
    return raw.getvalue()


def _staging(folder: Path) -> list[Path]:
    return sorted(folder.glob(".*.rocm-build-*.tmp"))


def test_fetch_of_a_tarball_with_an_absolute_link_exits_15(
    server: Server, tmp_path: Path, run_cli: CliRunner
) -> None:
    server.files["/rocm.tar.gz"] = _with_link("lib/libevil.so", "/etc/passwd")
    env = {"ROCM_BUILD_BUILD_ROCM_CACHE": str(tmp_path / "cache"), "COLUMNS": "300"}
    res = run_cli(["rocm", "fetch", server.url("/rocm.tar.gz")], cwd=tmp_path, env=env)
    assert res.returncode == 15, res.stderr
    assert "Traceback" not in res.stderr
    assert "unsafe" in res.stderr
    assert not list((tmp_path / "cache").rglob("libevil.so"))


def test_a_kill_while_a_fetched_tree_is_unpacked_is_cleaned_by_the_next_fetch(
    server: Server, tmp_path: Path, run_cli: CliRunner
) -> None:
    server.files["/rocm.tar.gz"] = small_tree_tarball()
    cache = tmp_path / "cache"
    env = {"ROCM_BUILD_BUILD_ROCM_CACHE": str(cache), "COLUMNS": "300"}
    argv = ["rocm", "fetch", server.url("/rocm.tar.gz")]
    killed = run_cli(argv, cwd=tmp_path, env={**env, "RB_FAULT_POINT": "fetch.unpacked"})
    assert killed.returncode == -9, killed.stderr
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    assert len(_staging(folder)) == 1
    again = run_cli(argv, cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr
    assert _staging(folder) == []
    assert (Path(again.stdout.strip()) / "share/padding.bin").is_file()


def _deb(tmp_path: Path, links: dict[str, str]) -> Path:
    """A real .deb (dpkg-deb --build) holding a library and ``links``."""
    root = tmp_path / "pkg"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN/control").write_text(
        "Package: libevil1\nVersion: 1.0\nArchitecture: amd64\n"
        "Maintainer: tests <tests@rocm-build.invalid>\nDescription: a crafted package\n"
    )
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libevil.so.1").write_bytes(b"\x7fELF")
    for name, target in links.items():
        os.symlink(target, lib / name)
    deb = tmp_path / "libevil1_1.0_amd64.deb"
    subprocess.run(["dpkg-deb", "--build", "--root-owner-group", str(root), str(deb)],
                   check=True, capture_output=True)  # fmt: skip
    return deb


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian)")
@pytest.mark.parametrize("target", ["/etc/passwd", "../../../../../etc/passwd"])
def test_a_package_link_out_of_the_tree_is_refused_as_a_tarball_one_is(
    tmp_path: Path, target: str
) -> None:
    deb = _deb(tmp_path, {"libevil.so": target})
    with pytest.raises(UnsafeInput, match=r"usr/lib/x86_64-linux-gnu/libevil.so is"):
        debtree._unpack([deb], tmp_path / "x")


@pytest.mark.skipif(shutil.which("dpkg-deb") is None, reason="needs dpkg-deb (Debian)")
def test_a_package_link_inside_the_tree_is_kept(tmp_path: Path) -> None:
    deb = _deb(tmp_path, {"libevil.so": "libevil.so.1"})
    debtree._unpack([deb], tmp_path / "x")
    assert (tmp_path / "x/usr/lib/x86_64-linux-gnu/libevil.so").resolve().name == "libevil.so.1"


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_the_sweep_leaves_another_users_staging_folder(tmp_path: Path) -> None:
    from rocm_build.common import tempfiles

    dead = 2**22 + 12345  # above the kernel's pid limit: no such process
    mine = tmp_path / f".tree.rocm-build-{dead}-a.tmp"
    theirs = tmp_path / f".tree.rocm-build-{dead}-b.tmp"
    for folder in (mine, theirs):
        folder.mkdir()
        (folder / "data").write_text("x")
    os.chown(theirs, 54321, 54321)
    assert tempfiles.sweep(tmp_path) == [mine]
    assert (theirs / "data").exists()
