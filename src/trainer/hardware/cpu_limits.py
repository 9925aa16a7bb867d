"""The CPUs this process may use (affinity and cgroup quota) and the environment variables that
carry a run's CPU budget. A run sizes its own thread pools from this in `threads.py`; the sweep
side divides the same limits among concurrent trials (`trainer.sweep.agents.cpu_share`).
No torch import: the sweeper and the agents use this module too."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

ENV_BUDGET = "TRAINER_CPU_BUDGET"  # CPUs of a trial's share, set by the agent that starts it
# Thread pools of the numeric libraries a trial (and its child processes) may start.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
COMPILE_THREADS_VAR = "TORCHINDUCTOR_COMPILE_THREADS"  # Inductor's parallel compile workers
CGROUP_ROOT = Path("/sys/fs/cgroup")


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """'0-3,6,8-9' (the kernel's cpulist format) -> (0, 1, 2, 3, 6, 8, 9)."""
    cores: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        first, _, last = part.partition("-")
        cores.update(range(int(first), int(last or first) + 1))
    return tuple(sorted(cores))


def format_cpu_list(cores: tuple[int, ...] | list[int]) -> str:
    """(0, 1, 2, 3, 6) -> '0-3,6'; the inverse of parse_cpu_list."""
    ranges: list[str] = []
    ordered = sorted(set(cores))
    start = prev = None
    for core in [*ordered, None]:
        if core is not None and prev is not None and core == prev + 1:
            prev = core
            continue
        if start is not None:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = core
    return ",".join(ranges)


def _quota_v2(text: str) -> float | None:
    """cpu.max ('max 100000' or '150000 100000') -> CPUs (1.5), None when unlimited."""
    quota, _, period = text.strip().partition(" ")
    if quota == "max" or not period:
        return None
    return int(quota) / int(period)


def _quota_v1(quota_text: str, period_text: str) -> float | None:
    """cpu.cfs_quota_us / cpu.cfs_period_us -> CPUs, None when the quota is -1 (unlimited)."""
    quota, period = int(quota_text.strip()), int(period_text.strip())
    return None if quota <= 0 or period <= 0 else quota / period


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:  # absent (no such controller, or a path outside this namespace)
        return None


def _ancestors(directory: Path, root: Path) -> Iterator[Path]:
    """The cgroup's own directory and each parent up to the mount point (limits nest)."""
    while True:
        yield directory
        if directory == root or root not in directory.parents:
            return
        directory = directory.parent


def cgroup_cpu_quota(cgroup_text: str, root: Path = CGROUP_ROOT) -> float | None:
    """The CPU bandwidth this process's cgroup allows, in CPUs (the tightest of the cgroup and
    its ancestors, v2 `cpu.max` or v1 `cpu.cfs_quota_us`), or None when nothing limits it.

    `cgroup_text` is /proc/self/cgroup; `root` the cgroup mount point."""
    limits: list[float] = []
    for line in cgroup_text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        relative = path.strip().lstrip("/")
        if hierarchy == "0" and controllers == "":  # cgroup v2 (unified)
            base = root if (root / "cgroup.controllers").exists() else root / "unified"
            for folder in _ancestors(base / relative, base):
                text = _read(folder / "cpu.max")
                if text is not None and (cpus := _quota_v2(text)) is not None:
                    limits.append(cpus)
        elif "cpu" in controllers.split(","):  # cgroup v1, mounted as cpu or cpu,cpuacct
            for mount in (root / "cpu", root / "cpu,cpuacct", root / controllers):
                if not mount.is_dir():
                    continue
                for folder in _ancestors(mount / relative, mount):
                    quota = _read(folder / "cpu.cfs_quota_us")
                    period = _read(folder / "cpu.cfs_period_us")
                    cpus = None if quota is None or period is None else _quota_v1(quota, period)
                    if cpus is not None:
                        limits.append(cpus)
                break
    return min(limits) if limits else None


@dataclass(frozen=True)
class CpuLimits:
    """What this process may use: the cores of its affinity mask and its cgroup's CPU quota."""

    cores: tuple[int, ...]  # CPU ids this process may run on (os.sched_getaffinity)
    quota: float | None = None  # CPUs' worth of time its cgroup allows (None: no quota)

    @property
    def count(self) -> int:
        """CPUs this process can keep busy: its cores, fewer when the quota is lower (rounded
        up, as loky and the JVM do: a 1.5-CPU quota keeps two threads busy half the time)."""
        if self.quota is None:
            return max(1, len(self.cores))
        return max(1, min(len(self.cores), math.ceil(self.quota)))


def process_limits() -> CpuLimits:
    """The CPUs this process may use, read from the OS now."""
    if hasattr(os, "sched_getaffinity"):
        cores = tuple(sorted(os.sched_getaffinity(0)))
    else:  # macOS, Windows: no affinity mask, every core
        cores = tuple(range(os.cpu_count() or 1))
    text = _read(Path("/proc/self/cgroup"))
    return CpuLimits(cores, cgroup_cpu_quota(text) if text else None)
