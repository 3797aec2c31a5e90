"""The one reader and writer of state files (rocm_build/common/statefile.py) under the usual attacks
(tests/support/hostile.py): what is not a regular file of this user's alone is refused in one line
(exit 14) and left as it is; nothing is read or written through a link; a FIFO never blocks."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from rocm_build.common import statefile
from rocm_build.common.errors import FileAccessError
from tests.support import hostile


@pytest.mark.parametrize("attack", hostile.UNTRUSTED)
def test_untrusted_names_are_refused_for_reading_writing_and_removing(
    tmp_path: Path, attack: str
) -> None:
    path = tmp_path / "state" / "stamp.json"
    planted = hostile.plant(path, attack, elsewhere=tmp_path / "elsewhere", folder=False,
                            content=b'{"key": "k"}\n')  # fmt: skip
    calls: list[Callable[[], object]] = [
        lambda: statefile.read_json(path, "stamp"),
        lambda: statefile.write_json(path, {"key": "new"}, "stamp"),
        lambda: statefile.remove(path, "stamp"),
    ]
    for call in calls:
        with pytest.raises(FileAccessError) as err:
            call()
        text = str(err.value)
        assert "\n" not in text
        assert text.startswith(f"the stamp {path} ")
        assert err.value.exit_code == 14
    planted.assert_left_alone()


@pytest.mark.parametrize("attack", ["crafted", "wrong-json", "stale"])
def test_content_is_the_callers_to_judge(tmp_path: Path, attack: str) -> None:
    path = tmp_path / "stamp.json"
    hostile.plant(path, attack, elsewhere=tmp_path / "elsewhere", folder=False,
                  content=b'{"key": "old"}' if attack == "stale" else b"")  # fmt: skip
    if attack == "crafted":
        with pytest.raises(ValueError):
            statefile.read_json(path, "stamp")
    else:
        assert statefile.read_json(path, "stamp") is not None
    statefile.write_json(path, {"key": "new"}, "stamp")  # what this user wrote is replaced
    assert json.loads(path.read_text()) == {"key": "new"}
    assert path.stat().st_mode & 0o777 == 0o644


def test_missing_too_large_and_too_deep(tmp_path: Path) -> None:
    path = tmp_path / "stamp.json"
    with pytest.raises(FileNotFoundError):
        statefile.read_json(path, "stamp")
    statefile.remove(path, "stamp")  # nothing to remove: fine
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(ValueError, match="nested too deep"):
        statefile.read_json(path, "stamp")
    path.write_bytes(b" " * 65)
    with pytest.raises(ValueError, match="larger than 64 bytes"):
        statefile.read_bytes(path, "stamp", limit=64)


def test_a_link_at_a_fixed_temporary_name_is_not_written_through(tmp_path: Path) -> None:
    path = tmp_path / "state" / "build.json"
    planted = [
        hostile.plant(path.with_name(name), "symlink", elsewhere=tmp_path / f"e{i}", folder=False)
        for i, name in enumerate([".build.json.tmp", f".build.json.{os.getpid()}.tmp"])
    ]
    statefile.write_json(path, {"key": "k"}, "stamp")
    assert json.loads(path.read_text()) == {"key": "k"}
    for p in planted:
        p.assert_left_alone()


def test_a_killed_writers_temporary_is_swept_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "build.json"
    left = tmp_path / ".build.json.rocm-build-4194305-abcdefgh.tmp"  # no lock held: its run died
    left.write_bytes(b"partial")
    statefile.write_json(path, {"key": "k"}, "stamp")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["build.json"]
