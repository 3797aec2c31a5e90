"""rocm-build sizes its workers by the CPUs it may use, not by the machine's: under ``taskset -c 0``
and inside a real cgroup with a CPU quota of half a CPU it sees one CPU (doctor's report, the
wheel writer's deflate threads)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

WRITER_WORKERS = (
    "import sys\nfrom pathlib import Path\nfrom rocm_build.wheel.wheelfile import WheelWriter\n"
    "w = WheelWriter(Path(sys.argv[1]) / 'probe-1.0-py3-none-any.whl', 'probe-1.0.dist-info')\n"
    "print(w.workers)\nw.__exit__(RuntimeError, None, None)\n"
)


def _seen(prefix: list[str], tmp_path: Path) -> tuple[int, int]:
    """(doctor's cores, the wheel writer's deflate threads) of rocm-build started by ``prefix``."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    doctor = subprocess.run(
        [*prefix, sys.executable, "-m", "rocm_build", "--json", "doctor"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert doctor.stdout, doctor.stderr  # it reports (and exits 8: no tree here)
    writer = subprocess.run(
        [*prefix, sys.executable, "-c", WRITER_WORKERS, str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(doctor.stdout)["machine"]["cores"], int(writer.stdout)


def test_taskset_one_cpu(tmp_path: Path) -> None:
    taskset = shutil.which("taskset")
    if taskset is None:
        pytest.skip("taskset is not installed: install util-linux")
    assert _seen([taskset, "-c", "0"], tmp_path) == (1, 1)


@pytest.fixture
def half_cpu_cgroup() -> Iterator[Path]:
    """A new cgroup limited to half a CPU (v2 ``cpu.max``, else v1 CFS), removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root: run the tests as root")
    v2, v1 = Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/cpu")
    control = v2 / "cgroup.subtree_control"  # cgroup v2: children of the mount get cpu.max
    if control.exists() and "cpu" in control.read_text().split():
        folder, limit = v2 / f"rb-test-{os.getpid()}", {"cpu.max": "50000 100000"}
    elif (v1 / "cpu.cfs_quota_us").exists():
        folder, limit = v1 / f"rb-test-{os.getpid()}", {"cpu.cfs_quota_us": "50000"}
    else:
        pytest.skip("no cgroup with the cpu controller at /sys/fs/cgroup (v2) or its cpu/ (v1)")
    try:
        folder.mkdir()
    except OSError as err:
        pytest.skip(f"cannot make a cgroup ({err}): mount the cgroup file system writable")
    try:
        for name, value in limit.items():
            (folder / name).write_text(value)
        yield folder
    finally:
        folder.rmdir()  # its processes have ended


def test_cgroup_quota_of_half_a_cpu(half_cpu_cgroup: Path, tmp_path: Path) -> None:
    enter = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(half_cpu_cgroup)]
    assert _seen(enter, tmp_path) == (1, 1)
