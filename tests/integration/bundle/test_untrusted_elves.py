"""ELF members that lie (issue 30): a ``.rodata`` that covers half a gigabyte of the (inflated)
member, compressed offload bundles that decompress to half a gigabyte from a few kB of wheel,
a ``CCOB`` marker with no room for its header at the very end of the file, an ELF header with
nothing in it. Bounded memory and time, one line, a documented exit code; never a traceback.

The libraries are gcc's, edited here (a section added with objcopy, a section header patched);
the bombs are streamed into the wheel, so the test never holds them.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import zstandard

from tests.conftest import REPO

from .helpers import cc_shared, device_code, make_bundle, make_wheel
from .runs import PEAK_MB, one_error, peak_run
from .wheelcraft import streamed_wheel

pytestmark = pytest.mark.slow

#: bytes a bomb inflates to
BOMB = 512 << 20
HOST = "host-x86_64-unknown-linux-gnu-"
HIP = "hipv4-amdgcn-amd-amdhsa--"


@pytest.fixture(scope="module")
def base_so(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cc_shared(
        tmp_path_factory.mktemp("elf") / "libx.so",
        'const char *name(void){return "libamdhip64.so";}\nint x(void){return 1;}\n',
    )


def _section_header(data: bytes, name: str) -> int:
    """Where section ``name``'s header lies in the (64-bit) ELF file ``data``."""
    from io import BytesIO

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(BytesIO(data))
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == name)
    return int(elf["e_shoff"]) + index * int(elf["e_shentsize"])


def _with_section(base: Path, blob: bytes, out: Path) -> bytes:
    (out.parent / "blob").write_bytes(blob)
    cmd = ["objcopy", "--add-section", f".hip_fatbin={out.parent / 'blob'}", str(base), str(out)]
    subprocess.run(cmd, check=True)
    return out.read_bytes()


