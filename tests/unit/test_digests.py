"""Digests and file facts, the one way (statefile.py): a file's sha256, settings in any key order,
and the stat facts that tell a changed or gone file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from rocm_build.common import statefile


def test_file_sha256_is_the_bytes_digest(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100_000)
    assert statefile.file_sha256(f) == hashlib.sha256(b"x" * 100_000).hexdigest()


def test_settings_digest_ignores_key_order_and_sees_values() -> None:
    a = statefile.settings_digest({"targets": ["gfx90a"], "rocm": {"v": "6.4.1", "root": "/r"}})
    b = statefile.settings_digest({"rocm": {"root": "/r", "v": "6.4.1"}, "targets": ["gfx90a"]})
    c = statefile.settings_digest({"rocm": {"root": "/r", "v": "6.4.2"}, "targets": ["gfx90a"]})
    assert a == b != c
    assert len(a) == 64
    assert statefile.settings_digest({"p": Path("/x")}) == statefile.settings_digest({"p": "/x"})


def test_file_facts_tell_a_changed_or_gone_file(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("one")
    facts = [statefile.file_facts(f)]
    assert facts[0][:2] == [str(f), 3]
    assert statefile.facts_unchanged(facts)
    st = f.stat()
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    assert not statefile.facts_unchanged(facts)
    g = tmp_path / "g"
    g.write_text("two")
    gone = [statefile.file_facts(g)]
    g.unlink()
    assert not statefile.facts_unchanged(gone)


def test_facts_of_other_shapes_are_not_these_files(tmp_path: Path) -> None:
    """A crafted record (a provenance's sources, a stamp's outputs) never raises: it is stale."""
    f = tmp_path / "f"
    f.write_bytes(b"x")
    good = [statefile.file_facts(f)]
    assert statefile.facts_unchanged(good)
    for crafted in ([7], [["only", 2]], [[str(f), 1, 2, 3]], "abc", [None]):
        assert not statefile.facts_unchanged(crafted)  # type: ignore[arg-type]


def test_a_rewrite_that_keeps_size_and_mtime_is_a_change(tmp_path: Path) -> None:
    """The ctime (and, for a file renamed into place, the inode) tell what size and mtime,
    set back with os.utime, do not (issue 30)."""
    f = tmp_path / "f"
    f.write_bytes(b"one")
    facts = [statefile.file_facts(f)]
    st = f.stat()
    with f.open("r+b") as fh:
        fh.write(b"two")
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not statefile.facts_unchanged(facts)
    g = tmp_path / "g"
    g.write_bytes(b"six")
    os.utime(g, ns=(st.st_atime_ns, st.st_mtime_ns))
    facts = [statefile.file_facts(f)]
    g.replace(f)
    assert not statefile.facts_unchanged(facts)


def test_content_sha256_hashes_a_file_once_while_its_facts_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 5 GB input wheel is hashed at most once per run (plan, the check under the lock and
    the record all ask), and again once it changes."""
    calls: list[int] = []
    real = hashlib.sha256

    def counted(*args: bytes) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(statefile.hashlib, "sha256", counted)
    f = tmp_path / "w.whl"
    f.write_bytes(b"a" * 3_000_000)
    want = real(b"a" * 3_000_000).hexdigest()
    assert statefile.content_sha256(f) == want
    with f.open("rb") as fh:
        assert statefile.content_sha256(f, fh.fileno()) == want
    assert statefile.content_sha256(f) == want
    assert len(calls) == 1
    with f.open("r+b") as fh:
        fh.write(b"b")
    assert statefile.content_sha256(f) == real(b"b" + b"a" * 2_999_999).hexdigest()
    assert len(calls) == 2
