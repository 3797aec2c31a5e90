"""Wheels whose ZIP structure lies (issue 30): members that inflate far past any real METADATA or
RECORD, compression methods or encryption no wheel uses, a local header that names another file
than the zip directory, and a file that is no zip at all. Every command that reads a wheel gives
the same verdict in one line (exit 15), in bounded memory, with nothing written.

The ZIP files are made here with ``zipfile`` and then patched where a real tool would not write
them; the bombs are streamed into the archive, so the test itself never holds them.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import struct
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from tests.conftest import REPO

from .helpers import cc_shared
from .test_unsafe_wheels import SMALL, TAG, raw_wheel

pytestmark = pytest.mark.slow

#: bytes a bomb inflates to: far more than the reader may hold, a few hundred kB in the wheel
BOMB = 768 << 20
#: what a run that refuses a bomb unread may peak at (a bundle's own imports: about 80 MB)
PEAK_MB = 250


def peak_run(args: Sequence[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """``rocm-build ARGS`` and the peak resident memory (MB) of its process: run by a Python of
    its own, so that no other child of the test counts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCM_BUILD_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(SMALL)
    script = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run(sys.argv[1:])\n"
        "sys.stderr.write(f'\\nPEAK {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}\\n')\n"
        "sys.exit(r.returncode)\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", script, sys.executable, "-m", "rocm_build", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    peak = next(ln for ln in res.stderr.splitlines() if ln.startswith("PEAK "))
    res.stderr = res.stderr.replace(f"\n{peak}\n", "")
    return res, int(peak.split()[1]) / 1024


def one_error(res: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if "rocm-build: error:" in ln]
    assert len(lines) == 1, res.stderr
    for needle in needles:
        assert needle in lines[0], res.stderr
    return lines[0]


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def streamed_wheel(
    out_dir: Path, blocks: dict[str, Iterable[bytes]], *, name: str = "bomb"
) -> Path:
    """A wheel with METADATA, WHEEL and RECORD whose members' bytes come from ``blocks`` (any
    of them may be replaced there: RECORD's blocks are written after the rows of the others)."""
    dist = f"{name}-1.0.dist-info"
    defaults: dict[str, Iterable[bytes]] = {
        f"{name}/__init__.py": [b""],
        f"{dist}/METADATA": [f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode()],
        f"{dist}/WHEEL": [f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {TAG}\n".encode()],
    }
    members = {**defaults, **{k: v for k, v in blocks.items() if not k.endswith("RECORD")}}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}-1.0-{TAG}.whl"
    rows = io.StringIO()
    writer = csv.writer(rows, lineterminator="\n")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for arc, parts in members.items():
            digest, size = hashlib.sha256(), 0
            info = zipfile.ZipInfo(arc, (2024, 1, 2, 3, 4, 6))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o100644 << 16
            with zf.open(info, "w", force_zip64=True) as fh:
                for part in parts:
                    digest.update(part)
                    size += len(part)
                    fh.write(part)
            writer.writerow([arc, _digest(digest.digest()), size])
        writer.writerow([f"{dist}/RECORD", "", ""])
        info = zipfile.ZipInfo(f"{dist}/RECORD", (2024, 1, 2, 3, 4, 6))
        info.compress_type = zipfile.ZIP_DEFLATED
        with zf.open(info, "w", force_zip64=True) as fh:
            fh.write(rows.getvalue().encode())
            for part in blocks.get(f"{dist}/RECORD", ()):
                fh.write(part)
    return path


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
