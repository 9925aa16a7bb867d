"""The division of this process's CPUs among concurrent sweep trials: each trial's share (cores,
thread budget, environment), an agent's slot among the agents started together, and the check of
`cpus_per_trial`. No torch import: the sweeper and the agents use this module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from trainer.hardware.cpu_limits import (  # noqa: F401 (the limits the sweep side divides)
    COMPILE_THREADS_VAR,
    ENV_BUDGET,
    THREAD_VARS,
    CpuLimits,
    cgroup_cpu_quota,
    format_cpu_list,
    parse_cpu_list,
    process_limits,
)

ENV_SLOT = "TRAINER_CPU_SLOT"  # "i/N": an agent's slot among the agents started together
ENV_PER_TRIAL = "TRAINER_CPUS_PER_TRIAL"  # hydra.sweeper.cpus_per_trial, handed to the agents


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


def cpus_per_trial_problems(value: int | None, limits: CpuLimits | None = None) -> list[str]:
    """Problems of `hydra.sweeper.cpus_per_trial=value` on this machine (none when null)."""
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
