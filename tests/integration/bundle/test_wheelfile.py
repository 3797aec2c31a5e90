"""wheelfile.py: raw copy, parallel deflate, RECORD, ZIP64, atomic output; checked with
zipfile's own tester, ``wheel unpack`` and ``pip install``."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest

from rocm_build.common.errors import BundleError
from rocm_build.wheel import rawdeflate, wheelmeta, zipformat
from rocm_build.wheel.deflate import Deflate
from rocm_build.wheel.wheelfile import WheelName, WheelReader, WheelWriter

from .helpers import make_wheel


def _zip_test(path: Path) -> None:
    subprocess.run([sys.executable, "-m", "zipfile", "-t", str(path)], check=True)


def _wheel_unpack(path: Path, dest: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "wheel", "unpack", "-d", str(dest), str(path)],
        check=True,
        capture_output=True,
    )
    (unpacked,) = dest.iterdir()
    return unpacked


def _rewrite(
    src: Path, out_dir: Path, new: dict[str, bytes], level: int = 6, deflater: str = ""
) -> Path:
    with WheelReader(src) as reader:
        out = out_dir / src.name
        with WheelWriter(out, reader.dist_info, Deflate(deflater, level)) as writer:
            for m in reader.members:
                if m.name.endswith("/RECORD") or m.name in new:
                    continue
                writer.copy_member(reader, m.name)
            for name, data in new.items():
                writer.add_bytes(name, data)
            writer.commit()
    return out


@pytest.mark.parametrize("deflate", rawdeflate.DEFLATERS)
def test_copy_and_add_verify(tmp_path: Path, deflate: str) -> None:
    if deflate != rawdeflate.implementation(deflate):
        pytest.skip(f"{deflate} not loadable here")
    big = os.urandom(3 << 20) + b"\0" * (5 << 20)  # several deflate chunks, mixed entropy
    src = make_wheel(
        tmp_path / "in",
        "demo",
        "1.0",
        {"demo/__init__.py": b"X = 1\n", "demo/data.bin": big},
    )
    new = {"demo/new.txt": b"hello " * 100000, "demo/empty": b""}
    out = _rewrite(src, tmp_path / "out", new, deflater=deflate)
    _zip_test(out)
    with zipfile.ZipFile(out) as zf:
        assert zf.read("demo/data.bin") == big
        assert zf.read("demo/new.txt") == new["demo/new.txt"]
        assert zf.read("demo/empty") == b""
        names = zf.namelist()
        assert names[-1] == "demo-1.0.dist-info/RECORD"
        # unchanged members were copied raw: same compressed size as the input
        with zipfile.ZipFile(src) as zin:
            assert zf.getinfo("demo/data.bin").compress_size == (
                zin.getinfo("demo/data.bin").compress_size
            )
    unpacked = _wheel_unpack(out, tmp_path / "unpacked")  # verifies every RECORD hash and size
    assert (unpacked / "demo" / "data.bin").read_bytes() == big
    assert not list((tmp_path / "out").glob(".*.tmp"))


def test_parallel_deflate_equals_plain_inflate(tmp_path: Path) -> None:
    data = b"".join(hashlib.sha256(str(i).encode()).hexdigest().encode() for i in range(200000))
    src = make_wheel(tmp_path / "in", "demo", "1.0", {"demo/a.py": b""})
    out = _rewrite(src, tmp_path / "out", {"demo/text": data}, level=9)
    with zipfile.ZipFile(out) as zf:
        info = zf.getinfo("demo/text")
        assert zf.read("demo/text") == data
        # split into chunks, the member is still no larger than one single zlib stream
        assert info.compress_size <= len(zlib.compress(data, 9)) * 1.01


def test_stored_level_zero(tmp_path: Path) -> None:
    src = make_wheel(tmp_path / "in", "demo", "1.0", {"demo/a.py": b"a = 1\n"})
    out = _rewrite(src, tmp_path / "out", {"demo/b.bin": b"b" * 5000}, level=0)
    with zipfile.ZipFile(out) as zf:
        assert zf.getinfo("demo/b.bin").compress_type == zipfile.ZIP_STORED
    _wheel_unpack(out, tmp_path / "u")


def test_zip64_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lower the 4 GiB limit so every size/offset field and the end records go ZIP64."""
    monkeypatch.setattr(zipformat, "ZIP32_LIMIT", 4096)
    payload = os.urandom(9000)
    src = make_wheel(tmp_path / "in", "demo", "1.0", {"demo/r.bin": payload, "demo/a.py": b"1"})
    out = _rewrite(src, tmp_path / "out", {"demo/n.bin": b"z" * 20000 + os.urandom(5000)})
    raw = out.read_bytes()
    assert b"PK\x06\x06" in raw
    assert b"PK\x06\x07" in raw
    _zip_test(out)
    with zipfile.ZipFile(out) as zf:
        assert zf.read("demo/r.bin") == payload
        assert zf.getinfo("demo/n.bin").header_offset > 4096
    _wheel_unpack(out, tmp_path / "u")


