"""A bundled wheel's provenance record read back from an output folder: one of other types
(crafted, or another tool's) is as good as none, never a traceback."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from rocm_build.bundle import provenance
from rocm_build.common.errors import FileAccessError
from rocm_build.wheel import analyze

ARCNAME = "ext/.rocm-build-provenance.json"


def _wheel(path: Path, record: bytes, arcname: str = ARCNAME) -> Path:
    files = {
        "ext/__init__.py": b"",
        arcname: record,
        "ext-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: ext\nVersion: 1.0\n",
        "ext-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\n",
    }
    rows = [
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},"
        f"{len(d)}"
        for n, d in files.items()
    ]
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr("ext-1.0.dist-info/RECORD", "\n".join([*rows, "ext-1.0.dist-info/RECORD,,"]))
    return path


@pytest.mark.parametrize("record", [b"[1, 2]", b'"text"', b"not json", b"[" * 100_000])
def test_a_record_of_other_types_is_none(tmp_path: Path, record: bytes) -> None:
    wheel = _wheel(tmp_path / "ext-1.0-py3-none-any.whl", record)
    assert provenance.read_provenance(wheel, ARCNAME) is None
    assert provenance.up_to_date(wheel, tmp_path, ARCNAME, "fp") is None


def test_a_record_with_crafted_sources_is_not_up_to_date(tmp_path: Path) -> None:
    record = b'{"fingerprint": "fp", "sources": [7, ["x"]]}'
    wheel = _wheel(tmp_path / "ext-1.0-py3-none-any.whl", record)
    crafted = {"fingerprint": "fp", "sources": [7, ["x"]]}
    assert provenance.read_provenance(wheel, ARCNAME) == crafted
    assert provenance.up_to_date(wheel, tmp_path, ARCNAME, "fp") is None


@pytest.mark.parametrize("record", [b"[1, 2]", b"not json", b"[" * 100_000])
def test_an_input_wheels_record_of_other_types_is_no_record(tmp_path: Path, record: bytes) -> None:
    """analyze reads the records an input wheel carries the same way: none, not a traceback
    (a record nested too deep raised RecursionError there)."""
    name = f"ext/{analyze.PROVENANCE}"
    wheel = _wheel(tmp_path / "ext-1.0-py3-none-any.whl", record, name)
    assert analyze.analyze_path(wheel, elf_files=False).provenance == {}
    good = _wheel(tmp_path / "ext-1.0-py3-none-any.whl", b'{"tool": "x"}', name)
    assert analyze.analyze_path(good, elf_files=False).provenance == {name: {"tool": "x"}}


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_an_output_that_is_no_wheel_of_mine_is_refused_not_read(tmp_path: Path, kind: str) -> None:
    """A link (to a wheel whose record would match) or a FIFO where the output folder's wheels
    are is refused in one line (exit 14): never read through, never waited on."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bait = _wheel(elsewhere / "ext-1.0-py3-none-any.whl", b'{"fingerprint": "fp", "sources": []}')
    out = tmp_path / "out"
    out.mkdir()
    planted = out / "ext-1.0-py3-none-any.whl"
    if kind == "link":
        planted.symlink_to(bait)
    else:
        os.mkfifo(planted)
    with pytest.raises(FileAccessError, match="bundled wheel") as err:
        provenance.up_to_date(bait, out, ARCNAME, "fp")
    assert err.value.exit_code == 14
