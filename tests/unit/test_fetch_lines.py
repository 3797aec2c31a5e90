"""``fetch --dry-run`` for people: read from the typed plan, the same lines as its JSON says."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocm_build.building.prefetch import AotritonSet, FetchPlan
from rocm_build.cli import fetch
from rocm_build.repo.aotritoncmake import Download

SECRET_URL = "https://user:hunter2@example.com/llvm.tar.gz"


def _plan(tmp_path: Path, *, llvm_dir: Path | None) -> FetchPlan:
    runtime = Download("aotriton runtime rocm7.0", "rt.tar.gz", "https://h/rt.tar.gz", "aa")
    image = Download("aotriton image amd-gfx942", "img.tar.gz", "https://h/img.tar.gz", "bb")
    aot = AotritonSet("0.11b", runtime, (image,), tmp_path / "prefix", present=False)
    llvm = Download("llvm 1234abcd", "llvm.tar.gz", SECRET_URL, "cc")
    return FetchPlan(aot, llvm, tmp_path / "llvm", llvm_dir, tmp_path / "aot", ("a note",))


def test_the_plan_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fetch._show_plan(_plan(tmp_path, llvm_dir=None))
    assert capsys.readouterr().out.splitlines() == [
        f"aotriton 0.11b -> {tmp_path / 'prefix'} (to fetch)",
        "  aotriton runtime rocm7.0: https://h/rt.tar.gz sha256=aa",
        "  aotriton image amd-gfx942: https://h/img.tar.gz sha256=bb",
        "llvm 1234abcd: https://user:***@example.com/llvm.tar.gz (to fetch)",
        "note: a note",
    ]
    fetch._show_plan(_plan(tmp_path, llvm_dir=tmp_path / "llvm" / "x"))
    out = capsys.readouterr().out
    assert f"llvm 1234abcd: https://user:***@example.com/llvm.tar.gz (in the cache: {tmp_path}" in (
        out
    )