@pytest.mark.slow
def test_zip64_real_over_4gib(tmp_path: Path) -> None:
    """A member larger than 4 GiB (sparse input, stored output) reads back with zipfile."""
    big = tmp_path / "big.bin"
    with big.open("wb") as fh:
        fh.truncate((4 << 30) + 12345)
    src = make_wheel(tmp_path / "in", "demo", "1.0", {"demo/a.py": b"1"})
    out = tmp_path / "out" / src.name
    with WheelReader(src) as reader, WheelWriter(out, reader.dist_info, Deflate(level=0)) as writer:
        writer.add_file("demo/big.bin", big)
        for m in reader.members:
            if not m.name.endswith("RECORD"):
                writer.copy_member(reader, m.name)
        writer.commit()
    big.unlink()
    with zipfile.ZipFile(out) as zf:
        info = zf.getinfo("demo/big.bin")
        assert info.file_size == (4 << 30) + 12345
        assert zf.getinfo("demo-1.0.dist-info/METADATA").header_offset > (4 << 30)
        assert zf.read("demo-1.0.dist-info/METADATA").startswith(b"Metadata-Version")
        with zf.open("demo/big.bin") as fh:
            fh.seek(info.file_size - 10)
            assert fh.read() == b"\0" * 10


def test_failed_write_leaves_previous_output(tmp_path: Path) -> None:
    src = make_wheel(tmp_path / "in", "demo", "1.0", {"demo/a.py": b"1"})
    out = _rewrite(src, tmp_path / "out", {})
    before = out.read_bytes()
    with (  # noqa: PT012
        WheelReader(src) as reader,
        pytest.raises(BundleError, match="duplicate"),
        WheelWriter(out, reader.dist_info) as writer,
    ):
        writer.copy_member(reader, "demo/a.py")
        writer.copy_member(reader, "demo/a.py")
    assert out.read_bytes() == before
    assert not list(out.parent.glob(".*.tmp"))


def test_pip_installs_rewritten_wheel(tmp_path: Path) -> None:
    src = make_wheel(tmp_path / "in", "demo", "1.0", {"demo/__init__.py": b"X = 41\n"})
    out = _rewrite(src, tmp_path / "out", {"demo/extra.py": b"Y = 1\n"})
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(target),
            str(out),
        ],
        check=True,
    )
    assert (target / "demo" / "extra.py").read_text() == "Y = 1\n"


def test_wheel_name_roundtrip() -> None:
    name = WheelName.parse("torch-2.9.0+rocm5.2-cp311-cp311-linux_x86_64.whl")
    assert name.version == "2.9.0+rocm5.2"
    assert str(name) == "torch-2.9.0+rocm5.2-cp311-cp311-linux_x86_64.whl"
    tagged = name.with_platform("manylinux_2_17_x86_64.manylinux2014_x86_64")
    assert str(tagged) == (
        "torch-2.9.0+rocm5.2-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
    )
    with pytest.raises(BundleError):
        WheelName.parse("not-a-wheel.zip")


def test_metadata_edits() -> None:
    meta = "Metadata-Version: 2.1\nName: tv\nVersion: 0.24.0\nRequires-Dist: torch>=2\n\nbody\n"
    out = wheelmeta.add_requirement(meta, "torch==2.9.0+rocm5.2")
    assert "Requires-Dist: torch==2.9.0+rocm5.2" in out
    assert "torch>=2" not in out
    assert out.endswith("\n\nbody\n")
    assert wheelmeta.metadata_version(wheelmeta.set_metadata_version(meta, "1+x")) == "1+x"
    wheel = "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    assert wheelmeta.set_wheel_tags(wheel, ["cp311-cp311-manylinux_2_28_x86_64"]).endswith(
        "Root-Is-Purelib: false\nTag: cp311-cp311-manylinux_2_28_x86_64\n"
    )
