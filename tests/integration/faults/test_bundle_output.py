"""The output side of bundle: two runs on one wheel (the lock), and an output folder that is a
file, is read-only, or fills up while the wheel is written; inspect with a full TMPDIR (it needs
no room there)."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Bundler, check_wheel, strays

pytestmark = pytest.mark.slow


class Stepper:
    """Runs a process step by step through its fault points: ``RB_FAULT_LOG`` is a FIFO, so the
    process blocks at each point until the test reads the line it writes there."""

    def __init__(self, fifo: Path) -> None:
        self.fifo = fifo
        os.mkfifo(fifo)
        self.keep: int | None = None

    def until(self, name: str, timeout: float = 120) -> None:
        """Let the process run until it reaches ``name``; it then waits at its next point."""
        found = threading.Event()

        def read() -> None:
            while not found.is_set():
                with self.fifo.open(encoding="utf-8") as fh:  # blocks until a point opens it
                    if name in fh.read().split():
                        found.set()

        threading.Thread(target=read, daemon=True).start()
        assert found.wait(timeout), f"the process never reached {name}"

    def release(self) -> None:
        """Let the process run to its end (a reader that stays keeps the FIFO from blocking)."""
        self.keep = os.open(self.fifo, os.O_RDONLY | os.O_NONBLOCK)

    def close(self) -> None:
        if self.keep is not None:
            os.close(self.keep)


def test_second_bundle_of_the_same_wheel_waits_or_stops(bundler: Bundler, tmp_path: Path) -> None:
    stepper = Stepper(tmp_path / "points")
    first = bundler.start(RB_FAULT_LOG=str(stepper.fifo))
    second: subprocess.Popen[str] | None = None
    try:
        # The first run holds the wheel's lock and is writing the wheel's temporary file.
        stepper.until("bundle.writer-open")
        [partial] = [n for n in strays(bundler.out) if ".whl.rocm-build-" in n]
        assert f".rocm-build-{first.pid}-" in partial

        stopped = bundler.run("--no-wait")
        assert stopped.returncode == 13, stopped.stderr
        assert f"in use by rocm-build pid {first.pid}" in stopped.stderr
        assert "Traceback" not in stopped.stderr
        # The second run's clean-up did not touch the live run's temporary file.
        assert partial in strays(bundler.out)

        second = bundler.start()
        assert second.stderr is not None
        waited = second.stderr.readline()
        assert "waiting for the wheel" in waited
        assert f"pid {first.pid}" in waited
        assert second.poll() is None
        stepper.release()
        first.communicate(timeout=120)
        assert first.returncode == 0
        out, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
        assert "up to date" in out  # the first run's output, re-checked under the lock
    finally:
        stepper.close()
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.communicate()
    [wheel] = sorted(bundler.out.glob("*.whl"))
    check_wheel(wheel)
    assert strays(bundler.out) == []


def test_output_folder_that_is_a_file(bundler: Bundler) -> None:
    bundler.out.write_text("not a folder\n")
    res = bundler.run()
    assert res.returncode == 14, res.stderr
    assert "is a file, not a folder" in res.stderr
    assert "Traceback" not in res.stderr


def _mount(args: list[str]) -> None:
    try:
        subprocess.run(["mount", *args], check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot mount here (needs root and mount rights): {exc}")


@pytest.fixture
def mounts() -> Iterator[list[Path]]:
    mounted: list[Path] = []
    yield mounted
    for point in reversed(mounted):
        subprocess.run(["umount", str(point)], check=False)


def test_read_only_output_folder(bundler: Bundler, tmp_path: Path, mounts: list[Path]) -> None:
    bundler.out.mkdir()
    _mount(["--bind", "-o", "ro", str(bundler.out), str(bundler.out)])
    mounts.append(bundler.out)
    res = bundler.run()
    assert res.returncode == 14, res.stderr
    assert f"cannot write to {bundler.out} (Read-only file system)" in res.stderr
    assert "Traceback" not in res.stderr


def test_disk_full_keeps_the_previous_wheel(
    bundler: Bundler, tmp_path: Path, mounts: list[Path]
) -> None:
    # The bundled wheel is about 8 MB; the folder holds 3 MB and a previous (small) wheel.
    bundler.out.mkdir()
    _mount(["-t", "tmpfs", "-o", "size=3m", "tmpfs", str(bundler.out)])
    mounts.append(bundler.out)
    name = "hipext-1.0.0-cp311-cp311-manylinux_2_35_x86_64.whl"
    previous = bundler.out / name
    shutil.copyfile(bundler.wheel, previous)
    before = previous.read_bytes()

    res = bundler.run()
    assert res.returncode == 14, res.stderr
    assert "Traceback" not in res.stderr
    line = " ".join(res.stderr.split())
    assert f"no space left in {bundler.out} while writing {name}" in line
    assert " MB needed, " in line
    assert " MB free)" in line
    assert previous.read_bytes() == before
    check_wheel(previous)
    assert strays(bundler.out) == []


def test_inspect_needs_no_room_in_the_temporary_folder(
    bundler: Bundler, tmp_path: Path, mounts: list[Path]
) -> None:
    # inspect reads each library in the wheel (no copy unpacked): a TMPDIR with 8 kB left (room
    # for Python's check that TMPDIR is writable, else it would fall back to /tmp) is enough
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    _mount(["-t", "tmpfs", "-o", "size=1m", "tmpfs", str(scratch)])
    mounts.append(scratch)
    free = shutil.disk_usage(scratch).free
    (scratch / "filler").write_bytes(b"\0" * (free - 8192))
    res = subprocess.run(
        [*bundler.argv()[:3], "--json", "inspect", str(bundler.wheel)],
        env=bundler.env(TMPDIR=str(scratch)), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "hipext/_kern.so" in res.stdout  # its ELF facts were read
    assert os.listdir(scratch) == ["filler"]


KINDS = (".whl.rocm-build-", ".whl.scratch.rocm-build-", ".whl.extract.rocm-build-")


def _killed_inside_the_write(bundler: Bundler) -> tuple[subprocess.Popen[str], list[str]]:
    """A bundle that SIGKILLs itself while it writes the wheel (a library member half way),
    left dead but not reaped: a zombie, as a killed process is until its parent waits for it.
    Returns it and its temporary files and folders (one of each kind)."""
    first = bundler.start(RB_FAULT_POINT="bundle.library")
    os.waitid(os.P_PID, first.pid, os.WEXITED | os.WNOWAIT)
    left = strays(bundler.out)
    for kind in KINDS:
        assert [n for n in left if f"{kind}{first.pid}-" in n], (kind, left)
    return first, left


def test_next_run_at_once_removes_a_zombie_writers_temporaries(bundler: Bundler) -> None:
    first, _ = _killed_inside_the_write(bundler)
    try:
        again = bundler.run()  # at once: the killed run is still a process (a zombie)
        assert again.returncode == 0, again.stderr
        assert strays(bundler.out) == []
    finally:
        first.communicate()
    [wheel] = sorted(bundler.out.glob("*.whl"))
    check_wheel(wheel)


def test_temporaries_whose_lock_goes_during_the_next_run_go_at_its_end(
    bundler: Bundler, tmp_path: Path
) -> None:
    first, left = _killed_inside_the_write(bundler)
    first.communicate()
    # The killed run is still going away when the next one starts: its locks are held (here by
    # this test, for it) and are released only while the next run works.
    held = [os.open(bundler.out / name, os.O_RDONLY) for name in left]
    for fd in held:
        fcntl.flock(fd, fcntl.LOCK_EX)
    stepper = Stepper(tmp_path / "points")
    second = bundler.start(RB_FAULT_LOG=str(stepper.fifo))
    try:
        stepper.until("bundle.swept")
        assert set(left) <= set(strays(bundler.out))  # locked: not swept at the start
        for fd in held:
            os.close(fd)
        held.clear()
        stepper.release()
        _, err = second.communicate(timeout=120)
        assert second.returncode == 0, err
    finally:
        stepper.close()
        for fd in held:
            os.close(fd)
        if second.poll() is None:
            second.kill()
            second.communicate()
    assert strays(bundler.out) == []
    [wheel] = sorted(bundler.out.glob("*.whl"))
    check_wheel(wheel)
