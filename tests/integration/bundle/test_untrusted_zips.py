"""Wheels whose ZIP structure lies (issue 30): members that inflate far past any real METADATA or
RECORD, compression methods or encryption no wheel uses, a local header that names another file
than the zip directory, and a file that is no zip at all. Every command that reads a wheel gives
the same verdict in one line (exit 15), in bounded memory, with nothing written.

The ZIP files are made here with ``zipfile`` and then patched where a real tool would not write
them; the bombs are streamed into the archive, so the test itself never holds them.
"""

from __future__ import annotations

import os
import struct
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest

from .helpers import cc_shared
from .runs import PEAK_MB, SMALL, one_error, peak_run
from .wheelcraft import raw_wheel, streamed_wheel

pytestmark = pytest.mark.slow

#: bytes a bomb inflates to: far more than the reader may hold, a few hundred kB in the wheel
BOMB = 768 << 20


def _repeat(line: bytes, total: int) -> Iterable[bytes]:
    block = line * ((1 << 20) // len(line))
    for _ in range(total // len(block)):
        yield block


@pytest.mark.parametrize("member", ["RECORD", "METADATA"])
def test_member_that_inflates_past_its_limit_is_refused_unread(
    rocm_tree: Path, tmp_path: Path, member: str
) -> None:
    """A RECORD of 768 MB (blank lines, which a CSV reader skips) or a METADATA of 768 MB
    (classifiers): refused from the zip directory's size, before a byte is inflated."""
    line = b"\n" if member == "RECORD" else b"Classifier: Topic :: Bomb\n"
    wheel = streamed_wheel(tmp_path / "dist", {f"bomb-1.0.dist-info/{member}": _repeat(line, BOMB)})
    assert wheel.stat().st_size < 8 << 20
    out = tmp_path / "out"
    bundle = ["bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(out)]
    for args in (["inspect", str(wheel)], bundle):
        res, peak = peak_run(args, tmp_path)
        assert res.returncode == 15, (args, res.stdout, res.stderr)
        one_error(res, f"bomb-1.0.dist-info/{member}", "MiB")
        assert peak < PEAK_MB, (args, peak)
        assert not out.exists() or not list(out.iterdir())


def _patch_headers(
    path: Path, name: str, *, local: dict[int, bytes], central: dict[int, bytes]
) -> None:
    """Overwrite bytes of ``name``'s local header and its zip directory entry (offsets within
    each record)."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        at = zf.getinfo(name).header_offset
    for off, raw in local.items():
        data[at + off : at + off + len(raw)] = raw
    pos = data.find(b"PK\x01\x02")
    while pos >= 0:
        size = struct.unpack_from("<H", data, pos + 28)[0]
        if bytes(data[pos + 46 : pos + 46 + size]) == name.encode():
            for off, raw in central.items():
                data[pos + off : pos + off + len(raw)] = raw
            break
        pos = data.find(b"PK\x01\x02", pos + 46)
    else:
        raise AssertionError(f"{name} not in the zip directory")
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def elf_so(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    lib = cc_shared(tmp_path_factory.mktemp("elf") / "libx.so", "int x(void){return 1;}\n")
    return lib.read_bytes()


def _commands(wheel: Path, rocm: Path, out: Path) -> list[list[str]]:
    bundle = ["bundle", str(wheel), "--rocm", str(rocm), "--output-dir", str(out), "-z", "1"]
    return [bundle, [*bundle, "--dry-run"], ["inspect", str(wheel)], ["smoke", str(wheel)]]


@pytest.mark.parametrize(
    ("case", "shown"),
    [
        ("method 99", "compressed with method 99"),
        ("encrypted", "is encrypted"),
        ("local name", "is named 'evil/_y.so' in its local header"),
    ],
)
def test_zip_member_others_would_read_differently_is_refused_by_every_command(
    run_cli, rocm_tree: Path, tmp_path: Path, elf_so: bytes, case: str, shown: str
) -> None:  # type: ignore[no-untyped-def]
    """One reader, one verdict: bundle (which copies members raw and wrote a clean-looking
    wheel from a member whose local header names another file) refuses what inspect refuses."""
    wheel = raw_wheel(
        tmp_path / "dist",
        [("evil/__init__.py", b"", 0o100644), ("evil/_x.so", elf_so, 0o100755)],
    )
    if case == "method 99":
        _patch_headers(wheel, "evil/_x.so", local={8: b"\x63\x00"}, central={10: b"\x63\x00"})
    elif case == "encrypted":
        _patch_headers(wheel, "evil/_x.so", local={6: b"\x01\x00"}, central={8: b"\x01\x00"})
    else:
        _patch_headers(wheel, "evil/_x.so", local={30: b"evil/_y.so"}, central={})
    out = tmp_path / "out"
    for args in _commands(wheel, rocm_tree, out):
        res = run_cli(args, cwd=tmp_path, env=SMALL)
        assert res.returncode == 15, (args, res.stdout, res.stderr)
        one_error(res, "evil/_x.so", shown)
        assert not out.exists() or not list(out.iterdir()), args


def test_file_that_is_no_zip_gets_one_verdict(run_cli, rocm_tree: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """bundle and inspect said exit 10, smoke exit 2 with the message twice: now all say 15,
    once."""
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    wheel.write_bytes(b"not a zip at all\n")
    for args in _commands(wheel, rocm_tree, tmp_path / "out"):
        res = run_cli(args, cwd=tmp_path, env=SMALL)
        assert res.returncode == 15, (args, res.stdout, res.stderr)
        line = one_error(res, "not a wheel")
        assert line.count(wheel.name) == 1, line


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_wheel_name_on_a_fifo_or_device_is_refused_unopened(
    run_cli, rocm_tree: Path, tmp_path: Path, kind: str
) -> None:  # type: ignore[no-untyped-def]
    """A FIFO named like a wheel hung bundle and inspect (zipfile waited for a writer), a link
    to /dev/zero ran them out of memory, smoke called either "not found": every command now
    refuses it in one line (exit 15), without opening it."""
    wheel = tmp_path / "fake-1.0-py3-none-any.whl"
    if kind == "fifo":
        os.mkfifo(wheel)
    else:
        wheel.symlink_to("/dev/zero")
    for args in _commands(wheel, rocm_tree, tmp_path / "out"):
        res = run_cli(args, cwd=tmp_path, env=SMALL, timeout=120)
        assert res.returncode == 15, (args, res.stdout, res.stderr)
        line = one_error(res, "not a wheel file", "a FIFO" if kind == "fifo" else "a device")
        assert line.count(wheel.name) == 1, line
