"""How many compile jobs a build runs: the cores, bounded by the memory available."""

from __future__ import annotations

from pathlib import Path

__all__ = ["GIB", "default_jobs", "memory_available"]

GIB = 1 << 30


def memory_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """Bytes of memory available to new processes (MemAvailable), or None when unknown."""
    try:
        for line in meminfo.read_text(encoding="ascii").splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def default_jobs(cores: int, available: int | None, job_memory_gb: float) -> int:
    """The smaller of the core count and how many jobs of ``job_memory_gb`` fit in memory."""
    jobs = max(cores, 1)
    if available is not None and job_memory_gb > 0:
        jobs = min(jobs, int(available // (job_memory_gb * GIB)))
    return max(jobs, 1)
