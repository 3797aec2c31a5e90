"""Hipify output that the project's .gitignore hides (``*.hip``, ``hip/``) is committed like any
other hipify output: counted, protected from being overwritten, and saved by save-patches."""

from __future__ import annotations

import textwrap
from pathlib import Path

from .conftest import Runner, git, make_ignoring_project


def _config(work: Path, ext: Path) -> None:
    with (work / "rocm-build.toml").open("a") as fh:
        fh.write(
            textwrap.dedent(
                f"""
                [projects.ext]
                origin = "{ext.as_uri()}"
                ref = "v1"
                hipify = ["{{python}}", "tools/hipify.py"]

                [projects.noop]
                origin = "{ext.as_uri()}"
                ref = "v1"
                hipify = ["{{python}}", "-c", "print('nothing to hipify')"]
                """
            )
        )


def test_ignored_hipify_output_is_committed_protected_and_saved(
    rb: Runner, work: Path, tmp_path: Path
) -> None:
    ext = make_ignoring_project(tmp_path / "upstream-ext")
    _config(work, ext)
    res = rb("checkout", "ext")
    assert "ext: checked out v1" in res.stdout
    assert "ext: hipify changed 3 file(s)" in res.stderr, res.stderr
    src = work / "src/ext"
    committed = git(src, "show", "--name-only", "--format=", "ROCM_BUILD_HIPIFY").split()
    assert sorted(committed) == ["hip/gen.h", "src/config.h", "src/ops.hip"]
    assert "hipLaunch" in (src / "src/ops.hip").read_text()
    assert not (src / "tools/__pycache__").exists()
    assert git(src, "status", "--porcelain") == ""

    # A build folder (ignored) appears; the developer edits the hipified kernel.
    (src / "build").mkdir()
    (src / "build/ops.o").write_bytes(b"\x7fELF object")
    kernel = src / "src/ops.hip"
    kernel.write_text(kernel.read_text() + "// tuned by hand\n")
    # The edit is seen: a checkout that would redo the project refuses to overwrite it.
    refused = rb("checkout", "ext", "--ref", "ext=v2", ok=False)
    assert refused.returncode == 6, refused.stderr
    assert "src/ops.hip" in refused.stderr
    assert "// tuned by hand" in kernel.read_text()

    git(src, "commit", "-q", "-a", "-m", "tune the hipified kernel")
    rb("save-patches", "ext")
    (saved,) = sorted((work / "patches").rglob("ext/hipified/*.patch"))
    assert "+// tuned by hand" in saved.read_text()

    # A fresh checkout of the saved series elsewhere has the edit.
    rb("checkout", "ext", "--src-dir", "fresh")
    assert "// tuned by hand" in (work / "fresh/ext/src/ops.hip").read_text()
    assert git(work / "fresh/ext", "status", "--porcelain") == ""

    # Redoing the project at another ref re-hipifies; the build folder is kept, not committed.
    rb("checkout", "ext", "--ref", "ext=v2")
    assert (src / "build/ops.o").is_file()
    committed = git(src, "show", "--name-only", "--format=", "ROCM_BUILD_HIPIFY").split()
    assert "build/ops.o" not in committed
    assert "src/ops.hip" in committed
    assert "// tuned by hand" in kernel.read_text()  # the saved series applied again


def test_hipify_that_changes_nothing_warns(rb: Runner, work: Path, tmp_path: Path) -> None:
    ext = make_ignoring_project(tmp_path / "upstream-ext")
    _config(work, ext)
    res = rb("checkout", "noop")
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("rocm-build: warning:")]
    assert any("noop: hipify changed no files" in ln for ln in warnings), res.stderr
