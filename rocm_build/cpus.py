"""How many CPUs this process may use: the CPUs it may run on (its affinity, as ``taskset`` and
cpusets set it) and the CPU time its cgroup may spend (a container's ``--cpus``, a systemd unit's
``CPUQuota``), whichever is less. ``os.cpu_count()`` counts the machine's CPUs and knows neither,
so pools sized by it start 16 workers on 2 CPUs. Every worker count comes from :func:`available`.

A quota of 1.5 CPUs counts as 2: the second worker uses the half CPU the first leaves.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["available", "cgroup_quota", "parse_cfs", "parse_cpu_max"]

PROC_CGROUP = Path("/proc/self/cgroup")
PROC_MOUNTINFO = Path("/proc/self/mountinfo")


def available(proc_cgroup: Path = PROC_CGROUP, mountinfo: Path = PROC_MOUNTINFO) -> int:
    """The CPUs this process may use (at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_quota(proc_cgroup, mountinfo)
    if quota is not None:
        cpus = min(cpus, math.ceil(quota))
    return max(cpus, 1)


def parse_cpu_max(text: str) -> float | None:
    """cgroup v2 ``cpu.max`` (``QUOTA PERIOD``, QUOTA ``max`` for none) as CPUs, or None."""
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _ratio(fields[0], fields[1])


def parse_cfs(quota: str, period: str) -> float | None:
    """cgroup v1 ``cpu.cfs_quota_us`` and ``cpu.cfs_period_us`` as CPUs (quota -1: none)."""
    return _ratio(quota.strip(), period.strip())


def _ratio(quota: str, period: str) -> float | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def cgroup_quota(proc_cgroup: Path = PROC_CGROUP, mountinfo: Path = PROC_MOUNTINFO) -> float | None:
    """The smallest CPU quota on the way from this process's cgroup up to its hierarchy's root
    (a parent's limit binds its children), in CPUs; None when there is none or it is unknown."""
    try:
        memberships = proc_cgroup.read_text(encoding="utf-8").splitlines()
        mounts = mountinfo.read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    quotas = []
    for mount, sub, version in _cpu_cgroups(memberships, mounts):
        for level in (sub, *sub.parents):  # sub is relative: its last parent is the mount's root
            quota = _read_quota(mount / level, version)
            if quota is not None:
                quotas.append(quota)
    return min(quotas, default=None)


def _cpu_cgroups(memberships: list[str], mounts: list[str]) -> list[tuple[Path, Path, int]]:
    """This process's cgroups that have the cpu controller: (mount point, the cgroup's folder
    relative to it, 2 for cgroup v2 or 1 for v1) per hierarchy."""
    paths: dict[str, str] = {}  # "" for v2, else the v1 hierarchy's controllers
    for line in memberships:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "" or "cpu" in controllers.split(","):
            paths[controllers] = path
    found = []
    for line in mounts:
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, point, fstype, options = fields[3], fields[4], tail[0], tail[2].split(",")
        if fstype == "cgroup2" and "" in paths:
            version, path = 2, paths[""]
        elif fstype == "cgroup" and "cpu" in options:
            key = next((k for k in paths if k and set(k.split(",")) <= set(options)), None)
            if key is None:
                continue
            version, path = 1, paths[key]
        else:
            continue
        # In a cgroup namespace the path is relative to the mount's root already; outside one,
        # a mount of a sub-tree (a container's view) starts at ``root``.
        if root != "/" and (path == root or path.startswith(root + "/")):
            path = path[len(root) :]
        found.append((Path(point), Path(path.lstrip("/")), version))
    return found


def _read_quota(folder: Path, version: int) -> float | None:
    try:
        if version == 2:
            return parse_cpu_max(folder.joinpath("cpu.max").read_text(encoding="ascii"))
        quota = folder.joinpath("cpu.cfs_quota_us").read_text(encoding="ascii")
        return parse_cfs(quota, folder.joinpath("cpu.cfs_period_us").read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError):
        return None
