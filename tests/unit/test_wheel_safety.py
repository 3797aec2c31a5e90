"""Member-name checks of the wheel reader (one pass over the central directory), the extract
guard, and RECORD checks while reading. Real ZIP files, made here with ``zipfile``."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from rocm_build.common.errors import UnsafeInput
from rocm_build.wheel.wheelfile import WheelReader, WheelWriter, check_member_names

REG = 0o100644 << 16


@pytest.mark.parametrize(
    ("names", "member", "why"),
    [
        (["../x.so"], "../x.so", "'..' part"),
        (["a/../../x.so"], "a/../../x.so", "'..' part"),
        (["/etc/x.so"], "/etc/x.so", "absolute path"),
        (["a\\b.so"], "a\\b.so", "backslash"),
        (["C:/x.so"], "C:/x.so", "drive letter"),
        (["c:x.so"], "c:x.so", "drive letter"),
        (["a//b.so"], "a//b.so", "empty or '.' part"),
        (["a/./b.so"], "a/./b.so", "empty or '.' part"),
        (["a/b\nc"], "a/b\\nc", "control character"),
        (["a/b.so", "a/b.so"], "a/b.so", "appears twice"),
        (["a/b", "a/b/"], "a/b", "both a file and a folder"),
        (["a/b/", "a/b"], "a/b", "both a file and a folder"),
        (["a/b", "a/b/c.py"], "a/b", "both a file and a folder"),
        (["a/b/c.py", "a/b"], "a/b", "both a file and a folder"),
    ],
)
def test_unsafe_names(names: list[str], member: str, why: str) -> None:
    with pytest.raises(UnsafeInput, match="unsafe") as err:
        check_member_names("w.whl", ((n, REG) for n in names))
    text = str(err.value)
    assert "\n" not in text
    assert f"'{member}'" in text
    assert why in text


@pytest.mark.parametrize(
    ("mode", "why"),
    [(0o120777, "symbolic link"), (0o010644, "special file"), (0o020644, "special file")],
)
def test_symlinks_and_special_files(mode: int, why: str) -> None:
    with pytest.raises(UnsafeInput, match=why):
        check_member_names("w.whl", [("a/__init__.py", REG), ("a/link", mode << 16)])


def test_safe_names_pass() -> None:
    check_member_names(
        "w.whl",
        [
            ("a/", 0o040755 << 16),
            ("a/__init__.py", REG),
            ("a/lib/libx.so.1", 0o100755 << 16),
            ("a-1.0.dist-info/RECORD", 0),  # no type bits (made on another system): fine
            ("a-1.0.data/scripts/x", REG),
            ("a/B.py", REG),
            ("a/b.py", REG),  # names differing in case only are two files on Linux
        ],
    )


def _wheel(path: Path, files: dict[str, bytes], record: dict[str, bytes] | None = None) -> Path:
    dist = "w-1.0.dist-info"
    files = {
        **files,
        f"{dist}/METADATA": b"Metadata-Version: 2.1\nName: w\nVersion: 1.0\n",
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\n",
    }
    rows = []
    for arc, data in files.items():
        hashed = (record or {}).get(arc, data)
        b64 = base64.urlsafe_b64encode(hashlib.sha256(hashed).digest()).rstrip(b"=").decode()
        rows.append(f"{arc},sha256={b64},{len(hashed)}\n")
    files[f"{dist}/RECORD"] = ("".join(rows) + f"{dist}/RECORD,,\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, data in files.items():
            zf.writestr(arc, data)
    return path


def test_extract_refuses_a_destination_outside_its_folder(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w-1.0-py3-none-any.whl", {"w/x.bin": b"x" * 100})
    dest = tmp_path / "scratch"
    dest.mkdir()
    (dest / "out").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with WheelReader(wheel) as reader:
        for as_name in ("../x.bin", str(tmp_path / "abs.bin"), "out/x.bin", "."):
            with pytest.raises(UnsafeInput, match="outside"):
                reader.extract("w/x.bin", dest, as_name)
        assert reader.extract("w/x.bin", dest).read_bytes() == b"x" * 100
    assert not (tmp_path / "x.bin").exists()
    assert not (tmp_path / "abs.bin").exists()
    assert not (tmp_path / "elsewhere").exists()


def test_extract_checks_record_in_the_same_pass(tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path / "w-1.0-py3-none-any.whl",
        {"w/x.bin": b"x" * 100},
        record={"w/x.bin": b"y" * 100},
    )
    with WheelReader(wheel) as reader, pytest.raises(UnsafeInput, match="hash in RECORD"):
        reader.extract("w/x.bin", tmp_path)
    assert not (tmp_path / "w" / "x.bin").exists()  # nothing unchecked is left behind


def test_copy_member_checks_record_and_keeps_no_output(tmp_path: Path) -> None:
    wheel = _wheel(
        tmp_path / "w-1.0-py3-none-any.whl",
        {"w/a.py": b"A = 1\n" * 1000, "w/b.py": b"B = 2\n"},
        record={"w/b.py": b"B = 3\n"},
    )
    out = tmp_path / "out" / "w-1.0-py3-none-any.whl"

    def copy_both(reader: WheelReader) -> None:
        with WheelWriter(out, reader.dist_info) as writer:
            writer.copy_member(reader, "w/a.py")
            writer.copy_member(reader, "w/b.py")
            writer.commit()

    with WheelReader(wheel) as reader:
        with pytest.raises(UnsafeInput, match=r"'w/b\.py' does not match its hash in RECORD"):
            copy_both(reader)
        assert reader.verified["w/a.py"].startswith("sha256=")
    assert not list(out.parent.iterdir())


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ("drop-row", "is not listed in RECORD"),
        ("extra-row", "is listed in RECORD but not in the wheel"),
        ("md5", "has the hash"),
        ("bad-size", "cannot be read"),
    ],
)
def test_record_must_describe_the_files(tmp_path: Path, change: str, why: str) -> None:
    path = _wheel(tmp_path / "w-1.0-py3-none-any.whl", {"w/a.py": b"A = 1\n"})
    with zipfile.ZipFile(path) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    rec = "w-1.0.dist-info/RECORD"
    lines = files[rec].decode().splitlines(keepends=True)
    if change == "drop-row":
        lines = [ln for ln in lines if not ln.startswith("w/a.py,")]
    elif change == "extra-row":
        lines.insert(0, "w/gone.py,sha256=AAAA,1\n")
    elif change == "md5":
        lines = ["w/a.py,md5=AAAA,6\n" if ln.startswith("w/a.py,") else ln for ln in lines]
    else:
        lines = [ln.replace(",6\n", ",six\n") for ln in lines]
    files[rec] = "".join(lines).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for n, data in files.items():
            zf.writestr(n, data)
    with pytest.raises(UnsafeInput, match=why):
        WheelReader(path)