def _chunks(head: bytes, zeros: int) -> Iterator[bytes]:
    yield head
    block = bytes(1 << 20)
    for _ in range(zeros // len(block)):
        yield block


def _packed(method: str, parts: Iterable[bytes]) -> bytes:
    comp = zlib.compressobj(9) if method == "zlib" else zstandard.ZstdCompressor().compressobj()
    return b"".join(comp.compress(p) for p in parts) + comp.flush()


def _bomb_ccob(method: str) -> bytes:
    """A v3 compressed bundle, honest in its sizes, whose gfx1030 entry is BOMB zeros."""
    head = make_bundle([(HOST, b""), (HIP + "gfx90a", device_code(1)), (HIP + "gfx1030", b"")])
    # the gfx1030 entry: BOMB bytes after the gfx90a code (its size field patched)
    table = bytearray(head)
    at = len(b"__CLANG_OFFLOAD_BUNDLE__") + 8 + 24 + len(HOST) + 24 + len(HIP + "gfx90a")
    struct.pack_into("<QQ", table, at, len(head), BOMB)
    raw = len(head) + BOMB
    payload = _packed(method, _chunks(bytes(table), BOMB))
    total = 32 + len(payload)
    fields = struct.pack("<4sHHQQ", b"CCOB", 3, 0 if method == "zlib" else 1, total, raw)
    return fields + b"\0" * 8 + payload


@pytest.mark.parametrize("method", ["zlib", "zstd"])
def test_compressed_bundle_bomb_is_pruned_in_bounded_memory(
    rocm_tree: Path, tmp_path: Path, base_so: Path, method: str
) -> None:
    """512 MB of zeros in a dropped entry: inspect reads the table, bundle --arch gfx90a prunes
    the entry away, each streaming it (the old pruner held it whole, and sliced it once per
    MB read: quadratic, deaf to Ctrl-C)."""
    so = _with_section(base_so, _bomb_ccob(method), tmp_path / "bomb.so")
    wheel = streamed_wheel(tmp_path / "dist", {"bomb/_x.so": [so]})
    assert wheel.stat().st_size < 4 << 20
    out = tmp_path / "out"
    bundle = ["bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(out)]
    for args in (["inspect", str(wheel)], [*bundle, "--arch", "gfx90a", "-z", "1"]):
        start = time.monotonic()
        res, peak = peak_run(args, tmp_path)
        assert res.returncode == 0, (args, res.stdout, res.stderr)
        assert peak < PEAK_MB, (args, peak)
        assert time.monotonic() - start < 60, args  # a guard, not a benchmark
    assert [w.name for w in out.glob("*.whl")]


def test_rodata_that_covers_the_file_is_scanned_in_bounded_memory(
    rocm_tree: Path, tmp_path: Path, base_so: Path
) -> None:
    """A library whose ``.rodata`` header claims 512 MB of zeros after its own bytes: the scan
    for library names (done for every ELF member read in place) goes through it in steps."""
    data = bytearray(base_so.read_bytes())
    at = _section_header(bytes(data), ".rodata")
    struct.pack_into("<QQ", data, at + 24, len(data), BOMB)
    wheel = streamed_wheel(tmp_path / "dist", {"bomb/_x.so": _chunks(bytes(data), BOMB)})
    assert wheel.stat().st_size < 4 << 20
    bundle = ["bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(tmp_path)]
    for args in (["inspect", str(wheel)], [*bundle, "--dry-run"]):
        res, peak = peak_run(args, tmp_path)
        assert res.returncode == 0, (args, res.stdout, res.stderr)
        assert peak < PEAK_MB, (args, peak)


def test_ccob_marker_at_the_end_of_the_file(rocm_tree: Path, tmp_path: Path, base_so: Path) -> None:
    """``CCOB`` as the last four bytes of the file, its ``.hip_fatbin`` pointing at them: a
    truncated header, exit 10 in one line (was a struct.error traceback)."""
    data = bytearray(_with_section(base_so, b"\0" * 16, tmp_path / "f.so"))
    at = _section_header(bytes(data), ".hip_fatbin")
    struct.pack_into("<QQ", data, at + 24, len(data), 4)
    data += b"CCOB"
    wheel = streamed_wheel(tmp_path / "dist", {"bomb/_x.so": [bytes(data)]})
    out = tmp_path / "out"
    bundle = ["bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(out)]
    for args in (["inspect", str(wheel)], [*bundle, "--arch", "gfx90a"]):
        res, _peak = peak_run(args, tmp_path)
        assert res.returncode == 10, (args, res.stdout, res.stderr)
        one_error(res, "_x.so", "truncated compressed bundle header")
    assert not out.exists() or not list(out.iterdir())


def test_elf_header_with_nothing_in_it_is_no_host_library(
    rocm_tree: Path, tmp_path: Path, base_so: Path
) -> None:
    """A valid ident, the rest zeros: no type, no machine. Not a host library: inspect lists no
    library, bundle copies it as it is (it ran patchelf on it: exit 4)."""
    fake = base_so.read_bytes()[:16] + bytes(4096)
    wheel = streamed_wheel(tmp_path / "dist", {"bomb/_x.so": [fake]})
    res, _peak = peak_run(["--json", "inspect", str(wheel)], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "bomb/_x.so" not in res.stdout
    out = tmp_path / "out"
    res, _peak = peak_run(
        ["bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(out)], tmp_path
    )
    assert res.returncode == 0, (res.stdout, res.stderr)
    import zipfile

    (written,) = out.glob("*.whl")
    with zipfile.ZipFile(written) as zf:
        assert zf.read("bomb/_x.so") == fake


def test_inspect_escapes_what_the_wheel_says(tmp_path: Path) -> None:
    """A SONAME, NEEDED and RPATH holding terminal escape sequences (a title change, a screen
    clear) are shown escaped by inspect's text report, never sent to the terminal raw."""
    evil = "\x1b]0;owned\x07\x1b[2J"
    dep = cc_shared(tmp_path / "dep" / f"libdep{evil}.so", "int d(void){return 2;}\n")
    so = cc_shared(
        tmp_path / "build" / "_x.so",
        "int d(void);\nint x(void){return d();}\n",
        soname=f"lib{evil}x.so",
        libs=[dep],
        rpath=f"$ORIGIN/{evil}",
    )
    wheel = streamed_wheel(tmp_path / "dist", {"bomb/_x.so": [so.read_bytes()]})
    res, _peak = peak_run(["inspect", str(wheel)], tmp_path)
    assert res.returncode == 0, res.stderr
    assert "\x1b" not in res.stdout, repr(res.stdout)
    assert "\x07" not in res.stdout, repr(res.stdout)
    assert "\\x1b]0;owned\\x07" in res.stdout, res.stdout


def _lying_ccob() -> bytes:
    """A zstd v3 bundle whose header says it decompresses to 100 bytes (it holds more)."""
    inner = make_bundle([(HOST, b""), (HIP + "gfx90a", device_code(1))])
    payload = zstandard.ZstdCompressor().compress(inner)
    fields = struct.pack("<4sHHQQ", b"CCOB", 3, 1, 32 + len(payload), 100)
    return fields + b"\0" * 8 + payload


@pytest.mark.parametrize("kind", ["elf", "dll"])
def test_ccob_whose_raw_size_lies_is_exit_10_everywhere(
    rocm_tree: Path, tmp_path: Path, base_so: Path, kind: str
) -> None:
    """inspect took the lie (exit 0) and read the table past it; in a DLL's ``.hip_fat`` a
    damaged bundle was a traceback. Now both commands say exit 10 in one line, in the plan."""
    if kind == "elf":
        member, tag = "bomb/_x.so", "cp311-cp311-linux_x86_64"
        data = _with_section(base_so, _lying_ccob(), tmp_path / "lie.so")
    else:
        mingw = shutil.which("x86_64-w64-mingw32-gcc")
        if mingw is None:
            pytest.skip("needs mingw-w64 (dev/apt-packages-test.txt)")
        member, tag = "bomb/kern.dll", "cp311-cp311-win_amd64"
        array = ",".join(str(b) for b in _lying_ccob())
        src = tmp_path / "kern.c"
        src.write_text(
            f'__attribute__((section(".hip_fat"), used)) const unsigned char f[] = {{{array}}};\n'
            "__declspec(dllexport) int k(void) { return 1; }\n"
        )
        dll = tmp_path / "kern.dll"
        subprocess.run([mingw, "-shared", "-O1", "-o", str(dll), str(src)], check=True)
        data = dll.read_bytes()
    wheel = make_wheel(tmp_path / "dist", "bomb", "1.0", {member: data}, tag=tag)
    out = tmp_path / "out"
    bundle = ["bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(out)]
    for args in (["inspect", str(wheel)], [*bundle, "--arch", "gfx90a"]):
        res, _peak = peak_run(args, tmp_path)
        assert res.returncode == 10, (args, res.stdout, res.stderr)
        one_error(res, Path(member).name, "damaged offload bundle", "100 bytes")
    assert not out.exists() or not list(out.iterdir())


def _zlib_zeros_after(head: bytes, mib: int) -> bytes:
    """zlib data of ``head`` and ``mib`` MiB of zeros, made in a blink: after a full flush the
    deflater starts afresh, so each MiB of zeros compresses to the same bytes (repeated here),
    then an empty final block and the Adler-32 of it all."""
    comp = zlib.compressobj(9)
    chunk = bytes(1 << 20)
    first = comp.compress(head) + comp.flush(zlib.Z_FULL_FLUSH)
    again = comp.compress(chunk) + comp.flush(zlib.Z_FULL_FLUSH)
    adler = zlib.adler32(head)
    for _ in range(mib):
        adler = zlib.adler32(chunk, adler)
    return first + again * mib + b"\x03\x00" + struct.pack(">I", adler)


def test_sigterm_stops_the_pruning_of_a_bomb(
    rocm_tree: Path, tmp_path: Path, base_so: Path
) -> None:
    """A 3.5 GiB zlib bomb being pruned on a writer thread: SIGTERM ends the run (exit 130)
    at once, not when the thread has decompressed it all (the old pruner took minutes and
    ignored the signal meanwhile)."""
    head = make_bundle([(HOST, b""), (HIP + "gfx90a", device_code(1)), (HIP + "gfx1030", b"")])
    table = bytearray(head)
    at = len(b"__CLANG_OFFLOAD_BUNDLE__") + 8 + 24 + len(HOST) + 24 + len(HIP + "gfx90a")
    zeros = 3584 << 20
    struct.pack_into("<QQ", table, at, len(head), zeros)
    payload = _zlib_zeros_after(bytes(table), zeros >> 20)
    ccob = struct.pack("<4sHHQQ", b"CCOB", 3, 0, 32 + len(payload), len(head) + zeros)
    so = _with_section(base_so, ccob + b"\0" * 8 + payload, tmp_path / "bomb.so")
    wheel = streamed_wheel(tmp_path / "dist", {"bomb/_x.so": [so]})
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ROCM_BUILD_")}
    env.update(PYTHONPATH=str(REPO), ROCM_BUILD_BUNDLE_DEFLATE_CACHE="none")
    args = ["bundle", str(wheel), "--rocm", str(rocm_tree), "--output-dir", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rocm_build", *args, "--arch", "gfx90a", "-z", "1"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (out.is_dir() and any(out.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.05)  # the write has begun: the pruning comes with it
        time.sleep(0.5)
        assert proc.poll() is None, "the bundle ended before the signal"
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert time.monotonic() - sent < 30, err  # a guard, not a benchmark
    assert "interrupted (SIGTERM)" in err
    assert not list(out.glob("*.whl"))
