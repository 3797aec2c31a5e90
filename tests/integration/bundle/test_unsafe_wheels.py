"""Hostile and broken input wheels: every command that reads a wheel refuses them (exit 15) with
one line naming the member, before anything is extracted, and writes nothing outside its folder.

The wheels are made here with ``zipfile`` (real ZIP files, a real gcc-built ELF library as the
payload), with a complete and correct RECORD, so the only fault is the one under test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import cc_shared
from .runs import SMALL, one_error
from .wheelcraft import raw_wheel

pytestmark = pytest.mark.slow

DIST = "evil-1.0.dist-info"


@pytest.fixture(scope="module")
def elf_so(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    lib = cc_shared(tmp_path_factory.mktemp("elf") / "libx.so", "int x(void){return 1;}\n")
    return lib.read_bytes()


def _commands(wheel: Path, rocm: Path, out: Path) -> list[list[str]]:
    bundle = ["bundle", str(wheel), "--rocm", str(rocm), "--output-dir", str(out), "-z", "1"]
    return [bundle, [*bundle, "--dry-run"], ["inspect", str(wheel)]]


def _cases(tmp_path: Path, elf_so: bytes) -> dict[str, tuple[list[tuple[str, bytes, int]], str]]:
    reg = 0o100755
    absolute = str(tmp_path / "abs" / "x.so")
    return {
        "dotdot": (
            [("evil/__init__.py", b"", 0o100644), ("../../x.so", elf_so, reg)],
            "../../x.so",
        ),
        "absolute": ([("evil/__init__.py", b"", 0o100644), (absolute, elf_so, reg)], absolute),
        "backslash": ([("evil/a\\b.so", elf_so, reg)], "evil/a\\b.so"),
        "drive": ([("evil/__init__.py", b"", 0o100644), ("C:/x.so", elf_so, reg)], "C:/x.so"),
        "empty part": ([("evil//x.so", elf_so, reg)], "evil//x.so"),
        "duplicate": ([("evil/_x.so", elf_so, reg), ("evil/_x.so", elf_so, reg)], "evil/_x.so"),
        "symlink": (
            [("evil/__init__.py", b"", 0o100644), ("evil/link.so", b"../../../etc", 0o120777)],
            "evil/link.so",
        ),
        "file and folder": (
            [("evil/_x.so", elf_so, reg), ("evil/_x.so/y.py", b"", 0o100644)],
            "evil/_x.so",
        ),
    }


@pytest.mark.parametrize(
    "case",
    ["dotdot", "absolute", "backslash", "drive", "empty part", "duplicate", "symlink",
     "file and folder"],
)  # fmt: skip
def test_unsafe_member_is_refused_by_every_reader(
    run_cli, rocm_tree: Path, tmp_path: Path, elf_so: bytes, case: str
) -> None:  # type: ignore[no-untyped-def]
    members, shown = _cases(tmp_path, elf_so)[case]
    # output folder two levels down, so that scratch/../../x.so would land in tmp_path/a
    out = tmp_path / "a" / "out"
    out.mkdir(parents=True)
    wheel = raw_wheel(tmp_path / "dist", members)
    targets = [tmp_path / "a" / "x.so", tmp_path / "x.so", tmp_path / "abs" / "x.so"]
    for args in _commands(wheel, rocm_tree, out):
        res = run_cli(args, cwd=tmp_path, env=SMALL)
        assert res.returncode == 15, (args, res.stdout, res.stderr)
        one_error(res, shown, "unsafe")
        for target in targets:
            assert not target.exists(), (args, target)
        assert not list(out.iterdir()), (args, list(out.iterdir()))


def test_unsafe_member_is_refused_by_build_check_and_smoke(tmp_path: Path, elf_so: bytes) -> None:
    from rocm_build.building import wheelcheck
    from rocm_build.common.errors import UnsafeInput
    from rocm_build.smoke import wheels as smoke_wheels

    wheel = raw_wheel(tmp_path / "dist", [("../../x.so", elf_so, 0o100755)])
    for call in (
        lambda: wheelcheck.check_wheel(wheel, ["gfx90a"], "evil"),
        lambda: wheelcheck.wheel_metadata(wheel),
        lambda: wheelcheck.pin_requirement(wheel, "torch", "2.9.0"),
        lambda: smoke_wheels.import_names(wheel),
    ):
        with pytest.raises(UnsafeInput, match=r"'\.\./\.\./x\.so'.*unsafe"):
            call()
    assert not (tmp_path / "x.so").exists()


@pytest.mark.parametrize("missing", ["RECORD", "WHEEL", "METADATA"])
def test_wheel_without_its_metadata_files_is_refused(
    run_cli, rocm_tree: Path, tmp_path: Path, elf_so: bytes, missing: str
) -> None:  # type: ignore[no-untyped-def]
    wheel = raw_wheel(tmp_path / "dist", [("evil/_x.so", elf_so, 0o100755)], skip=[missing])
    out = tmp_path / "out"
    for args in _commands(wheel, rocm_tree, out):
        res = run_cli(args, cwd=tmp_path, env=SMALL)
        assert res.returncode == 15, (args, res.stdout, res.stderr)
        one_error(res, f"{DIST}/{missing}")
        assert not out.exists() or not list(out.iterdir())


@pytest.mark.parametrize("member", ["evil/__init__.py", "evil/_x.so"])
def test_record_that_does_not_match_is_refused(
    run_cli, rocm_tree: Path, tmp_path: Path, elf_so: bytes, member: str
) -> None:  # type: ignore[no-untyped-def]
    """RECORD has the right size but another hash: bundle refuses rather than copy the wrong
    row into its output (the ELF member is extracted for planning, the .py file is copied raw)."""
    init = b"VALUE = 1\n"
    content = {"evil/__init__.py": init, "evil/_x.so": elf_so}[member]
    tampered = bytes([content[0] ^ 1]) + content[1:]
    wheel = raw_wheel(
        tmp_path / "dist",
        [("evil/__init__.py", init, 0o100644), ("evil/_x.so", elf_so, 0o100755)],
        record_override={member: tampered},
    )
    out = tmp_path / "out"
    res = run_cli(_commands(wheel, rocm_tree, out)[0], cwd=tmp_path, env=SMALL)
    assert res.returncode == 15, (res.stdout, res.stderr)
    one_error(res, member, "RECORD")
    assert not out.exists() or not list(out.iterdir())


def test_record_size_that_does_not_match_is_refused_before_reading(
    run_cli, rocm_tree: Path, tmp_path: Path, elf_so: bytes
) -> None:  # type: ignore[no-untyped-def]
    wheel = raw_wheel(
        tmp_path / "dist",
        [("evil/__init__.py", b"A = 1\n", 0o100644), ("evil/_x.so", elf_so, 0o100755)],
        record_override={"evil/__init__.py": b"A = 12\n"},
    )
    for args in _commands(wheel, rocm_tree, tmp_path / "out"):
        res = run_cli(args, cwd=tmp_path, env=SMALL)
        assert res.returncode == 15, (args, res.stdout, res.stderr)
        one_error(res, "evil/__init__.py", "RECORD")


def test_inspect_reports_members_that_do_not_match_record(
    run_cli, tmp_path: Path, elf_so: bytes
) -> None:  # type: ignore[no-untyped-def]
    """inspect reads only ELF and PE files for its report; the other members are checked too,
    each mismatch listed, and the exit is 15 after the report."""
    members = [
        ("evil/__init__.py", b"VALUE = 1\n", 0o100644),
        ("evil/data.txt", b"hello\n", 0o100644),
        ("evil/_x.so", elf_so, 0o100755),
    ]
    wheel = raw_wheel(
        tmp_path / "dist",
        members,
        record_override={"evil/__init__.py": b"VALUE = 2\n", "evil/data.txt": b"HELLO\n"},
    )
    res = run_cli(["inspect", str(wheel)], cwd=tmp_path)
    assert res.returncode == 15, (res.stdout, res.stderr)
    line = one_error(res, "evil/__init__.py", "RECORD")
    assert "1 more" in line
    assert "RECORD MISMATCH" in res.stdout
    assert "evil/data.txt" in res.stdout
    assert "evil/_x.so" in res.stdout  # the report is still there

    res = run_cli(["--json", "inspect", str(wheel)], cwd=tmp_path)
    assert res.returncode == 15, res.stderr
    import json

    problems = json.loads(res.stdout)["record_problems"]
    assert len(problems) == 2
    assert "evil/data.txt" in problems[1]
