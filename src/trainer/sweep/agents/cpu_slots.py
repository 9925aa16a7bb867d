"""Which cores the live agents of one local sweep hold (`cpu_slots.json` in the sweep
directory, changed under an fcntl lock): an agent that joins later takes free cores only, and a
dead agent's cores are free again."""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from trainer.cpu_share import (
    ENV_PER_TRIAL,
    ENV_SLOT,
    CpuLimits,
    Share,
    format_cpu_list,
    parse_slot,
    plan_shares,
    process_limits,
)
from trainer.layout import SweepLayout, write_text_atomic

WAIT_S = 1.0  # how often an agent with no free core looks again


def _start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused PID apart), or None
    when it is gone, a zombie, or there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if stat[0] in ("Z", "X") else int(stat[19])


def alive(pid: int, start: int | None) -> bool:
    """Whether the agent that wrote (pid, start) still runs."""
    if not Path("/proc").is_dir():  # no /proc: trust the signal check
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    ticks = _start_ticks(pid)
    return ticks is not None and (start is None or ticks == start)


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
    """The table of one sweep directory."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        self.path = SweepLayout(self.dir).cpu_slots

    @contextmanager
    def _table(self) -> Iterator[dict[str, Any]]:
        """The table, dead agents dropped, locked; what the block leaves in it is written."""
        with open(SweepLayout(self.dir).cpu_slots_lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                table = json.loads(self.path.read_text()) if self.path.is_file() else {}
            except json.JSONDecodeError:  # written atomically: only a hand edit gets here
                table = {}
            agents = table.setdefault("agents", {})
            for pid in [p for p, e in agents.items() if not alive(int(p), e.get("start"))]:
                del agents[pid]
            yield table
            write_text_atomic(self.path, json.dumps(table, indent=2, sort_keys=True))

    def held(self) -> dict[int, tuple[int, ...]]:
        """The cores each live agent holds, by PID."""
        with self._table() as table:
            return {int(p): tuple(e["cores"]) for p, e in table["agents"].items()}

    def claim(
        self,
        pid: int,
        *,
        slot: tuple[int, int] | None,
        per_trial: int | None,
        limits: CpuLimits,
    ) -> tuple[Share | None, dict[int, tuple[int, ...]]]:
        """Record `pid`'s share (see `choose`); return it (None: nothing free) and the cores
        the other live agents hold."""
        with self._table() as table:
            agents = table["agents"]
            agents.pop(str(pid), None)
            if slot is not None:  # started by the sweep command: its per-trial size is the sweep's
                table["per_trial"] = per_trial
            elif per_trial is None:
                per_trial = table.get("per_trial")
            share = choose(limits, list(agents.values()), slot=slot, per_trial=per_trial)
            others = {int(p): tuple(e["cores"]) for p, e in agents.items()}
            if share is not None:
                agents[str(pid)] = {
                    "cores": list(share.cores),
                    "cpus": share.cpus,
                    "start": _start_ticks(pid),
                }
            return share, others

    def release(self, pid: int) -> None:
        with self._table() as table:
            table["agents"].pop(str(pid), None)


def _given(per_trial: int | None) -> tuple[tuple[int, int] | None, int | None]:
    """This agent's slot, and the per-trial size (`per_trial`, else the sweep's), from the
    environment the sweep command gives its agents."""
    given = os.environ.get(ENV_PER_TRIAL, "")
    if per_trial is None and given.isdigit():
        per_trial = int(given)
    return parse_slot(os.environ.get(ENV_SLOT)), per_trial


def planned_share() -> Share | None:
    """The share `claim_share` gives this agent when the sweep's other agents hold none of its
    slot's cores (always so in a new sweep); None for an agent without a slot."""
    slot, per_trial = _given(None)
    if slot is None:
        return None
    return plan_shares(process_limits(), slot[1], per_trial)[slot[0]]


def claim_share(
    directory: str | Path,
    *,
    per_trial: int | None = None,
    stop: Callable[[], bool] = lambda: False,
    say: Callable[[str], None] = print,
) -> Share | None:
    """This agent's share of the CPUs in the sweep at `directory`, waiting while the sweep's
    other agents hold every core (None when `stop()` turns true first). The slot and the
    sweep's per-trial size come from the environment the sweep command gives its agents;
    `per_trial` (the agent's own option) wins over the latter."""
    slot, per_trial = _given(per_trial)
    limits = process_limits()
    slots = CpuSlots(directory)
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
                    + "); the sweep's other agents hold "
                    + ", ".join(
                        f"{format_cpu_list(c)} (pid {p})" for p, c in sorted(others.items())
                    )
                )
            return share
        if not told:
            say(
                "agent: every CPU this process may use is held by the sweep's other agents ("
                + ", ".join(
                    f"pid {p}: cores {format_cpu_list(c)}" for p, c in sorted(others.items())
                )
                + "); waiting for one to end rather than slowing them all down"
            )
            told = True
        time.sleep(WAIT_S)
    return None


def release_share(directory: str | Path) -> None:
    """Free this agent's cores (a dead agent's are freed by the next reader anyway)."""
    CpuSlots(directory).release(os.getpid())
