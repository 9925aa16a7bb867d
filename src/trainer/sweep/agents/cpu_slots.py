"""Which cores the live agents of one local sweep hold: their rows of the store's slot ledger
(`agent_slots` in sweep.db, beside the devices each running run holds), changed in the store's
transactions and judged alive as runs are (trainer.sweep.store.liveness). Cores are a machine's:
an agent counts the slots of its own host only. An agent that joins later takes free cores only,
and a dead agent's cores are free again."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainer.sweep.agents.cpu_share import (
    ENV_PER_TRIAL,
    ENV_SLOT,
    CpuLimits,
    Share,
    format_cpu_list,
    parse_slot,
    plan_shares,
    process_limits,
)
from trainer.sweep.store.database import SweepStore
from trainer.sweep.store.directory import SweepLayout
from trainer.sweep.store.liveness import Holder, this_host
from trainer.sweep.store.reconnect import retrying

WAIT_S = 1.0  # how often an agent with no free core looks again
PER_TRIAL_KEY = "cpus_per_trial"  # the sweep's per-trial size, set by the agents it started


def pick_cores(
    cores: tuple[int, ...], used: set[int], want: int, preferred: tuple[int, ...] = ()
) -> tuple[int, ...]:
    """Up to `want` of `cores` that are not `used`, `preferred` ones first."""
    free = [c for c in cores if c not in used]
    ordered = [c for c in preferred if c in free] + [c for c in free if c not in preferred]
    return tuple(sorted(ordered[: max(0, want)]))


def choose(
    limits: CpuLimits,
    held: list[dict[str, Any]],
    *,
    slot: tuple[int, int] | None,
    per_trial: int | None,
) -> Share | None:
    """The share of a new agent, given the shares `held` by the sweep's other live agents.

    Slot i of N (agents started together by one command) gets its planned block of cores,
    or free ones when another agent holds those; it shares cores rather than wait when the
    command asked for more agents than there are cores. An agent without a slot (one that
    joins later) takes only free cores and CPU time, `per_trial` of them (all free ones when
    None), or None: nothing is free."""
    used = {core for entry in held for core in entry["cores"]}
    busy_cpus = sum(int(entry["cpus"]) for entry in held)
    if slot is not None:
        planned = plan_shares(limits, slot[1], per_trial)[slot[0]]
        if not used & set(planned.cores):
            return planned
        got = pick_cores(limits.cores, used, planned.cpus, planned.cores)
        if not got:
            return planned
        return Share(cpus=len(got), cores=got, slot=slot[0], slots=slot[1])
    room = limits.count - busy_cpus  # the cgroup quota may run out before the cores do
    want = min(per_trial or room, room)
    got = pick_cores(limits.cores, used, want)
    if not got:
        return None
    return Share(cpus=len(got), cores=got, slot=len(held), slots=len(held) + 1)


class CpuSlots:
    """The CPU slots of one sweep (its store, or the directory that holds its sweep.db)."""

    def __init__(self, where: str | Path | SweepStore) -> None:
        self.store = where if isinstance(where, SweepStore) else SweepStore(SweepLayout(where).db)

    @retrying
    def held(self) -> dict[int, tuple[int, ...]]:
        """The cores each live agent of this host holds, by PID."""
        with self.store.transaction() as db:
            slots = self.store.cpu_slots(db)
        return {s.holder.pid: s.cores for s in slots if s.holder.host == this_host()}

    @retrying
    def claim(
        self,
        pid: int,
        *,
        slot: tuple[int, int] | None,
        per_trial: int | None,
        limits: CpuLimits,
    ) -> tuple[Share | None, dict[int, tuple[int, ...]]]:
        """Record the share of `pid` (an agent of this host; see `choose`); return it (None:
        nothing free) and the cores the host's other live agents hold."""
        agent = Holder.of(pid)
        with self.store.transaction() as db:
            others = {
                s.holder.pid: s
                for s in self.store.cpu_slots(db)
                if s.holder.host == agent.host and s.holder.pid != pid
            }
            if slot is not None:  # started by the sweep command: its per-trial size is the sweep's
                self.store.set(PER_TRIAL_KEY, per_trial, db)
            elif per_trial is None:
                per_trial = self.store.get(PER_TRIAL_KEY, db=db)  # read inside this transaction
            held = [{"cores": list(s.cores), "cpus": s.cpus} for s in others.values()]
            share = choose(limits, held, slot=slot, per_trial=per_trial)
            cores = None if share is None else share.cores
            self.store.hold_cpu_slot(db, agent, cores, 0 if share is None else share.cpus)
        return share, {p: s.cores for p, s in others.items()}

    @retrying
    def release(self, pid: int) -> None:
        with self.store.transaction() as db:
            self.store.hold_cpu_slot(db, Holder.of(pid), None)


def _given(per_trial: int | None) -> tuple[tuple[int, int] | None, int | None]:
    """This agent's slot, and the per-trial size (`per_trial`, else the sweep's), from the
    environment the sweep command gives its agents."""
    given = os.environ.get(ENV_PER_TRIAL, "")
    if per_trial is None and given.isdigit():
        per_trial = int(given)
    return parse_slot(os.environ.get(ENV_SLOT)), per_trial


def claim_share(
    where: str | Path | SweepStore,
    *,
    per_trial: int | None = None,
    stop: Callable[[], bool] = lambda: False,
    say: Callable[[str], None] = print,
) -> Share | None:
    """This agent's share of the CPUs in the sweep `where` (its store or directory), waiting
    while the sweep's other agents on this machine hold every core (None when `stop()` turns
    true first). The slot and the sweep's per-trial size come from the environment the sweep
    command gives its agents; `per_trial` (the agent's own option) wins over the latter."""
    slot, per_trial = _given(per_trial)
    limits = process_limits()
    slots = CpuSlots(where)
    told = False
    while not stop():
        share, others = slots.claim(os.getpid(), slot=slot, per_trial=per_trial, limits=limits)
        if share is not None:
            shared = {c for cores in others.values() for c in cores} & set(share.cores)
            if told or shared or (others and slot is None):
                say(
                    f"agent: trials run on cores {format_cpu_list(share.cores)} "
                    f"({share.cpus} thread(s)"
                    + (", shared: more agents than cores" if shared else "")
                    + (
                        "); the sweep's other agents here hold "
                        + ", ".join(
                            f"{format_cpu_list(c)} (pid {p})" for p, c in sorted(others.items())
                        )
                        if others
                        else "); no other agent of the sweep holds cores here now"
                    )
                )
            return share
        if not told:
            say(
                "agent: every CPU this process may use is held by the sweep's other agents here ("
                + ", ".join(
                    f"pid {p}: cores {format_cpu_list(c)}" for p, c in sorted(others.items())
                )
                + "); waiting for one to end rather than slowing them all down"
            )
            told = True
        time.sleep(WAIT_S)
    return None


def release_share(where: str | Path | SweepStore) -> None:
    """Free this agent's cores (a dead agent's are freed by the next reader anyway)."""
    CpuSlots(where).release(os.getpid())
