"""``rocm wheels`` on the real ROCm 5.2.3 tree: no file from outside the tree enters its wheels
through a symlink (the guard ``bundle`` uses, with the same ``--allow-outside``); the libraries
package carries the tag its files satisfy and requires rocm-sdk-core at its version; bad
``--target-family`` and ``--output-dir`` values are one-line errors."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def _error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("rocm-build: error:")]
    return line


def _wheels(run_cli, tree: Path, out: Path, *extra: str):  # type: ignore[no-untyped-def]
    argv = ["--json", "rocm", "wheels", str(tree), "--output-dir", str(out), "-z", "1", *extra]
    return run_cli(argv, cwd=out.parent)


def test_a_library_link_out_of_the_tree_is_refused_unless_allowed(
    run_cli, tree_copy: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    # The library's real file (librocrand.so.1 and .so link to it) becomes a link out.
    lib = (tree_copy / "lib" / "librocrand.so.1").resolve()
    planted = outside / lib.name
    shutil.copyfile(lib, planted)
    with planted.open("ab") as fh:
        fh.write(b"OUTSIDE-MARK")  # so that the packed member shows where it came from
    lib.unlink()
    lib.symlink_to(planted)

    refused = _wheels(run_cli, tree_copy, tmp_path / "out")
    assert refused.returncode == 10, refused.stderr
    line = _error_line(refused.stderr)
    assert f"lib/{lib.name} in the ROCm tree is a symlink to {planted}" in line, line
    assert "--allow-outside" in line
    assert not list((tmp_path / "out").glob("*.whl"))

    allowed = _wheels(run_cli, tree_copy, tmp_path / "out", "--allow-outside", str(outside))
    assert allowed.returncode == 0, allowed.stderr
    (libraries,) = (tmp_path / "out").glob("rocm_sdk_libraries_all-*.whl")
    with zipfile.ZipFile(libraries) as zf:
        member = zf.read("_rocm_sdk_libraries_all/lib/librocrand.so.1")
        meta = zf.read("rocm_sdk_libraries_all-5.2.3.dist-info/METADATA").decode()
    assert b"OUTSIDE-MARK" in member
    assert "Requires-Dist: rocm-sdk-core==5.2.3\n" in meta

    # The file name's tag is the one inspect finds the files satisfy.
    shown = run_cli(["--json", "inspect", str(libraries)], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    report = report[0] if isinstance(report, list) else report
    assert report["platform_tag"].split(".")[0] in report["file_platform_tag"], report
    assert report["file_platform_tag"].startswith("manylinux_"), report["file_platform_tag"]


@pytest.mark.parametrize("family", ["../x y", "x" * 300, "a--b", ""])
def test_a_bad_target_family_is_one_line_for_wheels_and_thin_bundles(
    run_cli, rocm_tree: Path, hip_ext_wheel: Path, tmp_path: Path, family: str
) -> None:  # type: ignore[no-untyped-def]
    made = _wheels(run_cli, rocm_tree, tmp_path / "out", "--target-family", family)
    thin = run_cli(
        ["bundle", str(hip_ext_wheel), "--rocm", str(rocm_tree), "--output-dir",
         str(tmp_path / "thin"), "--mode", "thin", "--target-family", family],
        cwd=tmp_path,
    )  # fmt: skip
    for res in (made, thin):
        assert res.returncode == 2, res.stderr
        assert "bad --target-family" in _error_line(res.stderr)
    assert not (tmp_path / "thin").exists() or not list((tmp_path / "thin").iterdir())


def test_an_output_dir_that_is_a_file_is_one_line(run_cli, rocm_tree: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    afile = tmp_path / "afile"
    afile.write_text("x")
    for out in (afile, afile / "sub"):
        res = run_cli(["rocm", "wheels", str(rocm_tree), "--output-dir", str(out)], cwd=tmp_path)
        assert res.returncode == 14, res.stderr
        assert "is a file" in _error_line(res.stderr)


def test_a_300_character_device_name_is_one_line(
    run_cli, rocm_tree: Path, hip_ext_wheel: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    res = run_cli(
        ["bundle", str(hip_ext_wheel), "--rocm", str(rocm_tree), "--output-dir",
         str(tmp_path / "out"), "--split-arch", "--arch", "gfx90a"],
        cwd=tmp_path,
        env={"ROCM_BUILD_BUNDLE_DEVICE_NAME": "d" * 300 + "-{target}"},
    )  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "bundle.device_name 'ddd" in _error_line(res.stderr)
