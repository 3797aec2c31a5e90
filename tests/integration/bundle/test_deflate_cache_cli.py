"""``bundle`` through the CLI with the deflate cache: the first bundle fills it, the next one of
the same wheel into another folder reuses every entry (and writes the same wheel); ``none``
turns it off."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _bundle(run_cli, wheel: Path, tree: Path, out: Path, cache: str):  # type: ignore[no-untyped-def]
    args = ["bundle", str(wheel), "--rocm", str(tree), "--output-dir", str(out), "-z", "1"]
    env = {"ROCM_BUILD_BUNDLE_DEFLATE_CACHE": cache}
    res = run_cli(args, cwd=wheel.parent, env=env)
    assert res.returncode == 0, res.stderr
    (fat,) = out.glob("*.whl")
    return fat


def _entries(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


def test_second_bundle_reuses_the_cache(  # type: ignore[no-untyped-def]
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "deflate"
    first = _bundle(run_cli, hip_ext_wheel, tree_copy, tmp_path / "a", str(cache))
    stored = _entries(cache)
    assert len(stored) >= 3  # the libraries taken from the tree, at least
    second = _bundle(run_cli, hip_ext_wheel, tree_copy, tmp_path / "b", str(cache))
    again = _entries(cache)
    assert set(again) == set(stored)  # nothing new stored: every library was a hit
    assert all(again[p] > stored[p] for p in stored)  # each hit refreshes its entry
    assert second.read_bytes() == first.read_bytes()
    with zipfile.ZipFile(second) as zf:
        assert zf.testzip() is None
    # off: the cache is neither read (no refreshed entry) nor written
    _bundle(run_cli, hip_ext_wheel, tree_copy, tmp_path / "c", "none")
    assert _entries(cache) == again


def test_deflater_setting_reaches_the_wheel_and_keys_the_cache(  # type: ignore[no-untyped-def]
    run_cli, hip_ext_wheel: Path, tree_copy: Path, tmp_path: Path
) -> None:
    """bundle.deflater (flag or environment) picks what deflates new members: another deflater
    makes the bundle stale (not a no-op), writes other bytes (isal's are larger), stores its
    own cache entries and leaves the other deflater's alone."""
    cache, out = tmp_path / "deflate", tmp_path / "out"
    env = {"ROCM_BUILD_BUNDLE_DEFLATE_CACHE": str(cache)}
    args = ["bundle", str(hip_ext_wheel), "--rocm", str(tree_copy), "--output-dir", str(out)]
    res = run_cli(args, cwd=tmp_path, env={**env, "ROCM_BUILD_BUNDLE_DEFLATER": "zlib"})
    assert res.returncode == 0, res.stderr
    (fat,) = out.glob("*.whl")
    zlib_bytes, zlib_entries = fat.read_bytes(), _entries(cache)
    res = run_cli([*args, "--deflater", "isal"], cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert "up to date" not in res.stdout + res.stderr
    isal_bytes = fat.read_bytes()
    assert len(isal_bytes) > len(zlib_bytes)
    isal_entries = _entries(cache)
    assert set(zlib_entries) < set(isal_entries)  # new entries; the zlib ones kept, unread
    assert all(isal_entries[p] == zlib_entries[p] for p in zlib_entries)
    with zipfile.ZipFile(fat) as zf:
        assert zf.testzip() is None
    res = run_cli([*args, "--deflater", "isal"], cwd=tmp_path, env=env)  # the same again
    assert res.returncode == 0, res.stderr
    assert fat.read_bytes() == isal_bytes
    assert "is up to date" in res.stderr
