"""The CPUs this process may use: cgroup v2 ``cpu.max`` and v1 CFS quotas read from real files laid
out as the kernel lays them out (a /proc/self/cgroup, a mountinfo and a cgroup folder tree)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocm_build.common import proc


def _affinity() -> int:
    return len(os.sched_getaffinity(0))


def _host(tmp_path: Path, cgroup: str, mounts: list[str]) -> tuple[Path, Path]:
    """A /proc/self/cgroup and a /proc/self/mountinfo; mount lines are ``ROOT POINT FSTYPE OPTS``
    with POINT under tmp_path."""
    proc_cgroup = tmp_path / "cgroup"
    proc_cgroup.write_text(cgroup)
    lines = []
    for i, mount in enumerate(mounts):
        root, point, fstype, options = mount.split()
        lines.append(
            f"{30 + i} 23 0:{40 + i} {root} {tmp_path / point} rw,nosuid,nodev,noexec,relatime "
            f"shared:{9 + i} - {fstype} {fstype} rw,{options}"
        )
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text("\n".join(lines) + "\n")
    return proc_cgroup, mountinfo


def _write(folder: Path, files: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text + "\n")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("max 100000", None), ("150000 100000", 1.5), ("50000 100000", 0.5), ("", None),
     ("max", None), ("x 100000", None), ("100000 0", None)],
)  # fmt: skip
def test_cpu_max(text: str, expected: float | None) -> None:
    assert proc.parse_cpu_max(text) == expected


@pytest.mark.parametrize(
    ("quota", "period", "expected"),
    [("-1", "100000", None), ("200000", "100000", 2.0), ("25000\n", "100000\n", 0.25)],
)
def test_cfs_quota(quota: str, period: str, expected: float | None) -> None:
    assert proc.parse_cfs(quota, period) == expected


def test_v2_the_smallest_quota_up_to_the_root_binds(tmp_path: Path) -> None:
    """A service's cgroup without a limit, inside a slice limited to 2.5 CPUs."""
    cgroup, mountinfo = _host(
        tmp_path, "0::/user.slice/build.service\n", ["/ sys/fs/cgroup cgroup2 nsdelegate"]
    )
    top = tmp_path / "sys/fs/cgroup"
    _write(top / "user.slice", {"cpu.max": "250000 100000"})
    _write(top / "user.slice/build.service", {"cpu.max": "max 100000"})
    assert proc.cgroup_quota(cgroup, mountinfo) == 2.5
    _write(top / "user.slice/build.service", {"cpu.max": "100000 100000"})
    assert proc.cgroup_quota(cgroup, mountinfo) == 1.0


def test_v2_in_a_container_with_its_own_cgroup_namespace(tmp_path: Path) -> None:
    """docker --cpus 1.5: the container sees its cgroup as the root of the mount."""
    cgroup, mountinfo = _host(tmp_path, "0::/\n", ["/ sys/fs/cgroup cgroup2 nsdelegate"])
    _write(tmp_path / "sys/fs/cgroup", {"cpu.max": "150000 100000"})
    assert proc.cgroup_quota(cgroup, mountinfo) == 1.5
    assert proc.cpus_available(cgroup, mountinfo) == min(2, _affinity())  # 1.5 CPUs: 2 workers


def test_v1_with_a_mounted_sub_tree(tmp_path: Path) -> None:
    """cgroup v1 in a container without a cgroup namespace: the mount's root is the container's
    cgroup, /proc/self/cgroup names it from the hierarchy's root; cpu and cpuacct together."""
    cgroup, mountinfo = _host(
        tmp_path,
        "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n",
        ["/docker/abc sys/fs/cgroup/cpu,cpuacct cgroup cpu,cpuacct",
         "/docker/abc sys/fs/cgroup/memory cgroup memory"],
    )  # fmt: skip
    folder = tmp_path / "sys/fs/cgroup/cpu,cpuacct"
    _write(folder, {"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"})
    assert proc.cgroup_quota(cgroup, mountinfo) == 0.5
    assert proc.cpus_available(cgroup, mountinfo) == 1
    _write(folder, {"cpu.cfs_quota_us": "-1"})
    assert proc.cgroup_quota(cgroup, mountinfo) is None
    assert proc.cpus_available(cgroup, mountinfo) == _affinity()


def test_no_quota_anywhere_leaves_the_affinity(tmp_path: Path) -> None:
    cgroup, mountinfo = _host(tmp_path, "0::/a\n", ["/ sys/fs/cgroup cgroup2 nsdelegate"])
    (tmp_path / "sys/fs/cgroup/a").mkdir(parents=True)  # no cpu controller: no cpu.max
    assert proc.cgroup_quota(cgroup, mountinfo) is None
    assert proc.cpus_available(cgroup, mountinfo) == _affinity()
    # unreadable /proc files: no quota known
    assert proc.cgroup_quota(tmp_path / "absent", mountinfo) is None


def test_a_quota_above_the_affinity_leaves_the_affinity(tmp_path: Path) -> None:
    cgroup, mountinfo = _host(tmp_path, "0::/\n", ["/ sys/fs/cgroup cgroup2 nsdelegate"])
    _write(tmp_path / "sys/fs/cgroup", {"cpu.max": f"{(_affinity() + 3) * 100000} 100000"})
    assert proc.cpus_available(cgroup, mountinfo) == _affinity()
