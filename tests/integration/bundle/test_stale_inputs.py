"""A bundle is made from the very bytes its plan read, and is "up to date" only while they are
what it was made from (issue 30 point 4): the input wheel by content, the tree's files by stat
facts that no rewrite keeps (the inode and the ctime, which only root can set). A changed
library kept at its size and mtime with ``os.utime``, or another wheel of the same size and
mtime written over the input, used to leave a stale wheel "up to date" for good.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest

from rocm_build import bundle, config
from rocm_build.common.errors import BundleError
from rocm_build.run import context

from .conftest import INIT
from .helpers import make_wheel

pytestmark = pytest.mark.slow


def _bundle(run_cli, wheel: Path, tree: Path, out: Path) -> str:  # type: ignore[no-untyped-def]
    res = run_cli(
        ["--json", "bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out), "-z", "0"],
        cwd=out.parent,
    )
    assert res.returncode == 0, res.stderr
    return str(json.loads(res.stdout)[0]["status"])


def _private(tree: Path, rel: str) -> Path:
    """``tree/rel`` as a file of its own (the copy's files are hard links to the cached
    tree's: written in place, they would change the cache)."""
    lib = (tree / rel).resolve()
    tmp = lib.with_name(lib.name + ".private")
    shutil.copy2(lib, tmp)
    tmp.replace(lib)
    return lib


def _rewrite_in_place(path: Path, data: bytes) -> None:
    """Write ``data`` over ``path`` (same inode, same size) and set its times back."""
    st = path.stat()
    assert len(data) == st.st_size
    with path.open("r+b") as fh:
        fh.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        st.st_ino,
        st.st_size,
        st.st_mtime_ns,
    )


def _flip_last_byte(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


def _privatize_sources(out: Path, tree: Path) -> None:
    """Every tree file the bundle in ``out`` took, made a file of its own: a hard link made
    to the cached tree's (another test's ``cp -al``) changes its ctime, so a test that wants
    "up to date" bundles from files no other test links."""
    (fat,) = out.glob("*.whl")
    with zipfile.ZipFile(fat) as zf:
        prov = json.loads(zf.read("hipext/.rocm-build-bundle.json"))
    for path, *_facts in prov["sources"]:
        if Path(path).is_relative_to(tree.resolve()):  # (not the system's, from the machine)
            _private(tree, str(Path(path).relative_to(tree.resolve())))


def test_tree_library_rewritten_keeping_size_and_mtime_makes_the_bundle_stale(
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    lib = _private(tree_copy, "lib/libamdhip64.so.5")
    out = tmp_path / "out"
    assert _bundle(run_cli, hip_ext_wheel, tree_copy, out) == "bundled"
    _privatize_sources(out, tree_copy)
    assert _bundle(run_cli, hip_ext_wheel, tree_copy, out) == "bundled"
    assert _bundle(run_cli, hip_ext_wheel, tree_copy, out) == "up-to-date"
    _rewrite_in_place(lib, _flip_last_byte(lib.read_bytes()))
    assert _bundle(run_cli, hip_ext_wheel, tree_copy, out) == "bundled"
    assert _bundle(run_cli, hip_ext_wheel, tree_copy, out) == "up-to-date"


def _same_size_wheel(folder: Path, like: Path, kern: Path) -> bytes:
    """Another hipext wheel (its __init__ says something else) of ``like``'s size exactly."""
    size = like.stat().st_size
    for n in range(64):
        other = make_wheel(
            folder / str(n),
            "hipext",
            "1.0.0",
            {
                "hipext/__init__.py": INIT.encode() + f"# {n:04d}\n".encode(),
                "hipext/_kern.so": kern,
            },
        )
        if other.stat().st_size == size:
            return other.read_bytes()
    raise AssertionError("no variant of the same size")


def test_input_wheel_replaced_by_another_of_the_same_size_and_mtime(
    run_cli, hip_ext_so: Path, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    kern = tmp_path / "src" / "_kern.so"
    kern.parent.mkdir()
    shutil.copy(hip_ext_so, kern)
    wheel = make_wheel(
        tmp_path / "dist",
        "hipext",
        "1.0.0",
        {
            "hipext/__init__.py": INIT.encode() + b"# 9999\n",
            "hipext/_kern.so": kern,
        },
    )
    out = tmp_path / "out"
    assert _bundle(run_cli, wheel, tree_copy, out) == "bundled"
    _privatize_sources(out, tree_copy)
    assert _bundle(run_cli, wheel, tree_copy, out) == "bundled"
    other = _same_size_wheel(kern.parent, wheel, kern)
    assert other != wheel.read_bytes()
    _rewrite_in_place(wheel, other)
    assert _bundle(run_cli, wheel, tree_copy, out) == "bundled"
    (fat,) = out.glob("*.whl")
    with zipfile.ZipFile(fat) as zf:
        assert zf.read("hipext/__init__.py") != INIT.encode() + b"# 9999\n"
    # the same bytes again, in a new file (another inode, another ctime): still up to date
    wheel.unlink()
    wheel.write_bytes(other)
    assert _bundle(run_cli, wheel, tree_copy, out) == "up-to-date"


def test_tree_library_changed_between_plan_and_execute_stops_the_bundle(
    hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:
    lib = _private(tree_copy, "lib/libamdhip64.so.5")
    flags = {"rocm": str(tree_copy), "bundle.wheel_dir": str(tmp_path / "out")}
    cfg = config.load(cwd=tmp_path, env=dict(os.environ), flags=flags)
    plan = bundle.plan(context.resolve(cfg, tree=True), [hip_ext_wheel])
    _rewrite_in_place(lib, _flip_last_byte(lib.read_bytes()))
    with pytest.raises(BundleError, match="changed after the bundle was planned"):
        bundle.execute(plan)
    assert not list((tmp_path / "out").glob("*.whl"))
