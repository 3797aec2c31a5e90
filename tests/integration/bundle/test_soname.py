"""A soname is not a file name: the loader looks a NEEDED name up as a FILE in the search path,
so a wheel member provides the name it has, not its SONAME. inspect and bundle resolve the same
way (a wheel that cannot import must not pass inspect or bundle with exit 0)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .helpers import cc_shared, make_wheel
from .runs import SMALL

pytestmark = pytest.mark.slow


def test_soname_is_not_a_file_name(run_cli, rocm_tree: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The loader looks for NEEDED libfoo.so.1 as a file: a member named libfoo_real.so whose
    SONAME is libfoo.so.1 does not provide it, whatever inspect and bundle used to think."""
    build = tmp_path / "build"
    foo = cc_shared(build / "libfoo.so.1", "int foo(void){return 7;}\n", soname="libfoo.so.1")
    ext = cc_shared(
        build / "_ext.so", "int foo(void);\nint ext(void){return foo();}\n", libs=[foo],
        rpath="$ORIGIN/lib",
    )  # fmt: skip
    wheel = make_wheel(
        tmp_path / "dist",
        "sonamed",
        "1.0",
        {"sonamed/__init__.py": b"", "sonamed/_ext.so": ext, "sonamed/lib/libfoo_real.so": foo},
    )
    shown = run_cli(["--json", "inspect", str(wheel)], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    rows = {r["path"]: r for r in json.loads(shown.stdout)["elf_files"]}
    assert rows["sonamed/_ext.so"]["unresolved"] == ["libfoo.so.1"]
    out = tmp_path / "out"
    res = run_cli(
        ["bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(out), "-z", "1"],
        cwd=tmp_path,
        env=SMALL,
    )
    assert res.returncode == 10, (res.stdout, res.stderr)
    assert "libfoo.so.1 (needed by sonamed/_ext.so)" in " ".join(res.stderr.split())
    assert not out.exists() or not list(out.glob("*.whl"))


def test_library_off_the_search_path_is_reported_and_bundle_puts_it_on(
    run_cli, rocm_tree: Path, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """libbar.so.1 is in the wheel, but not in the folder the extension's RPATH names: the
    loader would not find it. inspect says so; bundle adds its folder to the search path."""
    build = tmp_path / "build"
    bar = cc_shared(build / "libbar.so.1", "int bar(void){return 7;}\n", soname="libbar.so.1")
    ext = cc_shared(
        build / "_ext.so", "int bar(void);\nint ext(void){return bar();}\n", libs=[bar],
        rpath="$ORIGIN/lib",
    )  # fmt: skip
    wheel = make_wheel(
        tmp_path / "dist",
        "offpath",
        "1.0",
        {"offpath/__init__.py": b"", "offpath/_ext.so": ext, "offpath/other/libbar.so.1": bar},
    )
    shown = run_cli(["--json", "inspect", str(wheel)], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    row = {r["path"]: r for r in json.loads(shown.stdout)["elf_files"]}["offpath/_ext.so"]
    assert row["unresolved"] == []
    assert row["off_search_path"] == ["libbar.so.1"]
    text = run_cli(["inspect", str(wheel)], cwd=tmp_path).stdout
    assert "IN THE WHEEL BUT NOT ON ITS SEARCH PATH: libbar.so.1" in text
    out = tmp_path / "out"
    res = run_cli(
        ["--json", "bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(out)],
        cwd=tmp_path,
        env=SMALL,
    )
    assert res.returncode == 0, res.stderr
    fat = Path(json.loads(res.stdout)[0]["output"])
    shown = run_cli(["--json", "inspect", str(fat)], cwd=tmp_path)
    rows = json.loads(shown.stdout)["elf_files"]
    assert all(r["off_search_path"] == [] and r["unresolved"] == [] for r in rows), rows
