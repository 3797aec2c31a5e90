"""memberview.py: a wheel member read where it is, as a buffer and a stream, with its bytes
checked against RECORD on the way; and the ELF facts read through it equal those of the file."""

from __future__ import annotations

import random
import zipfile
from pathlib import Path

import pytest
import zstandard

from rocm_build.binary import elf
from rocm_build.wheel import memberview
from rocm_build.wheel.memberview import MemberView
from rocm_build.wheel.wheelread import UnsafeInput, WheelReader
from tests.support.wheels import make_wheel

ELF = next(Path(zstandard.__file__).parent.glob("backend_c*.so"))


def _libc() -> Path:
    """This process's C library (it names other libraries in its .rodata: libgcc_s.so.1)."""
    maps = Path("/proc/self/maps").read_text().split()
    return Path(next(w for w in maps if Path(w).name.startswith("libc.so")))


def _data(size: int) -> bytes:
    rng = random.Random(size)
    words = [rng.randbytes(rng.randint(1, 12)) for _ in range(300)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words)
    return bytes(out[:size])


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of 4 KiB, 5 kept: every access pattern below drops blocks and restarts."""
    monkeypatch.setattr(memberview, "BLOCK", 4096)
    monkeypatch.setattr(memberview, "KEEP", 5)
    monkeypatch.setattr(memberview, "_STEP", 10_000)
    monkeypatch.setattr(memberview, "CHECKPOINT", 30_000)
    monkeypatch.setattr(memberview, "_IN", 3_000)


def _stored(wheel: Path) -> Path:
    """The same wheel with its members stored, not deflated."""
    out = wheel.with_name("stored") / wheel.name
    out.parent.mkdir()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return out


@pytest.mark.parametrize("stored", [False, True], ids=["deflated", "stored"])
def test_slices_finds_and_reads_match_the_bytes(
    tmp_path: Path, small_blocks: None, stored: bool
) -> None:
    data = _data(200_000)
    wheel = make_wheel(tmp_path / "x-1.0-py3-none-any.whl", {"x/blob.bin": data})
    wheel = _stored(wheel) if stored else wheel
    rng = random.Random(7)
    with WheelReader(wheel) as reader, MemberView(reader, "x/blob.bin") as view:
        assert len(view) == len(data)
        for _ in range(300):  # forwards, backwards, across blocks, past the end
            a = rng.randrange(len(data) + 10)
            b = a + rng.randrange(20_000)
            assert view[a:b] == data[a:b]
            assert view[a] == data[a] if a < len(data) else True
        for start in (0, 4090, 77_777, 150_001):
            needle = data[start + 4000 : start + 4010]  # across a block boundary
            assert view.find(needle, start) == data.find(needle, start)
            assert view.find(needle, start, start + 4005) == -1
        assert view.find(b"\xff" * 40) == data.find(b"\xff" * 40)
        view.seek(-100, 2)
        assert view.read() == data[-100:]
        view.seek(5)
        assert (view.read(10), view.tell()) == (data[5:15], 15)
        assert view[-1] == data[-1]
    with WheelReader(wheel) as reader:
        with MemberView(reader, "x/blob.bin") as view:
            assert view[90_000:90_010] == data[90_000:90_010]
        assert "x/blob.bin" in reader.verified  # checked on close, by a pass from the start


def test_a_read_behind_starts_from_the_saved_state_before_it(
    tmp_path: Path, small_blocks: None
) -> None:
    """Not from the member's start: the inflate's states are kept every CHECKPOINT bytes."""
    data = _data(300_000)
    wheel = make_wheel(tmp_path / "x-1.0-py3-none-any.whl", {"x/blob.bin": data})
    with WheelReader(wheel) as reader, MemberView(reader, "x/blob.bin") as view:
        assert view[-10:] == data[-10:]  # inflated to the end once
        saved = [p[0] for p in view._src._points]
        assert saved == sorted(saved)
        assert len(saved) >= 9
        inflated = []
        read = view._src.read
        view._src.read = lambda size: inflated.append(len(got := read(size))) or got  # type: ignore[method-assign]
        assert view[200_000:200_100] == data[200_000:200_100]
        assert 0 < sum(inflated) <= 30_000 + 4096  # from the state at 180,000, not from 0
        inflated.clear()
        assert view[10:20] == data[10:20]  # before the first saved state: from the start
        assert sum(inflated) == 4096


def test_a_member_that_does_not_match_record_is_refused(tmp_path: Path) -> None:
    data = _data(3_000_000)
    wheel = make_wheel(tmp_path / "x-1.0-py3-none-any.whl", {"x/blob.bin": data})
    spoiled = tmp_path / "spoiled" / wheel.name
    spoiled.parent.mkdir()
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(spoiled, "w") as out:
        for info in src.infolist():  # the member's bytes change, RECORD stays
            body = src.read(info)
            out.writestr(info, b"X" + body[1:] if info.filename == "x/blob.bin" else body)
    with WheelReader(spoiled) as reader:
        view = MemberView(reader, "x/blob.bin")
        assert view[1:10] == data[1:10]  # only the head read: the check finishes on close
        with pytest.raises(UnsafeInput, match="does not match its hash in RECORD"):
            view.close()
    with WheelReader(wheel) as reader, MemberView(reader, "x/blob.bin") as view:
        assert view[len(data) - 5 :] == data[-5:]
    with WheelReader(wheel) as reader:
        with MemberView(reader, "x/blob.bin") as view:
            view.read()
        assert "x/blob.bin" in reader.verified  # checked on the way, no second pass


@pytest.mark.parametrize("stored", [False, True], ids=["deflated", "stored"])
@pytest.mark.parametrize("library", [ELF, _libc()], ids=["extension", "libc"])
def test_elf_facts_through_a_view_are_the_files(
    library: Path, stored: bool, tmp_path: Path, small_blocks: None
) -> None:
    wheel = make_wheel(
        tmp_path / "x-1.0-cp311-cp311-linux_x86_64.whl", {"x/lib/_c.so": library.read_bytes()}
    )
    wheel = _stored(wheel) if stored else wheel  # read from its first byte on (block 0 first)
    on_disk = elf.read_elf(library)
    with WheelReader(wheel) as reader, MemberView(reader, "x/lib/_c.so") as view:
        in_wheel = elf.read_elf(view)
        assert elf.offload_bundles(view) == ()
    assert in_wheel.path == "x/lib/_c.so"
    assert in_wheel.needed == on_disk.needed
    assert in_wheel.version_needs == on_disk.version_needs
    assert (in_wheel.soname, in_wheel.rpath, in_wheel.machine) == (
        on_disk.soname,
        on_disk.rpath,
        on_disk.machine,
    )
    assert on_disk.so_strings is None  # from a file: strings_present asks the file
    assert in_wheel.so_strings is not None
    assert elf.strings_present(library, in_wheel.so_strings) == in_wheel.so_strings
    if library != ELF:
        assert "libgcc_s.so.1" in in_wheel.so_strings


@pytest.mark.parametrize("stored", [False, True], ids=["deflated", "stored"])
def test_a_wheel_swapped_on_disk_after_opening_is_not_read(tmp_path: Path, stored: bool) -> None:
    """The view reads the file the reader opened and checked, never the path again: a wheel
    renamed over it meanwhile (another run's output, or a planted file) is not what is read."""
    data = _data(100_000)
    wheel = make_wheel(tmp_path / "x-1.0-py3-none-any.whl", {"x/blob.bin": data})
    wheel = _stored(wheel) if stored else wheel
    (tmp_path / "o").mkdir()
    other = make_wheel(tmp_path / "o" / wheel.name, {"x/blob.bin": b"Y" * 100_000})
    with WheelReader(wheel) as reader:
        other.replace(wheel)
        with MemberView(reader, "x/blob.bin") as view:
            assert view[:10] == data[:10]
            assert view.read() == data
