"""The CPUs this process may use (affinity and cgroup quota) and their division among concurrent
sweep trials (cores, environment). A run sizes its own thread pools from this in `threads.py`.
No torch import: the sweeper and the agents use this module too."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

ENV_BUDGET = "TRAINER_CPU_BUDGET"  # CPUs of a trial's share, set by the agent that starts it
ENV_SLOT = "TRAINER_CPU_SLOT"  # "i/N": an agent's slot among the agents started together
ENV_PER_TRIAL = "TRAINER_CPUS_PER_TRIAL"  # hydra.sweeper.cpus_per_trial, handed to the agents
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


@dataclass(frozen=True)
class Share:
    """One trial's share of the CPUs: a thread budget and, where possible, its own cores."""

    cpus: int  # thread budget: intra-op threads + DataLoader workers fit in it
    cores: tuple[int, ...]  # CPU affinity of the trial (empty: no affinity is set)
    slot: int = 0  # this share's index among `slots`
    slots: int = 1  # shares the CPUs were divided into

    def env(self) -> dict[str, str]:
        """The environment a trial gets: its budget, and every thread pool sized to it."""
        budget = str(self.cpus)
        return {
            ENV_BUDGET: budget,
            COMPILE_THREADS_VAR: budget,
            **dict.fromkeys(THREAD_VARS, budget),
        }


def plan_shares(limits: CpuLimits, slots: int, per_trial: int | None = None) -> list[Share]:
    """Divide `limits` among `slots` concurrent trials: `per_trial` CPUs each, or an equal
    share (at least one) when None. Slot i takes the next block of cores, so the sets are
    disjoint while they fit and wrap around (shared cores) when more slots than cores ask."""
    slots = max(1, slots)
    cpus = per_trial if per_trial is not None else max(1, limits.count // slots)
    cores = limits.cores
    shares = []
    for slot in range(slots):
        if cores and cpus <= len(cores):
            start = slot * cpus
            mine = tuple(sorted({cores[(start + k) % len(cores)] for k in range(cpus)}))
        else:  # more CPUs asked than cores: the whole mask
            mine = tuple(cores)
        shares.append(Share(cpus=cpus, cores=mine, slot=slot, slots=slots))
    return shares


def per_trial_problem(value: Any, limits: CpuLimits, key: str) -> str | None:
    """Why `key=value` cannot be a number of CPUs per trial here, or None when it can."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return (
            f"{key}={value!r} must be a positive number of CPUs per trial, or null for an equal "
            "share of this process's CPUs among the concurrent trials"
        )
    if value > limits.count:
        return (
            f"{key}={value} is more CPUs than this process may use ({_describe(limits)}); set "
            f"{key} to at most {limits.count}, or null for an equal share"
        )
    return None


def _describe(limits: CpuLimits) -> str:
    text = f"{limits.count}: cores {format_cpu_list(limits.cores)}"
    return text + (f", cgroup quota {limits.quota:g} CPUs" if limits.quota is not None else "")


def sweep_problems(options: dict[str, Any], limits: CpuLimits | None = None) -> list[str]:
    """Problems of `hydra.sweeper.cpus_per_trial` on this machine (none when it is null)."""
    value = options.get("cpus_per_trial")
    if value is None:
        return []
    problem = per_trial_problem(value, limits or process_limits(), "hydra.sweeper.cpus_per_trial")
    return [problem] if problem else []


def slot_env(slot: int, slots: int, per_trial: int | None) -> dict[str, str]:
    """The environment of agent `slot` of `slots` started together by one sweep command."""
    env = {ENV_SLOT: f"{slot}/{slots}"}
    if per_trial is not None:
        env[ENV_PER_TRIAL] = str(per_trial)
    return env


def parse_slot(text: str | None) -> tuple[int, int] | None:
    """'1/4' -> (1, 4); None (or junk) -> None."""
    if not text:
        return None
    index, _, total = text.partition("/")
    try:
        slot, slots = int(index), int(total)
    except ValueError:
        return None
    return (slot, slots) if 0 <= slot < slots else None


@contextmanager
def inherited_affinity(cores: tuple[int, ...]) -> Iterator[None]:
    """Processes started inside this block run on `cores`: the calling thread's affinity is
    narrowed for the start (a child inherits it) and restored after. No-op without cores or
    where the OS has no affinity."""
    if not cores or not hasattr(os, "sched_setaffinity"):
        yield
        return
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, previous)
