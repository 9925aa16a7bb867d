"""One run's thread pools: torch intra-op and inter-op threads and DataLoader workers sized to
the run's CPU share (`trainer.num_threads`, its sweep agent's share, or the CPUs it may use),
and the `cpu` section of summary.json that records them."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

import torch

from trainer.hardware.cpu_limits import ENV_BUDGET, THREAD_VARS, CpuLimits, process_limits

log = logging.getLogger(__name__)


def budget(limits: CpuLimits | None = None) -> int:
    """This process's CPU budget: the agent's share when it set one, else what it may use."""
    given = os.environ.get(ENV_BUDGET, "")
    if given.isdigit() and int(given) > 0:
        return int(given)
    return (limits or process_limits()).count


def worker_budget(requested: int, cpus: int) -> int:
    """DataLoader workers that fit a share of `cpus` next to the training thread: at most
    cpus - 1 (a 1-CPU share loads in the training process)."""
    return max(0, min(requested, cpus - 1))


def cap_workers(requested: int) -> int:
    """`data.num_workers` capped to this process's worker budget (logged when it is lower)."""
    allowed = worker_budget(requested, budget())
    if allowed < requested:
        log.info(
            "data.num_workers=%d capped to %d: this run's CPU share is %d",
            requested,
            allowed,
            budget(),
        )
    return allowed


@dataclass(frozen=True)
class CpuPlan:
    """How many threads a run uses, and why."""

    threads: int  # torch intra-op threads
    interop_threads: int  # torch inter-op threads
    workers: int  # DataLoader workers (data.num_workers capped to the budget)
    budget: int  # the CPUs of this run's share
    source: str  # trainer.num_threads | agent share | process CPUs


def plan_threads(
    num_threads: Any, num_workers: int, cpus: int, from_agent: bool, outside: int | None = None
) -> CpuPlan:
    """The threads of one run: `trainer.num_threads` when set; else its agent's share, or the
    OMP_NUM_THREADS its launcher set (`outside`: torchrun, a batch script), or the CPUs it may
    use; a share is the training threads plus the DataLoader workers."""
    workers = worker_budget(num_workers, cpus)
    if num_threads != "auto":
        threads, source = int(num_threads), "trainer.num_threads"
    elif from_agent or outside is None:
        threads = max(1, cpus - workers)
        source = "agent share" if from_agent else "process CPUs"
    else:
        threads, source = outside, "OMP_NUM_THREADS"
    return CpuPlan(threads, threads, workers, cpus, source)


_OUTSIDE: dict[str, str | None] = {}  # OMP_NUM_THREADS as this process found it (apply sets it)


def _outside_threads() -> int | None:
    """A positive OMP_NUM_THREADS given to this process from outside, else None."""
    given = _OUTSIDE.setdefault("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS")) or ""
    return int(given) if given.strip().isdigit() and int(given) > 0 else None


def apply(num_threads: Any, num_workers: int) -> CpuPlan:
    """Size torch's thread pools (and those of child processes) for this run; call it before
    any parallel work starts."""
    outside = _outside_threads()
    plan = plan_threads(num_threads, num_workers, budget(), ENV_BUDGET in os.environ, outside)
    torch.set_num_threads(plan.threads)
    if torch.get_num_interop_threads() != plan.interop_threads:
        try:
            torch.set_num_interop_threads(plan.interop_threads)
        except RuntimeError as err:  # set once per process: a second in-process run keeps it
            log.info("torch inter-op threads stay %d (%s)", torch.get_num_interop_threads(), err)
    for name in THREAD_VARS:  # DataLoader workers and compile workers inherit these
        os.environ[name] = str(plan.threads)
    return plan


def record(plan: CpuPlan) -> dict[str, Any]:
    """The `cpu` section of summary.json: what this run actually used."""
    limits = process_limits()
    return {
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "affinity": list(limits.cores),
        "cgroup_quota": limits.quota,
        "dataloader_workers": plan.workers,
        "budget": plan.budget,
        "source": plan.source,
    }


def auto_workers(local_ranks: int = 1) -> int:
    """`data.num_workers=auto`: this process's part of the CPU share (the node's CPUs divided
    among its `local_ranks` torchrun ranks) minus the training thread, at most 8."""
    return max(0, min(8, budget() // max(local_ranks, 1) - 1))
